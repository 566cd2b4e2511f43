"""Running LangChain-style middleware hooks inside the consumer that owns each stage.

``before_agent``, ``before_model``, ``after_model`` and ``after_agent`` run in the loop;
``wrap_model_call`` (and ``dynamic_prompt``) in the model consumer; ``wrap_tool_call`` in
the tools consumer. A hook sees the state LangChain would give it (``messages`` plus the
fields middleware keep, stored with the task) and its updates are applied the way
LangGraph applies them between nodes, so a user's middleware runs unchanged.

Middleware come from the agent spec, built by ``services.spec.middleware`` (todos and
context editing, which the services implement natively, are not run as hooks).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from contracts.agent import AgentSpec
from services.spec.middleware import NATIVE, build

STATE_HOOKS = ("before_agent", "before_model", "after_model", "after_agent")


def _base() -> Any:
    from langchain.agents.middleware import AgentMiddleware

    return AgentMiddleware


def implements(instance: Any, name: str) -> bool:
    """Whether the middleware's class overrides ``name`` (``before_model``,
    ``abefore_model``, ...) of ``AgentMiddleware``, as LangChain decides."""
    return getattr(type(instance), name, None) is not getattr(_base(), name, None)


def overrides(instance: Any, hook: str) -> bool:
    """Whether the middleware implements a hook (sync or async), as LangChain decides."""
    return implements(instance, hook) or implements(instance, f"a{hook}")


NO_SYNC_NODE = (
    'No synchronous function provided to "{name}".\nEither initialize with a synchronous '
    "function or invoke via the async API (ainvoke, astream, etc.)"
)
"""LangGraph's error (``RunnableCallable.invoke``) for an async-only before/after hook of
a run started by ``invoke``; ``wrap_*`` hooks raise LangChain's own NotImplementedError
from ``AgentMiddleware``'s default of the missing variant."""


@dataclass
class HookSet:
    """An agent's middleware instances, by the hooks they implement, in list order."""

    instances: list[tuple[int, Any]] = field(default_factory=list)
    context: Any = None
    """The run's context (``AgentSpec.context``): what ``runtime.context`` gives a hook."""
    mode: str | None = None
    """``AgentSpec.run_mode``: which variant of each hook runs."""

    def with_hook(self, hook: str) -> list[tuple[int, Any]]:
        return [(i, m) for i, m in self.instances if overrides(m, hook)]

    @property
    def has_state_hooks(self) -> bool:
        return any(self.with_hook(h) for h in STATE_HOOKS)


_cache: dict[str, HookSet] = {}
HOOK_SETS_CACHED = 1024
"""Agents whose middleware instances a process keeps (each per-run override is an agent
of its own); past it the cache starts over."""


def hooks_for(agent_id: str, spec: AgentSpec) -> HookSet:
    found = _cache.get(agent_id)
    if found is None:
        found = HookSet(
            [(i, build(m)) for i, m in enumerate(spec.middleware) if m.type not in NATIVE],
            context=spec.context,
            mode=spec.run_mode,
        )
        if len(_cache) >= HOOK_SETS_CACHED:
            _cache.clear()
        _cache[agent_id] = found
    return found


def lg_runtime(context: Any = None) -> Any:
    """LangGraph's ``Runtime`` a hook gets: ``runtime.context`` is the task's context,
    ``runtime.store`` the deployment's store (``services.store``), shared by every
    service."""
    from langgraph.runtime import Runtime

    from services import store

    return Runtime(context=context, store=store.shared())


async def call_state_hook(
    instance: Any, hook: str, state: dict[str, Any], context: Any = None, mode: str | None = None
) -> dict[str, Any]:
    """One before/after hook, the variant LangGraph's node runs: a sync run (``mode``
    ``"sync"``) the sync one (an async-only hook fails as LangGraph's node does);
    otherwise the async one when implemented, else the sync one in a thread (LangGraph
    runs sync hooks of async runs the same way)."""
    runtime = lg_runtime(context)
    if mode == "sync" and not implements(instance, hook):
        raise TypeError(NO_SYNC_NODE.format(name=f"a{hook}"))
    if mode != "sync" and implements(instance, f"a{hook}"):
        result = await getattr(instance, f"a{hook}")(state, runtime)
    else:
        result = await asyncio.to_thread(getattr(instance, hook), state, runtime)
    if result is None:
        return {}
    if not isinstance(result, dict):
        raise TypeError(f"{type(instance).__name__}.{hook} returned {type(result).__name__}")
    return result


def can_jump(instance: Any, hook: str, target: str) -> bool:
    for name in (f"a{hook}", hook):
        method = getattr(type(instance), name, None)
        func = getattr(method, "__func__", method)
        if target in (getattr(func, "__can_jump_to__", None) or []):
            return True
    return False


@dataclass
class StateResult:
    """What a run of state hooks decided."""

    messages: list[Any]  # the full message list after the hooks (langchain messages)
    extra: dict[str, Any]
    jump_to: str | None = None
    changed: bool = False


def merge_messages(current: list[Any], updates: Sequence[Any]) -> list[Any]:
    """LangGraph's ``add_messages``: same id replaces, ``RemoveMessage`` deletes (the
    special id removes all), anything else appends."""
    from langchain_core.messages import RemoveMessage
    from langchain_core.messages.utils import convert_to_messages
    from langgraph.graph.message import REMOVE_ALL_MESSAGES

    result = list(current)
    for message in convert_to_messages(list(updates)):
        if not message.id:  # add_messages gives every new message an id
            message = message.model_copy(update={"id": f"{STAND_IN_ID}{uuid.uuid4().hex}"})
        if isinstance(message, RemoveMessage):
            if message.id == REMOVE_ALL_MESSAGES:
                result = []
            else:
                result = [m for m in result if m.id != message.id]
            continue
        index = next((i for i, m in enumerate(result) if message.id and m.id == message.id), None)
        if index is None:
            result.append(message)
        else:
            result[index] = message
    return result


async def run_state_hooks(
    hooks: HookSet, hook: str, messages: list[Any], extra: dict[str, Any]
) -> StateResult:
    """Run one kind of hook over all middleware: ``before_*`` in list order, ``after_*``
    in reverse (LangChain's order). Each sees the updates of the ones before it."""
    chain = hooks.with_hook(hook)
    if hook.startswith("after"):
        chain = list(reversed(chain))
    state_messages = with_stand_in_ids(messages)
    state_extra = dict(extra)
    changed = False
    for _, instance in chain:
        state = {"messages": state_messages, **state_extra}
        update = await call_state_hook(instance, hook, state, hooks.context, hooks.mode)
        if not update:
            continue
        jump = update.pop("jump_to", None)
        if "messages" in update:
            state_messages = merge_messages(state_messages, update.pop("messages"))
            changed = True
        for key, value in update.items():
            _check_storable(instance, hook, key, value)
            state_extra[key] = value
            changed = True
        if jump and can_jump(instance, hook, jump):
            return StateResult(without_stand_in_ids(state_messages), state_extra, jump, True)
    return StateResult(without_stand_in_ids(state_messages), state_extra, None, changed)


def _check_storable(instance: Any, hook: str, key: str, value: Any) -> None:
    """A state key is stored with the task as JSON, for the hooks of any process: a value
    that is not JSON (a live shell session, say) fails the task with this reason rather
    than leaving it undeliverable."""
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"{type(instance).__name__}.{hook} returned state {key!r} that is not JSON "
            f"({type(value).__name__}): loopline stores a task's state as JSON"
        ) from exc


STAND_IN_ID = "loopline-stand-in:"


def with_stand_in_ids(messages: Sequence[Any]) -> list[Any]:
    """In LangGraph every message in the state has an id (``add_messages`` gives one), so
    a hook that returns the whole list, edited (PIIMiddleware does), replaces messages
    rather than appending copies. Messages stored without one (tool results, say) get a
    stand-in for the duration of the hooks, by position."""
    return [
        m if m.id else m.model_copy(update={"id": f"{STAND_IN_ID}{i}"})
        for i, m in enumerate(messages)
    ]


def without_stand_in_ids(messages: Sequence[Any]) -> list[Any]:
    """The messages as stored: the stand-in ids removed again."""
    return [
        m.model_copy(update={"id": None}) if (m.id or "").startswith(STAND_IN_ID) else m
        for m in messages
    ]


# -- wrap hooks: composed outer-first around the real call ----------------------------

Call = Callable[[Any], Awaitable[Any]]


def _runs_async(instance: Any, hook: str, mode: str | None) -> bool:
    """Which variant of a wrap hook runs: the run's (the other one's absence raises
    LangChain's NotImplementedError from ``AgentMiddleware``'s default), or, for a task
    that did not say (``mode`` None) and for loopline's own middleware
    (``runs_in_any_mode``: the rate limit, the context editor's place in the chain),
    the async one where implemented."""
    if mode is not None and not getattr(instance, "runs_in_any_mode", False):
        return mode == "async"
    return implements(instance, f"a{hook}")


async def call_wrapped(
    instances: Sequence[Any],
    hook: str,
    request: Any,
    base: Call,
    normalize: Callable[[Any], Any],
    mode: str | None = None,
) -> Any:
    """``instances[0]`` outermost; each may call its handler zero or more times.
    ``mode``: the run's (``AgentSpec.run_mode``)."""
    loop = asyncio.get_running_loop()

    async def run(i: int, req: Any) -> Any:
        if i == len(instances):
            return await base(req)
        instance = instances[i]

        async def inner(r: Any) -> Any:
            return await run(i + 1, r)

        if _runs_async(instance, hook, mode):
            return normalize(await getattr(instance, f"a{hook}")(req, inner))

        def sync_inner(r: Any) -> Any:
            return asyncio.run_coroutine_threadsafe(inner(r), loop).result()

        result = await asyncio.to_thread(getattr(instance, hook), req, sync_inner)
        return normalize(result)

    return await run(0, request)

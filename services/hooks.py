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
import contextvars
import functools
import json
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contracts.agent import AgentSpec
from contracts.messages import Message
from services import interrupts
from services.held_callbacks import held_for
from services.interrupts import Answers
from services.spec import schemas
from services.spec.channels import NO_CHANNELS, StateChannels, channels_of
from services.spec.middleware import NATIVE, build
from services.spec.statecodec import StateValueError
from services.state_access import StateAccess, in_config
from services.telemetry import task_in_hand

STATE_HOOKS = ("before_agent", "before_model", "after_model", "after_agent")

SENT = "__sent__"
"""In a hook's update as ``call_state_hook`` returns it: the writes the hook sent through
LangGraph's ``CONFIG_KEY_SEND`` while it ran (``services.state_access``), in order, to be
applied before its returned update (one superstep's writes, as LangGraph applies a node's)."""


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
    """The run's context (``AgentSpec.context``, coerced to its ``context_schema``): what
    ``runtime.context`` gives a hook and ``ToolRuntime.context`` a tool."""
    state_schema: Any = None
    """The agent's ``state_schema`` class (None: LangChain's ``AgentState``)."""
    mode: str | None = None
    """``AgentSpec.run_mode``: which variant of each hook runs."""
    run_config: Mapping[str, Any] = field(default_factory=dict)
    """``AgentSpec.run_config`` (tags, metadata) and its ``recursion_limit``: what a node's
    ``RunnableConfig`` carries besides the thread."""
    _channels: StateChannels | None = field(default=None, repr=False)

    def with_hook(self, hook: str) -> list[tuple[int, Any]]:
        return [(i, m) for i, m in self.instances if overrides(m, hook)]

    @property
    def has_state_hooks(self) -> bool:
        return any(self.with_hook(h) for h in STATE_HOOKS)

    @functools.cached_property
    def wants_config(self) -> bool:
        """Whether a before/after hook takes LangGraph's ``config`` (its thread is then
        read for it)."""
        return any(
            "config" in _accepted(getattr(m, name))
            for _, m in self.instances
            for hook in STATE_HOOKS
            for name in (hook, f"a{hook}")
            if implements(m, name)
        )

    def input_keys(self) -> frozenset[str]:
        """The state keys besides ``messages`` an input may set (LangChain's input schema)."""
        return schemas.state_keys(self.state_schema, (m for _, m in self.instances), "input")

    def output_keys(self) -> frozenset[str]:
        """The state keys besides ``messages`` a result gives (LangChain's output schema)."""
        return schemas.state_keys(self.state_schema, (m for _, m in self.instances), "output")

    def start_state(self, carried: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
        """The state keys a run starts with: the thread's (``carried``) or, for a new
        one, the reducers' empty values, then the input's keys the agent takes (its
        input schema) applied as LangGraph applies an input: through the keys' reducers
        (a list key grows), others replaced; keys no input channel has are dropped."""
        state = {**self.channels.initial(), **carried}
        if given:
            taken = self.input_keys()
            state = self.channels.apply(state, ((k, v) for k, v in given.items() if k in taken))
        return state

    @property
    def channels(self) -> StateChannels:
        """How updates join the state keys (reducers, one write per superstep)."""
        if self._channels is None:
            instances = (m for _, m in self.instances)
            self._channels = channels_of(self.state_schema, instances)
        return self._channels


_cache: dict[str, HookSet] = {}
HOOK_SETS_CACHED = 1024
"""Agents whose middleware instances a process keeps (each per-run override is an agent
of its own); past it the cache starts over."""


def hooks_for(agent_id: str, spec: AgentSpec) -> HookSet:
    found = _cache.get(agent_id)
    if found is None:
        found = HookSet(
            [(i, build(m)) for i, m in enumerate(spec.middleware) if m.type not in NATIVE],
            context=schemas.run_context(spec),
            state_schema=schemas.state_schema(spec),
            mode=spec.run_mode,
            run_config=agent_run_config(spec),
        )
        if len(_cache) >= HOOK_SETS_CACHED:
            _cache.clear()
        _cache[agent_id] = found
    return found


def lg_runtime(context: Any = None) -> Any:
    """LangGraph's ``Runtime`` a hook gets: ``runtime.context`` is the task's context,
    ``runtime.store`` the deployment's store (``services.store``), shared by every
    service, ``runtime.stream_writer`` the running stage's custom stream
    (``services.custom_stream``)."""
    from langgraph.runtime import Runtime

    from services import custom_stream, store

    writer = custom_stream.current()
    if writer is None:
        return Runtime(context=context, store=store.shared())
    return Runtime(context=context, store=store.shared(), stream_writer=writer)


AGENT_RECURSION_LIMIT = 9_999
"""The recursion limit of a run that gives none: what LangChain's ``create_agent`` sets
on its graph (``factory.py``: ``with_config({"recursion_limit": 9_999, ...})``)."""

LS_INTEGRATION = {"ls_integration": "langchain_create_agent"}
"""The metadata LangChain's ``create_agent`` sets on its graph."""

current_thread: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "loopline_hook_thread", default=None
)
"""The thread of the task whose hooks run (set by the loop around them): a node's
``config["configurable"]["thread_id"]``."""


def agent_run_config(spec: AgentSpec) -> dict[str, Any]:
    """The run's config as LangChain's agent runs with it: the task's (tags, metadata),
    its recursion limit, and what ``create_agent`` binds to its graph (``lc_agent_name``
    when the agent is named), which its nodes and the agents its tools run inherit."""
    config: dict[str, Any] = {
        **(spec.run_config or {}),
        "recursion_limit": spec.recursion_limit or AGENT_RECURSION_LIMIT,
    }
    if spec.message_name:  # under the run's own, which may bind another name (with_config)
        config["metadata"] = {"lc_agent_name": spec.message_name, **(config.get("metadata") or {})}
    return config


def node_config(run_config: Mapping[str, Any], node: str, thread_id: str | None) -> Any:
    """The ``RunnableConfig`` LangGraph gives a node of a ``create_agent`` graph: the run's
    tags, metadata and recursion limit, the thread in ``configurable``, LangGraph's
    ``langgraph_*`` metadata of the node (``langgraph_step`` aside: loopline's steps
    are not LangGraph's supersteps)."""
    ns = f"{node}:{uuid.uuid4()}"
    thread = {"thread_id": thread_id} if thread_id else {}
    metadata = {
        **LS_INTEGRATION,
        **dict(run_config.get("metadata") or {}),
        **thread,
        "langgraph_node": node,
        "langgraph_triggers": (f"branch:to:{node}",),
        "langgraph_path": ("__pregel_pull", node),
        "langgraph_checkpoint_ns": ns,
    }
    config: dict[str, Any] = {
        "tags": list(run_config.get("tags") or []),
        "metadata": metadata,
        "recursion_limit": run_config.get("recursion_limit", AGENT_RECURSION_LIMIT),
        "configurable": {**thread, "checkpoint_id": None, "checkpoint_ns": ns},
    }
    return config


def _accepted(func: Any) -> Mapping[str, tuple[str, Any]]:
    """The keyword arguments LangGraph's node passes ``func`` besides the state, by its
    signature (``RunnableCallable.func_accepts``: ``runtime``, ``config``, ``writer``,
    ``store``...), with the ``Runtime`` attribute and default of each."""
    from langgraph._internal._runnable import RunnableCallable

    key = getattr(func, "__func__", func)
    found = _ACCEPTS.get(key)
    if found is None:
        found = _ACCEPTS[key] = dict(RunnableCallable(func, trace=False).func_accepts)
    return found


_ACCEPTS: dict[Any, Mapping[str, tuple[str, Any]]] = {}


def node_kwargs(func: Any, runtime: Any, config: Any) -> dict[str, Any]:
    """What LangGraph's node passes ``func`` by keyword (``RunnableCallable.invoke``)."""
    import inspect

    kwargs: dict[str, Any] = {}
    for kw, (runtime_key, default) in _accepted(func).items():
        if kw == "config":
            kwargs[kw] = config
        elif kw == "runtime":
            kwargs[kw] = runtime
        elif kw == "error":
            kwargs[kw] = default
        else:
            value = getattr(runtime, runtime_key, inspect.Parameter.empty)
            if value is inspect.Parameter.empty:
                if default is inspect.Parameter.empty:
                    raise ValueError(f"Missing required config key '{runtime_key}'")
                value = default
            kwargs[kw] = value
    return kwargs


def node_name(instance: Any, hook: str) -> str:
    """The hook's node as LangChain's ``create_agent`` names it: ``<middleware>.<hook>``."""
    return f"{getattr(instance, 'name', None) or type(instance).__name__}.{hook}"


async def call_state_hook(
    instance: Any,
    hook: str,
    state: dict[str, Any],
    context: Any = None,
    answers: Answers | None = None,
    mode: str | None = None,
    run_config: Mapping[str, Any] | None = None,
    channels: StateChannels = NO_CHANNELS,
) -> dict[str, Any]:
    """One before/after hook, the variant LangGraph's node runs, given what LangGraph's
    node gives it by its signature (``runtime``, ``config``: ``node_config``, ...), with
    the state's read and send in its config (what it sends comes back under ``SENT``): a
    sync run (``mode``
    ``"sync"``) the sync one (an async-only hook fails as LangGraph's node does);
    otherwise the async one when implemented, else the sync one in a thread (LangGraph
    runs sync hooks of async runs the same way). It runs as a LangGraph node
    (``services.interrupts.node``): an ``interrupt()`` in it gets its answer from
    ``answers``, or raises ``NodeInterrupted`` when it has none."""
    runtime = lg_runtime(context)
    node = node_name(instance, hook)
    answers = answers or Answers(scope="")
    if mode == "sync" and not implements(instance, hook):
        raise TypeError(NO_SYNC_NODE.format(name=f"a{hook}"))
    use_async = mode != "sync" and implements(instance, f"a{hook}")
    func = getattr(instance, f"a{hook}" if use_async else hook)
    # the state's read and send, in the node's config as LangGraph's task has them
    access = StateAccess(channels, state)
    # the node's config only for a hook that declares it (most do not: no uuid, no dicts)
    wants = "config" in _accepted(func)
    config = node_config(run_config or {}, node, current_thread.get()) if wants else None
    if config is not None:
        config["configurable"].update(access.configurable())
    kwargs = node_kwargs(func, runtime, config)

    async def run(given: Any) -> Any:
        if use_async:
            return await func(given, **kwargs)
        return await asyncio.to_thread(functools.partial(func, given, **kwargs))

    # the caller's handlers: given with the node's config, or held by the caller's agent in
    # this process for the task in hand (services.held_callbacks; the embedded default)
    callbacks = (run_config or {}).get("callbacks") or held_for(task_in_hand())
    with interrupts.node(node, answers.scope, answers.of(node), runtime), in_config(access):
        if callbacks:  # the caller's handlers see the node's run, as LangGraph's
            result = await traced_node(instance, node, state, run, callbacks, run_config or {})
        else:
            result = await run(state)
    if result is not None and not isinstance(result, dict):
        raise TypeError(f"{type(instance).__name__}.{hook} returned {type(result).__name__}")
    update = dict(result or {})
    if access.writes:
        update[SENT] = list(access.writes)
    return update


async def traced_node(
    instance: Any,
    node: str,
    state: dict[str, Any],
    run: Callable[[Any], Awaitable[Any]],
    callbacks: Any,
    run_config: Mapping[str, Any],
) -> Any:
    """A hook run as LangGraph runs a node of LangChain's agent graph: a chain run named
    ``<middleware>.<hook>`` under the caller's ``callbacks``, its inputs and outputs as
    tracers record them through the middleware's ``trace_policy`` (else the process's
    default, ``configure_trace_policy``). LangGraph's own node sequence does the run, so
    handlers get what LangGraph gives them."""
    from langchain.agents.middleware._trace_policy import _node_trace_policy
    from langchain_core.runnables.config import ensure_config
    from langgraph._internal._runnable import RunnableCallable, RunnableSeq

    sequence = RunnableSeq(
        RunnableCallable(None, run, trace=False),
        RunnableCallable(_unchanged, trace=False),  # where LangGraph writes the channels
        name=node,
        trace_policy=_node_trace_policy(getattr(instance, "trace_policy", None)),
    )
    config = ensure_config(
        {
            "callbacks": callbacks,
            "tags": list(run_config.get("tags") or []),
            "metadata": {**dict(run_config.get("metadata") or {}), "langgraph_node": node},
        }
    )
    return await sequence.ainvoke(state, config)


def _unchanged(value: Any) -> Any:
    return value


def _listed(value: Any) -> list[Any]:
    """A ``messages`` write as ``add_messages`` takes it: a list, or one message."""
    return list(value) if isinstance(value, list | tuple) else [value]


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
    hooks: HookSet,
    hook: str,
    messages: list[Any],
    extra: dict[str, Any],
    answers: Answers | None = None,
    stored: Sequence[Message] | None = None,
) -> StateResult:
    """Run one kind of hook over all middleware: ``before_*`` in list order, ``after_*``
    in reverse (LangChain's order). Each sees the updates of the ones before it.
    ``answers``: what the hooks' interrupts are answered with (see ``call_state_hook``),
    and where the nodes called are noted (``Answers.ran``); ``stored``: ``messages`` as
    loopline's, position by position, when the caller has them (an update that returns
    them unchanged is then noted by reference: ``shown``)."""
    chain = hooks.with_hook(hook)
    if hook.startswith("after"):
        chain = list(reversed(chain))
    state_messages = with_stand_in_ids(messages)
    state_extra = dict(extra)
    changed = False
    given: dict[str, Message] = {}
    if stored is not None and len(stored) == len(state_messages):
        given = {str(m.id): s for m, s in zip(state_messages, stored, strict=True)}
    for _, instance in chain:
        state = {"messages": state_messages, **state_extra}
        update = await _node_update(
            instance,
            hook,
            state,
            hooks.context,
            answers,
            hooks.mode,
            given,
            hooks.channels,
            hooks.run_config,
        )
        if not update:
            continue
        jump = update.pop("jump_to", None)
        # a node of its own: what it sent, then its update, are one superstep's writes
        writes = [*update.pop(SENT, []), *update.items()]
        for key, value in writes:
            if key == "messages":
                state_messages = merge_messages(state_messages, _listed(value))
                changed = True
        writes = [(key, value) for key, value in writes if key != "messages"]
        if writes:
            state_extra = hooks.channels.apply(state_extra, writes)
            for key in dict(writes):
                _check_storable(instance, hook, key, state_extra[key], hooks.channels)
            changed = True
        if jump and can_jump(instance, hook, jump):
            return StateResult(without_stand_in_ids(state_messages), state_extra, jump, True)
    return StateResult(without_stand_in_ids(state_messages), state_extra, None, changed)


async def _node_update(
    instance: Any,
    hook: str,
    state: dict[str, Any],
    context: Any,
    answers: Answers | None,
    mode: str | None = None,
    given: Mapping[str, Message] | None = None,
    channels: StateChannels = NO_CHANNELS,
    run_config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A hook's update: called, or (resuming a step where it ran to its end before a
    later node waited) the update it gave then, as LangGraph keeps a finished node's
    writes. A new update is recorded in ``answers.done`` when it can be kept,
    and noted with the nodes that ran (``answers.ran``)."""
    node = node_name(instance, hook)
    if answers is not None and node in answers.done:
        return _replayed(answers.done[node], channels)
    update = await call_state_hook(
        instance, hook, state, context, answers, mode, run_config, channels
    )
    if answers is not None:
        recorded = _recorded(update, channels)
        if recorded is not None:
            answers.done[node] = recorded
        answers.ran.append((node, shown(update, given or {}, channels)))
    return update


def shown(
    update: dict[str, Any], given: Mapping[str, Message], channels: StateChannels = NO_CHANNELS
) -> dict[str, Any] | None:
    """A node's update as the task's log shows it (``contracts.events.NodeUpdate``):
    JSON, None for no update; a message it returned unchanged from ``given`` (the state's
    messages it was given, by id) only by reference, a ``RemoveMessage`` by its id; other
    keys as the state's codec encodes them (a value it cannot, as its text)."""
    from langchain_core.messages import RemoveMessage
    from langchain_core.messages.utils import convert_to_messages

    from contracts.messages import from_langchain

    if not update:
        return None
    out = dict(update)
    sent = out.pop(SENT, [])
    for key, value in sent:  # shown as their last value, under what the node returned
        if key not in update:
            out[key] = [*out.get(key, []), *_listed(value)] if key == "messages" else value
    if "messages" in out:
        messages: list[Any] = []
        for message in convert_to_messages(list(out["messages"])):
            if isinstance(message, RemoveMessage):
                messages.append({"type": "remove", "id": message.id})
                continue
            mine = from_langchain(message)
            before = given.get(str(message.id)) if message.id else None
            if before is not None and _same(mine, before):
                messages.append({"type": "ref", "id": message.id})
            else:
                messages.append(mine.model_dump(mode="json"))
        out["messages"] = messages
    out = {k: v if k == "messages" else _encoded_or_text(v, channels) for k, v in out.items()}
    return dict(json.loads(json.dumps(out, default=str)))


def _encoded_or_text(value: Any, channels: StateChannels) -> Any:
    try:
        return channels.codec.encode_value(value)
    except StateValueError:
        return str(value)


def _same(message: Message, stored: Message) -> bool:
    """Whether a message a hook returned is the stored one (its stand-in id aside)."""
    if (message.id or "").startswith(STAND_IN_ID):
        message = message.model_copy(update={"id": stored.id})
    return message == stored


def _recorded(update: dict[str, Any], channels: StateChannels) -> dict[str, Any] | None:
    """A node's update as JSON (messages as loopline's, other keys as the state's codec
    encodes them), or None when it cannot be (the node then runs again on resume)."""
    from langchain_core.messages.utils import convert_to_messages

    from contracts.messages import from_langchain

    if SENT in update:
        return None  # the node runs again on resume, sending its writes again
    try:
        out = dict(update)
        if "messages" in out:
            messages = convert_to_messages(list(out["messages"]))
            out["messages"] = [from_langchain(m).model_dump(mode="json") for m in messages]
        out = {k: v if k == "messages" else channels.codec.encode_value(v) for k, v in out.items()}
        return dict(json.loads(json.dumps(out)))
    except Exception:  # a RemoveMessage, a value the serializer cannot carry
        return None


def _replayed(recorded: dict[str, Any], channels: StateChannels) -> dict[str, Any]:
    from contracts.messages import MESSAGE_ADAPTER, to_langchain

    out = {k: v if k == "messages" else channels.codec.decode_value(v) for k, v in recorded.items()}
    if "messages" in out:
        out["messages"] = [
            to_langchain(MESSAGE_ADAPTER.validate_python(m)) for m in out["messages"]
        ]
    return out


def _check_storable(
    instance: Any, hook: str, key: str, value: Any, channels: StateChannels
) -> None:
    """A state key is stored with the task, for the hooks of any process, as LangGraph's
    checkpoint serializer carries it: a value it cannot carry (a live shell session, say)
    fails the task with this reason rather than leaving it undeliverable."""
    try:
        channels.codec.encode_value(value)
    except StateValueError as exc:
        raise TypeError(
            f"{type(instance).__name__}.{hook} returned state {key!r} that cannot be "
            f"stored ({type(value).__name__}): {exc}"
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
    entered: Callable[[], None] | None = None,
    mode: str | None = None,
) -> Any:
    """``instances[0]`` outermost; each may call its handler zero or more times.
    ``entered``: called each time a layer (or the base) is entered, before it runs;
    ``mode``: the run's (``AgentSpec.run_mode``). Sync layers run in a worker thread,
    and a sync layer's handler runs the next sync layer in that same thread, as
    LangChain's sync chain runs (a thread per layer, each waiting on the next, would
    deadlock a chain deeper than the loop's executor has threads: deepagents stacks
    seven); the thread hops to the loop only for an async layer or the model call."""
    loop = asyncio.get_running_loop()

    def enter() -> None:
        if entered is not None:
            entered()

    def is_sync(i: int) -> bool:
        return i < len(instances) and not _runs_async(instances[i], hook, mode)

    async def run(i: int, req: Any) -> Any:
        enter()
        if is_sync(i):
            return await asyncio.to_thread(run_sync, i, req)
        if i == len(instances):
            return await base(req)

        async def inner(r: Any) -> Any:
            return await run(i + 1, r)

        return normalize(await getattr(instances[i], f"a{hook}")(req, inner))

    def run_sync(i: int, req: Any) -> Any:
        """Sync layer ``i``, entered, in the calling worker thread."""

        def sync_inner(r: Any) -> Any:
            if is_sync(i + 1):
                enter()
                return run_sync(i + 1, r)
            return asyncio.run_coroutine_threadsafe(run(i + 1, r), loop).result()

        return normalize(getattr(instances[i], hook)(req, sync_inner))

    return await run(0, request)

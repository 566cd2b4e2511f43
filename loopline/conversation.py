"""LangChain's thread API on loopline's threads: ``config`` as LangGraph reads it, the
``StateSnapshot`` of a thread, and ``Command(resume=...)`` mapped to the answers a
waiting run takes.

``config["configurable"]["thread_id"]`` makes a call a run of that thread (stored in
Redis by the services, in the space the agent's checkpointer decides:
``loopline.threads.space_of``); ``recursion_limit``
counts LangGraph's supersteps (every node the agent's graph would run: the model, the
tools, each middleware hook): it travels with the run, whose step limit the loop derives
from it (``services.tasks.recursion``);
``run_name``, ``tags`` and ``metadata`` travel with the run (``TaskSubmitted``).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from contracts.agent import AgentSpec
from contracts.messages import AIMessage, Message, ToolCall, ToolMessage, to_langchain
from loopline.threads import ThreadValues
from services.agent_view import has_todos
from services.hooks import HookSet, hooks_for
from services.spec.statecodec import CORE_CODEC, StateCodec
from services.tasks.store import call_of_interrupt
from services.tasks.thread_runs import untracked_keys

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

    from loopline.client import Client

HITL_NODE = "HumanInTheLoopMiddleware.after_model"
TOOLS_NODE = "tools"
MULTIPLE_INTERRUPTS = (
    "When there are multiple pending interrupts, you must specify the interrupt id when "
    "resuming. Docs: https://docs.langchain.com/oss/python/langgraph/interrupts"
    "#handling-multiple-interrupts."
)
"""LangGraph's refusal of ``Command(resume=value)`` while several interrupts wait."""


@dataclass(frozen=True)
class WaitingInterrupt:
    """One interrupt a run waits on: LangGraph's ``Interrupt`` and the node that asked
    (``<middleware>.<hook>``, or ``tools`` for a tool call)."""

    node: str
    interrupt: Any


@dataclass(frozen=True)
class RunConfig:
    """What loopline takes from a LangChain ``RunnableConfig``."""

    thread_id: str | None = None
    checkpoint_id: str | None = None
    """An earlier checkpoint of the thread to read or run from (time travel)."""
    recursion_limit: int | None = None
    run_name: str | None = None
    tags: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, config: Mapping[str, Any] | None, *, checkpointer: Any = None) -> RunConfig:
        config = dict(config or {})
        configurable = dict(config.get("configurable") or {})
        thread_id = configurable.get("thread_id")
        if checkpointer is not None and thread_id is None:
            # LangGraph's own refusal: a checkpointed graph needs to know its thread
            raise ValueError(
                "Checkpointer requires one or more of the following 'configurable' keys: "
                "thread_id, checkpoint_ns, checkpoint_id"
            )
        limit = config.get("recursion_limit")
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            raise ValueError(f"recursion_limit must be a positive integer, not {limit!r}")
        return cls(
            thread_id=None if thread_id is None else str(thread_id),
            checkpoint_id=str(configurable["checkpoint_id"])
            if configurable.get("checkpoint_id")
            else None,
            recursion_limit=limit,
            run_name=config.get("run_name"),
            tags=tuple(config.get("tags") or ()),
            metadata=dict(config.get("metadata") or {}),
        )


def _hooks(spec: AgentSpec) -> HookSet:
    return hooks_for(spec.agent_id, spec)


def state_codec(spec: AgentSpec) -> StateCodec:
    """How the agent's state values are stored (``services.spec.statecodec``); where its
    schemas cannot be loaded here, the serializer's safe types only."""
    try:
        return _hooks(spec).channels.codec
    except Exception:  # middleware or schemas this process cannot import
        return CORE_CODEC


def snapshot_values(spec: AgentSpec, state: ThreadValues) -> dict[str, Any]:
    """``StateSnapshot.values``: the messages, the todo list once written, and the
    middleware's state fields LangGraph checkpoints (not its ``UntrackedValue`` ones)."""
    messages = [*state.messages, *state.written.messages]  # with the pending writes
    values: dict[str, Any] = {"messages": [to_langchain(m) for m in messages]}
    if state.todos is not None:
        values["todos"] = state.todos
    dropped = untracked_keys(_hooks(spec))
    codec = state_codec(spec)
    writes = codec.decode_pairs(state.written.writes)
    extra = with_pending(spec, codec.decode(state.extra), writes)
    values.update({k: v for k, v in extra.items() if k not in dropped})
    return values


def with_pending(
    spec: AgentSpec, keys: Mapping[str, Any], updates: Sequence[tuple[str, Any]]
) -> dict[str, Any]:
    """The state keys with the waiting step's ended calls' updates applied through the
    agent's reducers, as LangGraph's state applies its pending writes (as they stand
    when they do not join: the step's join reports that)."""
    if not updates:
        return dict(keys)
    try:
        return _hooks(spec).channels.apply(keys, updates)
    except Exception:  # InvalidUpdateError, a reducer's: the task fails when it joins
        return dict(keys)


def checkpoint_config(thread_id: str, run_id: str) -> RunnableConfig:
    """A snapshot's ``config``: the run stands for LangGraph's checkpoint id."""
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": run_id}}


def interrupt_of(value: Any, interrupt_id: str, response_schema: Any = None) -> Any:
    from langgraph.types import Interrupt

    return Interrupt(value=value, id=interrupt_id, response_schema=response_schema)


def waiting_tasks(
    state: ThreadValues, waits: Sequence[WaitingInterrupt], *, todos: bool = False
) -> tuple[Any, ...]:
    """``StateSnapshot.tasks`` of a run that waits, as LangGraph lists them: the hook's
    node with its interrupt, or one ``tools`` task per call of the step, in call order:
    a waiting call's with its interrupt, an ended call's with its result. ``todos``: the
    agent has TodoListMiddleware, whose ``write_todos`` loopline runs itself (its update
    is not stored with the call's)."""
    from langgraph.types import PregelTask

    if waits[0].node != TOOLS_NODE:
        node = waits[0].node
        return (
            PregelTask(
                id=f"{state.run_id}:{state.step}",
                name=node,
                path=("__pregel_pull", node),
                interrupts=tuple(w.interrupt for w in waits),
            ),
        )
    asked = {call_of_interrupt(str(w.interrupt.id)): w.interrupt for w in waits}
    ended = {m.tool_call_id: m for m in state.written.messages if isinstance(m, ToolMessage)}
    calls = _last_calls(state.messages)
    tasks = []
    for i, call_id in enumerate(list(calls) or list(asked)):
        if call_id not in asked and call_id not in ended:
            continue  # still running: no task of LangGraph's has ended or asked yet
        result = None
        if call_id in ended:
            update = state.written.updates.get(call_id, [])
            result = _ended_task_result(calls.get(call_id), ended[call_id], update, todos)
        tasks.append(
            PregelTask(
                f"{state.run_id}:{state.step}:{i}",
                TOOLS_NODE,
                ("__pregel_push", i, False),
                interrupts=(asked[call_id],) if call_id in asked else (),
                result=result,
            )
        )
    return tuple(tasks)


def _ended_task_result(
    call: ToolCall | None,
    message: ToolMessage,
    update: Sequence[tuple[str, Any]],
    todos: bool,
) -> dict[str, Any]:
    """What an ended call wrote, as its LangGraph task's result: its update and its tool
    message; TodoListMiddleware's ``write_todos`` (run by loopline itself) the list."""
    written = dict(update)
    if todos and call is not None and call.name == "write_todos" and message.status != "error":
        written.setdefault("todos", call.args.get("todos"))
    return {**written, "messages": [to_langchain(message)]}


def snapshot(
    spec: AgentSpec,
    state: ThreadValues,
    waits: Sequence[WaitingInterrupt] = (),
    *,
    parent_run: str = "",
) -> Any:
    """A ``langgraph.types.StateSnapshot`` of one state of the thread."""
    from langgraph.types import StateSnapshot

    interrupts = tuple(w.interrupt for w in waits)
    if waits:
        tasks: tuple[Any, ...] = waiting_tasks(state, waits, todos=has_todos(spec))
        # the tasks still to run (LangGraph's ``next``: an ended call is not)
        upcoming: tuple[str, ...] = tuple(t.name for t in tasks if t.result is None)
    elif state.status == "running":
        upcoming = ("model",) if state.phase == "model" else ("tools",)
        tasks = ()
    else:
        upcoming, tasks = (), ()
    created = (
        datetime.datetime.fromtimestamp(state.updated, datetime.UTC).isoformat()
        if state.updated
        else None
    )
    return StateSnapshot(
        values=snapshot_values(spec, state),
        next=upcoming,
        config=checkpoint_config(state.thread_id, state.run_id),
        metadata={"source": "loop", "step": state.step, "run_id": state.run_id},
        created_at=created,
        parent_config=checkpoint_config(state.thread_id, parent_run) if parent_run else None,
        tasks=tasks,
        interrupts=tuple(interrupts),
    )


async def waiting_interrupts(client: Client, state: ThreadValues) -> list[WaitingInterrupt]:
    """The interrupts a waiting run of the thread asked: a hook's (one, by its interrupt
    id), or one per waiting tool call (by its interrupt id)."""
    if state.status != "running":
        return []
    if state.phase == "approval":
        asked = await client.threads().batched_request(state.run_id, state.step)
        if asked is None:
            return []
        interrupt_id = asked.interrupt_id or f"{state.run_id}:{state.step}"
        node = asked.node or HITL_NODE
        asked_of = interrupt_of(asked.request, interrupt_id, asked.response_schema)
        return [WaitingInterrupt(node, asked_of)]
    calls = await client.waiting_calls(state.run_id)
    order = _call_order(state.messages)  # LangGraph lists its tasks in call order
    calls.sort(key=lambda c: order.get(call_of_interrupt(c.call_id), len(order)))
    return [
        WaitingInterrupt(TOOLS_NODE, interrupt_of(c.request, c.interrupt_id, c.response_schema))
        for c in calls
    ]


def _last_calls(messages: Sequence[Message]) -> dict[str, ToolCall]:
    """The tool calls of the last reply, in call order, by id."""
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            return {call.id: call for call in message.tool_calls}
    return {}


def _call_order(messages: Sequence[Message]) -> dict[str, int]:
    """The place of each tool call of the last reply (call id -> index)."""
    return {call_id: i for i, call_id in enumerate(_last_calls(messages))}


def answers_of(resume: Any, waiting_ids: Sequence[str]) -> dict[str, Any]:
    """LangGraph's ``Command(resume=...)`` as answers by interrupt id: a mapping whose
    keys are all waiting interrupts' ids answers those; any other value answers the one
    interrupt that waits (with several waiting, LangGraph refuses it: ``RuntimeError``).
    HumanInTheLoopMiddleware's ``{"decisions": [...]}`` is such a value."""
    if (
        isinstance(resume, Mapping)
        and resume
        and all(isinstance(k, str) and k in waiting_ids for k in resume)
    ):
        return dict(resume)
    if len(waiting_ids) > 1:
        raise RuntimeError(MULTIPLE_INTERRUPTS)
    return {waiting_ids[0]: resume}


def is_command(value: Any) -> bool:
    try:
        from langgraph.types import Command
    except ImportError:  # pragma: no cover - langgraph comes with langchain
        return False
    return isinstance(value, Command)


__all__ = [
    "RunConfig",
    "WaitingInterrupt",
    "answers_of",
    "is_command",
    "snapshot",
    "waiting_interrupts",
]

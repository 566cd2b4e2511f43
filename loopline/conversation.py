"""LangChain's thread API on loopline's threads: ``config`` as LangGraph reads it, the
``StateSnapshot`` of a thread, and ``Command(resume=...)`` mapped to the decisions a
waiting run takes.

``config["configurable"]["thread_id"]`` makes a call a run of that thread (stored in
Redis by the services, whatever checkpointer the agent was given); ``recursion_limit``
counts LangGraph's supersteps (every node the agent's graph would run: the model, the
tools, each middleware hook), so it becomes the run's number of model calls;
``run_name``, ``tags`` and ``metadata`` travel with the run (``TaskSubmitted``).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from contracts.agent import AgentSpec
from contracts.messages import to_langchain
from loopline.threads import ThreadValues
from services.hooks import HookSet, hooks_for
from services.tasks.thread_runs import untracked_keys

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

    from loopline.client import Client

HITL_NODE = "HumanInTheLoopMiddleware.after_model"


@dataclass(frozen=True)
class RunConfig:
    """What loopline takes from a LangChain ``RunnableConfig``."""

    thread_id: str | None = None
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
            recursion_limit=limit,
            run_name=config.get("run_name"),
            tags=tuple(config.get("tags") or ()),
            metadata=dict(config.get("metadata") or {}),
        )


def _hooks(spec: AgentSpec) -> HookSet:
    return hooks_for(spec.agent_id, spec)


def nodes_per_model_call(spec: AgentSpec) -> tuple[int, int]:
    """(supersteps of one loop: before_model hooks, the model, after_model hooks and
    the tools; supersteps once per run: before_agent and after_agent hooks), as
    LangChain's ``create_agent`` lays out its graph (each hook is a node of its own;
    ``TodoListMiddleware`` has an after_model node, context editing none)."""
    hooks = _hooks(spec)
    per_loop = 2 + len(hooks.with_hook("before_model")) + len(hooks.with_hook("after_model"))
    per_loop += sum(1 for m in spec.middleware if m.type == "TodoListMiddleware")
    once = len(hooks.with_hook("before_agent")) + len(hooks.with_hook("after_agent"))
    return per_loop, once


def max_model_calls(spec: AgentSpec, recursion_limit: int) -> int:
    """The model calls a run may make within LangGraph's recursion limit: a run of k
    calls takes ``once + k * per_loop - 1`` supersteps (no tools after the last call),
    and LangGraph stops a run whose supersteps reach the limit."""
    per_loop, once = nodes_per_model_call(spec)
    return max(1, (recursion_limit - once) // per_loop)


def snapshot_values(spec: AgentSpec, state: ThreadValues) -> dict[str, Any]:
    """``StateSnapshot.values``: the messages, the todo list once written, and the
    middleware's state fields LangGraph checkpoints (not its ``UntrackedValue`` ones)."""
    values: dict[str, Any] = {"messages": [to_langchain(m) for m in state.messages]}
    if state.todos is not None:
        values["todos"] = state.todos
    dropped = untracked_keys(_hooks(spec))
    values.update({k: v for k, v in state.extra.items() if k not in dropped})
    return values


def checkpoint_config(thread_id: str, run_id: str) -> RunnableConfig:
    """A snapshot's ``config``: the run stands for LangGraph's checkpoint id."""
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": run_id}}


def interrupt_of(value: Any, interrupt_id: str) -> Any:
    from langgraph.types import Interrupt

    return Interrupt(value=value, id=interrupt_id)


def snapshot(
    spec: AgentSpec,
    state: ThreadValues,
    interrupts: Sequence[Any] = (),
    *,
    parent_run: str = "",
) -> Any:
    """A ``langgraph.types.StateSnapshot`` of one state of the thread."""
    from langgraph.types import PregelTask, StateSnapshot

    if interrupts:
        waiting_for = HITL_NODE if state.phase == "approval" else "tools"
        tasks: tuple[Any, ...] = (
            PregelTask(
                id=f"{state.run_id}:{state.step}",
                name=waiting_for,
                path=("__pregel_pull", waiting_for),
                interrupts=tuple(interrupts),
            ),
        )
        upcoming: tuple[str, ...] = (waiting_for,)
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


async def waiting_interrupts(client: Client, state: ThreadValues) -> list[Any]:
    """The interrupts a waiting run of the thread asked (batched: one, by run and step;
    per call: one per waiting call, by its tool call id), as LangGraph ``Interrupt``s."""
    if state.status != "running":
        return []
    if state.phase == "approval":
        asked = await client.threads().batched_request(state.run_id, state.step)
        if asked is None:
            return []
        return [interrupt_of(asked.request, f"{state.run_id}:{state.step}")]
    calls = await client.waiting_calls(state.run_id)
    return [interrupt_of(c.request, str(c.request.get("tool_call_id"))) for c in calls]


def decisions_of(resume: Any, waiting_ids: Sequence[str]) -> Any:
    """LangChain's resume payload as the decisions ``Agent.aresume`` takes: batched
    (``{"decisions": [...]}``, or that keyed by its interrupt id) to the list of
    decisions; per call (``{interrupt id: decision}``, the interrupt id being the tool
    call id here) as it is."""
    if isinstance(resume, Mapping) and "decisions" in resume:
        return list(resume["decisions"])
    if isinstance(resume, Mapping) and len(resume) == 1:
        (only,) = resume.values()
        if isinstance(only, Mapping) and "decisions" in only:
            return list(only["decisions"])
    if isinstance(resume, Mapping) and all(k in waiting_ids for k in resume):
        return dict(resume)
    if isinstance(resume, Mapping) and "type" in resume:  # one decision, one call waits
        return dict(resume)
    raise ValueError(
        "Command(resume=...) takes {'decisions': [...]} (HumanInTheLoopMiddleware) or "
        f"{{interrupt_id: decision}} for the waiting interrupts ({', '.join(waiting_ids)})"
    )


def is_command(value: Any) -> bool:
    try:
        from langgraph.types import Command
    except ImportError:  # pragma: no cover - langgraph comes with langchain
        return False
    return isinstance(value, Command)


__all__ = [
    "RunConfig",
    "decisions_of",
    "is_command",
    "max_model_calls",
    "snapshot",
    "waiting_interrupts",
]

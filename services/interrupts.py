"""LangGraph's own ``interrupt()`` on the bus, wherever a hook or a tool calls it.

LangGraph's ``interrupt(value)`` reads the node's run from LangChain's runnable config:
a scratchpad that counts the node's interrupts and holds the answers it was resumed
with, the checkpoint namespace its interrupt ids derive from, and the graph's
``Runtime``. loopline gives every hook and tool it runs such a config (``node``), so the
function the user imported runs unchanged: with no answer for its turn it raises
``GraphInterrupt`` (caught here as ``NodeInterrupted``, and the caller parks the task
durably: ``services.tasks.loop`` for the loop stage's hooks, ``services.tools.calls`` for
a tool call and its ``wrap_tool_call`` chain); resumed, the node runs again from its
start and its n-th ``interrupt()`` returns the n-th answer, as LangGraph matches several
interrupts of one node by their order. A typed ``response_schema`` validates the answer
as LangGraph does; one that does not fit raises ``ResumeRefused`` and the interrupt
waits for another.

HumanInTheLoopMiddleware's interrupts go the same way: its batched ``after_model`` is
answered ``{"decisions": [...]}``, its per-call ``wrap_tool_call`` one decision.

A node's namespace is ``<node>:<scope>`` (the scope names the task and step), so an
interrupt's id (LangGraph's hash of the namespace and of how many answers the node has)
is the same in every process that runs the node again.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from langgraph.errors import GraphBubbleUp, GraphInterrupt, is_invalid_resume
from pydantic import ValidationError


def jsonable(value: Any) -> Any:
    """An interrupt's value (or an answer) as plain JSON, as it travels on the bus:
    HITL's requests are TypedDicts of lists and strings; anything JSON cannot hold is
    given as its text."""
    return json.loads(json.dumps(value, default=str))


@dataclass(frozen=True, slots=True)
class Asked:
    """What one ``interrupt()`` asked: LangGraph's ``Interrupt``, as JSON."""

    value: Any
    interrupt_id: str
    response_schema: dict[str, Any] | None = None


class NodeInterrupted(GraphBubbleUp):
    """A node (a hook of one middleware, or a tool call) called ``interrupt()`` with no
    answer for it yet. A ``GraphBubbleUp``, as LangGraph's own: LangChain's retry and
    fallback middleware pass it through untouched."""

    def __init__(self, node: str, asked: Asked) -> None:
        super().__init__(f"{node} waits for an answer to interrupt {asked.interrupt_id}")
        self.node = node
        self.asked = asked


class ResumeRefused(GraphBubbleUp):
    """An answer that does not fit the interrupt's typed ``response_schema``: as with
    LangGraph's invalid resume, nothing is applied and the interrupt can be answered
    again."""


@dataclass(frozen=True)
class Answers:
    """The answers a run of the loop stage's hooks gives their interrupts: per node (by
    LangChain's node name, ``<middleware name>.<hook>``), in the order its interrupts
    asked. ``answered``: the interrupt id this run answers ("" when nothing is being
    answered); a node that asks again is parked in its place.

    ``done``: the updates of the nodes that ran to their end before the one that waits
    (as JSON, by node; filled as the hooks run). LangGraph keeps a finished node's writes
    and runs only the interrupted node again; so here a node found in ``done`` is not
    called again on resume, its update is applied as it was."""

    scope: str
    by_node: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    answered: str = ""
    done: dict[str, dict[str, Any]] = field(default_factory=dict)
    ran: list[tuple[str, dict[str, Any] | None]] = field(default_factory=list)
    """The nodes called in this run of the hooks (not those replayed from ``done``), in
    order, each with its update as the task's log shows it (``services.hooks.shown``):
    what the transition logs as ``NodesUpdated``."""

    def of(self, node: str) -> list[Any]:
        return list(self.by_node.get(node, ()))


def interrupt_id(name: str, scope: str, answered: int) -> str:
    """The id LangGraph gives the interrupt a node asks after ``answered`` answers."""
    from langgraph.types import _interrupt_id

    return str(_interrupt_id(f"{name}:{scope}", answered))


def _no_null_resume(_consume: bool = False) -> Any:
    """A resume value for any interrupt (LangGraph's ``Command(resume=v)`` without ids):
    never here, where every answer is addressed to its node."""
    return None


def _ignore_writes(_writes: Sequence[tuple[str, Any]]) -> None:
    """LangGraph's interrupt records the answers it used as the task's writes; here they
    are kept by the task's state, which gave them."""


NODE_SCOPE = "__loopline_node"
"""The ``configurable`` key of the node a hook or a tool runs as (``<node>:<scope>``):
the same in every run of the node (its checkpoint namespace may be another: a tool's
config takes its tools node's), so an agent the node invokes knows its place again when
the node runs again on a resume (``loopline.nested``)."""


def node_config(
    ns: str, resume: Sequence[Any], runtime: Any, run: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The runnable config LangGraph's ``interrupt`` / ``get_runtime`` read in a node;
    ``run``: the run's tags, metadata and recursion limit, which LangGraph's node config
    carries (what a tool reads with ``get_config()``, and a sub-agent it runs inherits)."""
    from langgraph._internal._constants import (
        CONFIG_KEY_CHECKPOINT_NS,
        CONFIG_KEY_RUNTIME,
        CONFIG_KEY_SCRATCHPAD,
        CONFIG_KEY_SEND,
    )
    from langgraph._internal._scratchpad import PregelScratchpad

    scratchpad = PregelScratchpad(
        step=0,
        stop=0,
        call_counter=itertools.count(0).__next__,
        interrupt_counter=itertools.count(0).__next__,
        get_null_resume=_no_null_resume,
        resume=list(resume),
        subgraph_counter=itertools.count(0).__next__,
    )
    return {
        **(run or {}),
        "configurable": {
            CONFIG_KEY_SCRATCHPAD: scratchpad,
            CONFIG_KEY_SEND: _ignore_writes,
            CONFIG_KEY_CHECKPOINT_NS: ns,
            CONFIG_KEY_RUNTIME: runtime,
            NODE_SCOPE: ns,
        },
    }


def node_configurable() -> dict[str, Any]:
    """The ``configurable`` of the node running now (``node``), or none."""
    from langchain_core.runnables.config import var_child_runnable_config

    return dict((var_child_runnable_config.get() or {}).get("configurable") or {})


@contextmanager
def node(
    name: str,
    scope: str,
    resume: Sequence[Any] = (),
    runtime: Any = None,
    run: Mapping[str, Any] | None = None,
) -> Iterator[None]:
    """Run one node (``name``) with LangGraph's interrupt working in it: its interrupts
    get ``resume`` in order; one past them raises ``NodeInterrupted``."""
    from langchain_core.runnables.config import var_child_runnable_config

    config = node_config(f"{name}:{scope}", resume, runtime, run)
    token = var_child_runnable_config.set(config)  # type: ignore[arg-type]
    try:
        yield
    except GraphInterrupt as exc:
        (first, *_) = exc.args[0]
        schema = first.response_schema
        asked = Asked(
            jsonable(first.value),
            str(first.id),
            jsonable(schema) if isinstance(schema, dict) else None,
        )
        raise NodeInterrupted(name, asked) from None
    except ValidationError as exc:
        if is_invalid_resume(exc):
            raise ResumeRefused(str(exc)) from exc
        raise
    finally:
        var_child_runnable_config.reset(token)


def is_waiting(exc: BaseException) -> bool:
    """Whether an exception is a node waiting for an answer (not the node's failure)."""
    return isinstance(exc, NodeInterrupted | ResumeRefused | GraphInterrupt) or (
        isinstance(exc, ValidationError) and is_invalid_resume(exc)
    )

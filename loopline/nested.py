"""An agent invoked inside a node of another run: a sub-agent called from a tool
(deepagents' ``task`` tool), or an agent that is a node of a LangGraph graph.

LangGraph runs such an agent as a subgraph of the caller's graph: an ``interrupt()`` in
it stops the caller's node as well (``GraphInterrupt`` out of ``invoke``), so the
caller's caller sees it as its run's ``__interrupt__``; ``Command(resume=...)`` runs the
caller's node again from its start, and its call of the agent goes on from where the
agent waited, the answer taken from the node's resume values in the order the node's
interrupts asked (the agent's among them).

Here the agent's run is a task of its own on the bus. Its id derives from the caller
node's place (``CallerNode.task_id``: the node's scope, which is the same each time the
node runs, and the agent call's order in it, as LangGraph's ``subgraph_counter`` orders
a node's subgraphs), so the node run again finds the task it started: waiting, it is
answered from the node's resume values (``next_answer``) and followed; ended, its
outcome is read again instead of the agent running twice.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from contracts.events import ApprovalRequested, TaskCompleted, TaskFailed, parse_event
from contracts.streams import DATA_FIELD
from loopline.client import Client
from loopline.conversation import WaitingInterrupt, waiting_interrupts
from services.interrupts import NODE_SCOPE


@dataclass
class CallerNode:
    """The node of another run an agent is invoked in, and the call's place there."""

    scope: str
    """The node's scope: loopline's ``services.interrupts.NODE_SCOPE``, or LangGraph's
    checkpoint namespace of the task (the same each time the task runs)."""
    scratchpad: Any
    """LangGraph's ``PregelScratchpad`` of the node: its resume values and counters."""
    send: Any
    """The node's ``CONFIG_KEY_SEND``, where LangGraph's ``interrupt`` records the
    resume values it used."""
    order: int
    """How many agents the node invoked before this one."""

    @property
    def task_id(self) -> str:
        """The agent's task: the same each time the node runs (a resume runs it again)."""
        return uuid.uuid5(uuid.NAMESPACE_URL, f"loopline:{self.scope}:{self.order}").hex

    def skip(self, answered: int) -> None:
        """The node's resume values the agent's earlier interrupts took (``answered`` of
        them, answered in an earlier run of the node) are not the next one's."""
        for _ in range(answered):
            self.scratchpad.interrupt_counter()

    def next_answer(self) -> tuple[bool, Any]:
        """The answer the node was resumed with for its next interrupt, as LangGraph's
        ``interrupt()`` takes it (by order; else the resume given without an id):
        (False, None) when there is none yet (the node waits for it)."""
        from langgraph._internal._constants import RESUME

        pad = self.scratchpad
        index = pad.interrupt_counter()
        if index < len(pad.resume):
            self.send([(RESUME, pad.resume[: index + 1])])
            return True, pad.resume[index]
        value = pad.get_null_resume(True)
        if value is None:
            return False, None
        pad.resume.append(value)
        self.send([(RESUME, pad.resume)])
        return True, value


def caller_node() -> CallerNode | None:
    """The node of another run this call is inside (the ambient config of a LangGraph
    node, or of a hook or tool loopline runs as one), or None (a call of its own)."""
    from langchain_core.runnables.config import var_child_runnable_config
    from langgraph._internal._constants import (
        CONFIG_KEY_CHECKPOINT_NS,
        CONFIG_KEY_SCRATCHPAD,
        CONFIG_KEY_SEND,
    )

    configurable = (var_child_runnable_config.get() or {}).get("configurable") or {}
    scratchpad = configurable.get(CONFIG_KEY_SCRATCHPAD)
    scope = configurable.get(NODE_SCOPE) or configurable.get(CONFIG_KEY_CHECKPOINT_NS)
    if scratchpad is None or not scope:
        return None
    send = configurable.get(CONFIG_KEY_SEND) or (lambda _writes: None)
    return CallerNode(str(scope), scratchpad, send, scratchpad.subgraph_counter())


@dataclass(frozen=True)
class EarlierRun:
    """What an earlier run of the caller's node left of the agent's task."""

    waits: list[WaitingInterrupt]
    """The interrupts it waits on now (none: it runs or ended)."""
    answered: int
    """How many of its interrupts were answered (each took one of the node's resume
    values)."""
    after: str
    """The log entry its next outcome follows (its last wait's, or the start)."""


async def earlier_run(client: Client, task_id: str) -> EarlierRun | None:
    """The agent's task as an earlier run of the caller's node left it, or None (this is
    the node's first run that invokes it)."""
    entries: Any = await client.redis.xrange(client.names.task_log(task_id))
    if not entries:
        return None
    asked, after, asking = 0, "0", False
    for entry_id, fields in entries:
        event = parse_event(fields[DATA_FIELD.encode()])
        if isinstance(event, ApprovalRequested):
            # the requests of one wait come together (one per waiting call)
            asked += 0 if asking else 1
            asking = True
            after = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
        elif not isinstance(event, TaskCompleted | TaskFailed):
            asking = False
    state = await client.threads().of_run("", task_id)
    waits = await waiting_interrupts(client, state)
    return EarlierRun(waits, asked - (1 if waits else 0), after)


def for_caller(handed: BaseException) -> BaseException:
    """LangGraph's ``ParentCommand`` out of the agent's run (a tool's
    ``Command(graph=Command.PARENT)``), addressed as LangGraph's agent graph hands it to
    its caller: to the namespace of the node that invoked the agent, which applies it
    as its own update (``goto`` included). Called outside any node, it stays addressed
    to the parent."""
    from dataclasses import replace

    from langchain_core.runnables.config import var_child_runnable_config
    from langgraph._internal._constants import CONFIG_KEY_CHECKPOINT_NS
    from langgraph.types import Command

    command = handed.args[0] if handed.args else None
    if not isinstance(command, Command):  # rebuilt from the bus's record: its text only
        return handed
    configurable = (var_child_runnable_config.get() or {}).get("configurable") or {}
    scope = configurable.get(NODE_SCOPE) or configurable.get(CONFIG_KEY_CHECKPOINT_NS)
    if command.graph == Command.PARENT and scope:
        handed.args = (replace(command, graph=str(scope)),)
    return handed


def interrupted(waits: list[WaitingInterrupt]) -> BaseException:
    """What the agent's ``invoke`` raises in the caller's node while it waits: LangGraph's
    ``GraphInterrupt`` with its interrupts, which stops the node as its own
    ``interrupt()`` would (the caller's caller gets them)."""
    from langgraph.errors import GraphInterrupt

    return GraphInterrupt(tuple(w.interrupt for w in waits))

"""A task's state as the transitions leave it: its status and phase, the keys it lives
under, and the causes that make a transition idempotent.

The state lives in Redis (the task's hash, transcript list, log stream and result hash)
and changes only through the transitions of ``services.tasks.transitions``; each of them
replies with the state right after it, decoded here by name (``TaskState.from_reply``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from contracts.streams import Names


class Status(StrEnum):
    """Whether the task still runs. A task that ended never runs again."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


class Phase(StrEnum):
    """Where a running task is (``services.tasks.transitions`` draws the moves between)."""

    MODEL = "model"
    """The step's model call is due or under way (``ModelRequested`` published)."""
    TOOLS = "tools"
    """The step's tool calls run; their results join when all are in. A call whose tool
    or wrap_tool_call chain called ``interrupt()`` (a per-call approval, say) waits here
    too, on its own (``wait:<step>:<call id>``)."""
    APPROVAL = "approval"
    """A hook of the loop stage (or a wrap_model_call middleware) called ``interrupt()``
    and waits for the answer; what the task resumes with waits in ``pending`` (the
    model's reply, the step's StepStarted, or the model request), the node and its
    interrupt in ``wait_node`` / ``wait_id``, the answers given so far in ``resume``."""
    DONE = "done"
    """The task ended (status completed or failed)."""


class Cause:
    """Named constructors for the cause a transition records: the event that moved the
    state. A redelivery of that event finds its own cause and publishes the outputs
    again; any other event finds a different one and publishes nothing."""

    START = "start"
    CANCEL = "cancel"
    SUPERSEDED = "superseded"
    """A newer run of the task's thread stopped it (interrupt, rollback)."""
    DEADLINE = "deadline"

    @staticmethod
    def model(step: int) -> str:
        """The model's reply of a step."""
        return f"model:{step}"

    @staticmethod
    def tool(step: int, call_id: str) -> str:
        """A tool call's result (the one that completed the step records it)."""
        return f"tool:{step}:{call_id}"

    @staticmethod
    def model_failed(step: int) -> str:
        return f"model-failed:{step}"

    @staticmethod
    def tool_failed(step: int, call_id: str) -> str:
        """A tool call of the step raised (the task fails with its exception)."""
        return f"tool-failed:{step}:{call_id}"

    @staticmethod
    def hooks(step: int) -> str:
        """The before_model hooks of a step, applied."""
        return f"bm:{step}"

    @staticmethod
    def approval(step: int) -> str:
        """A hook of a step called ``interrupt()`` (HITL's after_model, a user's own)."""
        return f"approval:{step}"

    @staticmethod
    def refused(stage: str) -> str:
        """A stage dead-lettered one of the task's events."""
        return f"refused:{stage}"

    @staticmethod
    def failed(step: int) -> str:
        """A failure of the loop's own (a hook that raised, middleware that cannot load)."""
        return f"failed:{step}"


@dataclass(frozen=True, slots=True)
class TaskKeys:
    """A task's own keys, in the order every transition script reads them (``KEYS[1..8]``).
    They share the ``{task_id}`` hash tag, so one script can touch them all on a Cluster."""

    state: str
    messages: str
    log: str
    results: str
    logged: str
    todos: str
    tokens: str
    calls: str

    COUNT = 8

    @classmethod
    def of(cls, names: Names, task_id: str) -> TaskKeys:
        return cls(*names.task_keys(task_id))

    def all(self) -> list[str]:
        return [
            self.state,
            self.messages,
            self.log,
            self.results,
            self.logged,
            self.todos,
            self.tokens,
            self.calls,
        ]


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def pairs(reply: list[Any]) -> dict[str, Any]:
    """A script's reply of name, value pairs, by name."""
    return {text(reply[i]): reply[i + 1] for i in range(0, len(reply), 2)}


@dataclass(frozen=True, slots=True)
class TaskState:
    """The task's state right after a transition attempt."""

    applied: bool
    """Whether this attempt changed the state (False: its guard refused it)."""
    status: str
    """A ``Status`` value, or "" when the task does not exist."""
    step: int
    phase: str
    """A ``Phase`` value."""
    cause: str
    """What moved the state last (a ``Cause``)."""
    transcript_len: int
    expected: list[str]
    """In the tools phase: the step's call ids in the order their results join."""
    agent_id: str
    rev: int = 0
    """Bumped when hooks rewrite the transcript (not a pure append): caches key on it."""
    hooks_step: int = 0
    """The step whose before_model hooks have been applied."""
    thread: str = ""
    """The thread the task is a run of ("" for a task of its own)."""
    done: frozenset[str] = frozenset()
    """In the tools phase: the ids of the step's calls whose results are in."""
    committed: bool = False
    """A fused transition (``services.tasks.transition.Fusion``) also committed the entry.
    Its reply then gives only what the entry's handler reads once it is committed
    (``applied``, ``status``, ``phase``, ``agent_id``, ``thread``: lua/fused.lua); the other
    fields keep their defaults, so the script reads and sends no more than that."""
    duplicate: bool = False
    """``StartTask`` found the task started by another submission (applied = -1)."""
    joining: bool = False
    """``RecordResult`` would join a step whose calls updated the state, and needs the
    joined state computed (applied = -2): nothing changed."""
    limit_event_needed: bool = False
    """``RecordResult`` would end the task at its step limit, and needs the TaskFailed to
    log (applied = -3): nothing changed."""

    @property
    def exists(self) -> bool:
        return bool(self.status)

    @property
    def running(self) -> bool:
        return self.status == Status.RUNNING

    @classmethod
    def from_reply(cls, reply: list[Any]) -> TaskState:
        found = pairs(reply)
        if int(found.get("committed", 0)) == 1:
            return cls._committed(found)
        return cls(
            applied=int(found["applied"]) == 1,
            status=text(found["status"]),
            step=int(text(found["step"]) or 0),
            phase=text(found["phase"]),
            cause=text(found["cause"]),
            transcript_len=int(found["transcript_len"]),
            expected=json.loads(text(found["expected"]) or "[]"),
            agent_id=text(found["agent_id"]),
            rev=int(text(found["rev"]) or 0),
            hooks_step=int(text(found["hooks_step"]) or 0),
            thread=text(found.get("thread", b"")),
            done=frozenset(text(v) for v in found["done"]),
            duplicate=int(found["applied"]) == -1,
            joining=int(found["applied"]) == -2,
            limit_event_needed=int(found["applied"]) == -3,
        )

    @classmethod
    def _committed(cls, found: dict[str, Any]) -> TaskState:
        """The reply of a fused transition that committed the entry (lua/fused.lua)."""
        return cls(
            applied=int(found["applied"]) == 1,
            status=text(found["status"]),
            step=0,
            phase=text(found["phase"]),
            cause="",
            transcript_len=0,
            expected=[],
            agent_id=text(found["agent_id"]),
            thread=text(found["thread"]),
            committed=True,
        )

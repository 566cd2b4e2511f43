"""A task's state in Redis: its transitions, registered once per process, and the few
reads the loop makes beside them.

The state changes only through the transitions (``services.tasks.transitions``), each one
Lua script on the task's keys (one hash slot), so any number of replicas can race on a
task and exactly one applies each transition; a redelivered event finds the transition
applied already and changes nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis

from contracts.messages import MESSAGE_ADAPTER, Message
from contracts.streams import Names
from services.spec.statecodec import StateCodec
from services.tasks.state import TaskState, pairs, text
from services.tasks.transition import Args, Fusion, Register, Transition
from services.tasks.transitions import ALL, FUSABLE, DecideCall, LogOnce


@dataclass(frozen=True, slots=True)
class Waiting:
    """A task waiting for the answer to a loop-stage hook's interrupt (``AskHuman``)."""

    phase: str
    pending: bytes | None
    """The event it resumes with: a ModelResponded, or the step's StepStarted."""
    node: str
    """The node that waits ("" from older state: HumanInTheLoopMiddleware's after_model)."""
    interrupt_id: str
    resume: dict[str, list[Any]]
    """The answers the step's nodes were given so far, by node."""
    done: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The updates of the nodes that ran to their end before the waiting one."""


class TaskStore:
    """The transitions of every task, on one Redis client: ``await store.apply(task_id,
    FailTask(...))`` runs the transition its arguments are for."""

    def __init__(
        self, redis: aioredis.Redis, names: Names, register: Register | None = None
    ) -> None:
        """``register``: how scripts are run (``Runtime.register_script``; default:
        redis-py's)."""
        self.redis = redis
        self.names = names
        register = register or redis.register_script
        self._transitions: dict[type[Args], Transition[Any]] = {
            args: Transition(args, register, names, fusable=args in FUSABLE) for args in ALL
        }

    async def apply(self, task_id: str, args: Args, fusion: Fusion | None = None) -> TaskState:
        """Apply the transition these arguments are for (``fusion``: and commit the
        entry being handled, when the transition can)."""
        return await self._transitions[type(args)](task_id, args, fusion)

    async def decide_call(self, task_id: str, args: DecideCall) -> tuple[str, str]:
        """Accept a decision for a waiting call: (outcome, the accepted decision); see
        ``lua/call_decided.lua``."""
        found = pairs(await self._transitions[DecideCall].raw(task_id, args))
        return text(found["outcome"]), text(found["decision"])

    async def log_once(self, task_id: str, key: str, event: bytes) -> bool:
        """Append to the task's log unless an event with this key is already there."""
        reply = await self._transitions[LogOnce].raw(task_id, LogOnce(dedupe=key, event=event))
        return int(pairs(reply)["applied"]) == 1

    async def waiting(self, task_id: str) -> Waiting:
        """What a task waiting in the loop stage waits for (its phase, when it is not)."""
        phase, pending, node, interrupt_id, resume, done = await self.redis.hmget(
            self.names.task_state(task_id),
            "phase",
            "pending",
            "wait_node",
            "wait_id",
            "resume",
            "done_nodes",
        )
        return Waiting(
            phase=text(phase or ""),
            pending=pending if isinstance(pending, bytes) else None,
            node=text(node or ""),
            interrupt_id=text(interrupt_id or ""),
            resume=dict(json.loads(resume)) if resume else {},
            done=dict(json.loads(done)) if done else {},
        )

    async def state(self, task_id: str) -> TaskState:
        """The task's state as it stands (read, not moved: ``applied`` is False)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hmget(
            self.names.task_state(task_id),
            "status",
            "step",
            "phase",
            "cause",
            "expected",
            "agent",
            "rev",
            "bm_step",
            "thread",
        )
        pipe.llen(self.names.task_messages(task_id))
        (
            (status, step, phase, cause, expected, agent, rev, bm_step, thread),
            length,
        ) = await pipe.execute()
        return TaskState(
            applied=False,
            status=text(status or ""),
            step=int(text(step or "0")),
            phase=text(phase or ""),
            cause=text(cause or ""),
            transcript_len=int(length),
            expected=json.loads(text(expected or "[]")),
            agent_id=text(agent or ""),
            rev=int(text(rev or "0")),
            hooks_step=int(text(bm_step or "0")),
            thread=text(thread or ""),
        )

    async def extra(self, task_id: str, codec: StateCodec) -> dict[str, Any]:
        """The middleware's state fields, decoded by the agent's ``codec``."""
        raw: Any = await self.redis.hget(self.names.task_state(task_id), "extra")
        return codec.loads(raw)

    async def step_updates(
        self, task_id: str, call_ids: list[str], codec: StateCodec
    ) -> tuple[dict[str, Any], dict[str, list[tuple[str, Any]]]]:
        """The task's state keys and the state updates these calls of the current step
        left for its join (``RecordResult.update``), by call id, decoded by ``codec``."""
        raw: Any = await self.redis.hget(self.names.task_state(task_id), "extra")
        updates: list[Any] = []
        if call_ids:
            fields = [f"{c}:update" for c in call_ids]
            updates = await self.redis.hmget(self.names.task_calls(task_id), fields)
        found: dict[str, list[tuple[str, Any]]] = {}
        for call_id, update in zip(call_ids, updates, strict=True):
            if update:
                found[call_id] = codec.decode_pairs(update_pairs(update))
        return codec.loads(raw), found

    async def current_step(self, task_id: str) -> int:
        found: Any = await self.redis.hget(self.names.task_state(task_id), "step")
        return int(found) if found else 0

    async def last_message(self, task_id: str) -> bytes | None:
        value: Any = await self.redis.lindex(self.names.task_messages(task_id), -1)
        return value if isinstance(value, bytes) or value is None else str(value).encode()


# -- per-call human approvals (HumanInTheLoopMiddleware, interrupt_mode="per_call") ------
#
# A gated call of the tools phase waits in the task's state hash, step-qualified so a
# later step never sees an earlier one's: ``wait:<step>:<call id>`` holds the tools
# consumer's ToolInterrupted (the call and its ToolApprovalRequest), ``decided:<step>:<call
# id>`` the decision accepted for it. Other calls of the step go on and join as usual.


@dataclass(frozen=True, slots=True)
class WaitingCall:
    """A gated call of the task's current step: what it asked, and the decision accepted
    for it (None: a human has yet to answer)."""

    call_id: str
    interrupted: bytes
    decision: str | None
    earlier: list[Any]
    """The answers its earlier interrupts were given (a call that asked more than once)."""

    @property
    def interrupt_id(self) -> str:
        """The id the waiting interrupt is answered by (``tool_interrupt_id``)."""
        return tool_interrupt_id(self.call_id, len(self.earlier))


def tool_interrupt_id(call_id: str, answered: int) -> str:
    """A tool call's interrupt id: the call id for its first interrupt (the one
    HumanInTheLoopMiddleware's per-call approval asks), ``<call id>#<n>`` for the one it
    asks after ``n`` answers, so an answer meant for an earlier one never answers it."""
    return call_id if answered == 0 else f"{call_id}#{answered}"


def call_of_interrupt(interrupt_id: str) -> str:
    """The tool call a tool call's interrupt id names (``tool_interrupt_id`` reversed)."""
    return interrupt_id.partition("#")[0]


def decision_key(decision: Any) -> str:
    """A decision as stored and compared (the same decision gives the same text)."""
    return json.dumps(decision, sort_keys=True, separators=(",", ":"))


async def waiting_calls(
    redis: aioredis.Redis, names: Names, task_id: str
) -> tuple[int, list[WaitingCall]]:
    """The current step and its gated calls without a result yet, oldest first (also read
    by clients: ``loopline approvals`` / ``decide``)."""
    state: Any = await redis.hgetall(names.task_state(task_id))
    answered: Any = await redis.hkeys(names.task_results(task_id))
    fields = {text(k): v for k, v in dict(state or {}).items()}
    if text(fields.get("phase", b"")) != "tools":
        return 0, []
    step = int(text(fields.get("step", b"0")))
    done = {text(k) for k in answered or []}
    prefix = f"wait:{step}:"
    found = []
    for name, value in fields.items():
        call_id = name[len(prefix) :]
        if not name.startswith(prefix) or call_id in done:
            continue
        decided = fields.get(f"decided:{step}:{call_id}")
        raw = value if isinstance(value, bytes) else str(value).encode()
        earlier = json.loads(text(fields.get(f"answers:{step}:{call_id}", b"[]")))
        found.append(WaitingCall(call_id, raw, None if decided is None else text(decided), earlier))
    found.sort(key=lambda w: json.loads(w.interrupted).get("at", 0))
    return step, found


def update_pairs(stored: Any) -> list[tuple[str, Any]]:
    """A tool's state update as stored (``RecordResult.update``: ``[key, value JSON, ...]``),
    its values as ``services.spec.statecodec`` encodes them."""
    flat = json.loads(text(stored))
    return [(flat[i], json.loads(flat[i + 1])) for i in range(0, len(flat), 2)]


@dataclass
class StepWritten:
    """What the current step's ended calls gave before the step joins (LangGraph's pending
    writes): their tool messages and their state updates, both in call order."""

    step: int = 0
    messages: list[Message] = field(default_factory=list)
    updates: dict[str, list[tuple[str, Any]]] = field(default_factory=dict)
    """Call id -> its state update, in call order."""

    @property
    def writes(self) -> list[tuple[str, Any]]:
        """Every update of the step's ended calls, in call order (as LangGraph applies a
        superstep's writes)."""
        return [pair for pairs in self.updates.values() for pair in pairs]


async def step_written(redis: aioredis.Redis, names: Names, task_id: str) -> StepWritten:
    """The current step's results so far (also read by clients: a thread's state shows
    them while a call of the step waits)."""
    pipe = redis.pipeline(transaction=True)  # the results as the step's calls stand
    pipe.hmget(names.task_state(task_id), "step", "expected")
    pipe.hgetall(names.task_results(task_id))
    (step, expected), results = await pipe.execute()
    if not results:
        return StepWritten()
    by_call = {text(k): v for k, v in results.items()}
    order = [c for c in (json.loads(text(expected)) if expected else []) if c in by_call]
    messages = [MESSAGE_ADAPTER.validate_json(by_call[c]) for c in order]
    written = StepWritten(int(text(step)) if step else 0, messages)
    stored: Any = await redis.hmget(names.task_calls(task_id), [f"{c}:update" for c in order])
    for call_id, update in zip(order, stored, strict=True):
        if update:
            written.updates[call_id] = update_pairs(update)
    return written

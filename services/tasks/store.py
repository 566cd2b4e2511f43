"""A task's state in Redis: its transitions, registered once per process, and the few
reads the loop makes beside them.

The state changes only through the transitions (``services.tasks.transitions``), each one
Lua script on the task's keys (one hash slot), so any number of replicas can race on a
task and exactly one applies each transition; a redelivered event finds the transition
applied already and changes nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from contracts.streams import Names
from services.tasks.state import TaskState, pairs, text
from services.tasks.transition import Args, Fusion, Register, Transition
from services.tasks.transitions import ALL, FUSABLE, DecideCall, LogOnce


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

    async def pending_reply(self, task_id: str) -> tuple[str, bytes | None]:
        """The phase, and the model reply a task waiting for approval will resume with."""
        phase, pending = await self.redis.hmget(self.names.task_state(task_id), "phase", "pending")
        return text(phase or ""), pending if isinstance(pending, bytes) else None

    async def extra(self, task_id: str) -> dict[str, Any]:
        """The middleware's state fields."""
        raw: Any = await self.redis.hget(self.names.task_state(task_id), "extra")
        return dict(json.loads(raw)) if raw else {}

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


def decision_key(decision: dict[str, Any]) -> str:
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
        found.append(WaitingCall(call_id, raw, None if decided is None else text(decided)))
    found.sort(key=lambda w: json.loads(w.interrupted).get("at", 0))
    return step, found

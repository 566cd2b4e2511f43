"""Whether a task's state issued a tool call: the tools and todos services run a
``ToolRequested`` (or a ``ToolResumed``) only for a call its task waits for, so an event
that no transition published (forged on the bus, or for a task that does not exist) never
runs a tool.

The check is one small script on the task's own keys (one hash tag): it reads the state
the loop's transitions wrote (running, in the tools phase of that step, for that agent,
the call among the step's expected ones) and, for a call that takes a lease, takes the
lease in the same script, so a leased call costs no round trip more than before. A
delivery that comes too late (its task ended, or its step moved on: the call has a
record) is dropped without running; any other is refused as forged. A call that takes no
lease (a tool declared idempotent) is not checked when it carries a valid seal
(``services.seal``): its one round trip before it runs would be this check alone.
"""

from __future__ import annotations

import enum
import hashlib
import json
import logging

from contracts.events import ToolRequested, ToolResumed
from contracts.messages import AIMessage, ToolCall, ToolMessage
from services.errors import Refused
from services.runtime import Runtime
from services.seal import Sealer

log = logging.getLogger("loopline.tools")

# KEYS: the task's state hash, its calls hash. ARGV: step, call id, agent id, lease
# marker ("": check only), "resume" to require an accepted decision for the call, the
# call's digest (checked against the one its step recorded, when it recorded any), the
# field of the call's record (``record_field``).
# Replies -1: not a call the state waits for; 1: issued (and the lease taken, if asked);
# 0: issued, but its record exists already (another delivery took the lease).
ADMIT_LUA = """
local s = redis.call('HMGET', KEYS[1], 'status', 'step', 'phase', 'expected', 'agent',
                    'issued')
if s[1] ~= 'running' or s[2] ~= ARGV[1] or s[3] ~= 'tools' or s[5] ~= ARGV[3] then
  return -1
end
local issued = false
for _, id in ipairs(cjson.decode(s[4])) do
  if id == ARGV[2] then issued = true break end
end
if not issued then return -1 end
if s[6] and s[6] ~= '' and cjson.decode(s[6])[ARGV[2]] ~= ARGV[6] then return -1 end
if ARGV[5] == 'resume' and
   redis.call('HEXISTS', KEYS[1], 'decided:' .. ARGV[1] .. ':' .. ARGV[2]) == 0 then
  return -1
end
if ARGV[4] == '' then return 1 end
return redis.call('HSETNX', KEYS[2], ARGV[7], ARGV[4])
"""

CallEvent = ToolRequested | ToolResumed


def record_field(step: int, call_id: str) -> str:
    """The field of a call's record in the task's calls hash: its id at its step, so a
    later step's call reusing the id (models do reuse them) runs afresh instead of
    finding the earlier call's result. ``<call id>@<step>`` parses one way (the step is
    what follows the last ``@``), and no other field of the hash ends in digits."""
    return f"{call_id}@{step}"


def call_digest(call: ToolCall) -> str:
    """A short digest of what a call runs (its tool and arguments): a request that keeps
    an issued call's id but changes what it runs is not that call."""
    text = json.dumps([call.name, call.args], sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def call_seal(
    sealer: Sealer,
    task_id: str,
    step: int,
    agent_id: str,
    call: ToolCall,
    digest: str | None = None,
) -> str:
    """The seal of a call a transition issues (``services.seal``): what identifies it in
    its task's state, and what it runs (``digest``: its ``call_digest``, if known)."""
    return sealer.seal(task_id, str(step), agent_id, call.id, digest or call_digest(call))


def call_digests(ai: AIMessage, decided: dict[str, ToolMessage]) -> dict[str, str]:
    """The digests of a reply's calls that are to run (those hooks did not answer)."""
    return {c.id: call_digest(c) for c in ai.tool_calls if c.id not in decided}


class Admission(enum.Enum):
    """What the state says about a requested call."""

    ISSUED = "issued"
    """The state waits for it (and the lease, if asked for, is this delivery's)."""
    RECORDED = "recorded"
    """The state waits for it and its record exists: another delivery took it."""
    LATE = "late"
    """Its task ended, or the call was issued once and its step moved on: nothing to run,
    nothing to report."""


class IssuedCalls:
    """The check, on one runtime."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self._admit = rt.register_script(ADMIT_LUA)

    async def sealed(self, event: ToolRequested) -> bool:
        """Whether the request carries a valid seal: a transition issued this call, with
        this tool and these arguments (no round trip). Says nothing of whether its task
        still waits for it: a sealed call of a task that ended runs, and its result is
        not taken (the transition's guard), as a redelivered one's."""
        sealer = await self.rt.sealer()
        return sealer.verify(
            event.seal, event.task_id, str(event.step), event.agent_id, event.call.id,
            call_digest(event.call),
        )  # fmt: skip

    async def admit(self, event: CallEvent, lease: str = "") -> Admission:
        """Whether ``event``'s call may run (``lease``: a marker to take the call's lease
        with, in the same script). Raises ``Refused`` for a call no state issued."""
        names = self.rt.names
        tid, call_id = event.task_id, event.call.id
        verdict = int(
            await self._admit(
                keys=[names.task_state(tid), names.task_calls(tid)],
                args=[
                    event.step,
                    call_id,
                    event.agent_id,
                    lease,
                    "resume" if isinstance(event, ToolResumed) else "",
                    call_digest(event.call),
                    record_field(event.step, call_id),
                ],
            )
        )
        if verdict == 1:
            return Admission.ISSUED
        if verdict == 0:
            return Admission.RECORDED
        return await self._late_or_forged(event)

    async def _late_or_forged(self, event: CallEvent) -> Admission:
        """Off the hot path: a call of a task that ended, or one with a record (issued
        once; its step moved on), comes too late; any other was never issued by a state
        that still runs."""
        names = self.rt.names
        async with self.rt.redis.pipeline(transaction=False) as pipe:
            pipe.hget(names.task_state(event.task_id), "status")
            pipe.hexists(names.task_calls(event.task_id), record_field(event.step, event.call.id))
            status, recorded = await pipe.execute()
        if (status is not None and status != b"running") or recorded:
            log.info("%s for call %s of task %s comes too late: not run", event.type,
                     event.call.id, event.task_id)  # fmt: skip
            return Admission.LATE
        raise Refused(
            f"{event.type} for call {event.call.id!r} of task {event.task_id!r} at step "
            f"{event.step}: no such call waits in the task's state; not run"
        )

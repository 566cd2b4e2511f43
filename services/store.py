"""A task's state in Redis, changed only by atomic scripts.

The loop is the only writer of a task's state and transcript. Every transition is one Lua
script on the task's keys (one hash slot), so any number of loop replicas can race on a
task and exactly one applies each transition; a redelivered event finds the transition
already applied and changes nothing. Each script returns a snapshot of the state, from
which the caller derives what to publish next (``services.loop.logic``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

import redis.asyncio as aioredis

from contracts.streams import DATA_FIELD, Names
from services.entry import Fused, fused_script

Phase = Literal["model", "tools", "done"]

ScriptCall = Callable[..., Awaitable[Any]]
"""A registered script: ``await script(keys=[...], args=[...])``."""

# Shared Lua: the snapshot every script returns, and the step advance after a join.
_LUA_COMMON = """
local function snapshot(applied)
  local s = redis.call('HMGET', KEYS[1], 'status', 'step', 'phase', 'cause', 'expected',
                      'agent', 'rev', 'bm_step')
  -- The step's calls already answered: the caller publishes only the others.
  local done = {}
  if s[3] == 'tools' then done = redis.call('HKEYS', KEYS[4]) end
  return {applied, s[1] or '', s[2] or '0', s[3] or '', s[4] or '',
          redis.call('LLEN', KEYS[2]), s[5] or '[]', s[6] or '', s[7] or '0', s[8] or '0',
          done}
end

local function log(event)
  redis.call('XADD', KEYS[3], '*', '__DATA__', event)
end

-- A finished task keeps its keys for the retention time, then Redis drops them.
local function finish(status)
  redis.call('HSET', KEYS[1], 'status', status, 'phase', 'done')
  local ttl = tonumber(redis.call('HGET', KEYS[1], 'retention') or '0')
  if ttl and ttl > 0 then
    for i = 1, #KEYS do redis.call('EXPIRE', KEYS[i], ttl) end
  end
end

-- Append the step's tool results in call order, then start the next step or stop at
-- the step limit. ARGV: next_step_event, limit_failed_event (positions given).
local function advance(step, expected, step_event, failed_event)
  for _, id in ipairs(expected) do
    redis.call('RPUSH', KEYS[2], redis.call('HGET', KEYS[4], id))
  end
  redis.call('DEL', KEYS[4])
  local max_steps = tonumber(redis.call('HGET', KEYS[1], 'max_steps'))
  if step + 1 > max_steps then
    finish('failed')
    log(failed_event)
  else
    redis.call('HSET', KEYS[1], 'step', step + 1, 'phase', 'model', 'expected', '[]')
    log(step_event)
  end
end
""".replace("__DATA__", DATA_FIELD)

# KEYS: every task key (Names.task_keys). ARGV: agent_id, max_steps, submitted_event,
# step_event, retention, messages...
_START = (
    _LUA_COMMON
    + """
if redis.call('EXISTS', KEYS[1]) == 1 then return snapshot(0) end
redis.call('HSET', KEYS[1], 'status', 'running', 'step', 1, 'phase', 'model',
           'agent', ARGV[1], 'max_steps', ARGV[2], 'cause', 'start', 'expected', '[]',
           'retention', ARGV[5])
for i = 6, #ARGV do redis.call('RPUSH', KEYS[2], ARGV[i]) end
log(ARGV[3])
log(ARGV[4])
return snapshot(1)
"""
)

# KEYS: state, messages, log, results. ARGV: step, cause, ai_message, responded_event,
# expected (JSON list of call ids), pre_results (JSON object id -> tool message),
# completed_event, step_event, failed_event, after_ai (JSON list of messages the
# after_model hooks added), extra (JSON state fields, or "")
_MODEL_RESPONDED_BODY = """
local s = redis.call('HMGET', KEYS[1], 'status', 'step', 'phase')
if s[1] ~= 'running' or s[2] ~= ARGV[1] then return snapshot(0) end
if s[3] ~= 'model' and s[3] ~= 'approval' then return snapshot(0) end
local step = tonumber(ARGV[1])
redis.call('HDEL', KEYS[1], 'pending')
redis.call('RPUSH', KEYS[2], ARGV[3])
for _, msg in ipairs(cjson.decode(ARGV[10])) do redis.call('RPUSH', KEYS[2], msg) end
if ARGV[11] ~= '' then redis.call('HSET', KEYS[1], 'extra', ARGV[11]) end
log(ARGV[4])
local expected = cjson.decode(ARGV[5])
if #expected == 0 then
  redis.call('HSET', KEYS[1], 'cause', ARGV[2])
  finish('completed')
  log(ARGV[7])
  return snapshot(1)
end
redis.call('HSET', KEYS[1], 'phase', 'tools', 'expected', ARGV[5], 'cause', ARGV[2])
local pre = cjson.decode(ARGV[6])
local n = 0
for id, msg in pairs(pre) do
  redis.call('HSET', KEYS[4], id, msg)
  n = n + 1
end
if n >= #expected then advance(step, expected, ARGV[8], ARGV[9]) end
return snapshot(1)
"""
_MODEL_RESPONDED = _LUA_COMMON + _MODEL_RESPONDED_BODY

# KEYS: state, messages, log, results. ARGV: step, cause, call_id, tool_message,
# tool_event (ToolCompleted for the log), step_event, failed_event
_TOOL_COMPLETED_BODY = """
local s = redis.call('HMGET', KEYS[1], 'status', 'step', 'phase', 'expected')
if s[1] ~= 'running' or s[2] ~= ARGV[1] or s[3] ~= 'tools' then return snapshot(0) end
local expected = cjson.decode(s[4])
local known = false
for _, id in ipairs(expected) do if id == ARGV[3] then known = true end end
if not known then return snapshot(0) end
if redis.call('HSETNX', KEYS[4], ARGV[3], ARGV[4]) == 0 then return snapshot(0) end
log(ARGV[5])
if redis.call('HLEN', KEYS[4]) >= #expected then
  redis.call('HSET', KEYS[1], 'cause', ARGV[2])
  advance(tonumber(ARGV[1]), expected, ARGV[6], ARGV[7])
end
return snapshot(1)
"""
_TOOL_COMPLETED = _LUA_COMMON + _TOOL_COMPLETED_BODY

TASK_KEYS = 8  # Names.task_keys: the scripts' KEYS before what a fused commit adds
_MODEL_RESPONDED_FUSED = fused_script(_LUA_COMMON, _MODEL_RESPONDED_BODY, TASK_KEYS, 11)
_TOOL_COMPLETED_FUSED = fused_script(_LUA_COMMON, _TOOL_COMPLETED_BODY, TASK_KEYS, 7)

# KEYS: every task key. ARGV: step, cause, append (JSON list of messages), rewrite (JSON
# list: the whole new transcript, or ""), extra (JSON or ""), end ("1": finish now),
# completed_event. The before_model hooks of a step, applied once per step.
_APPLY_HOOKS = (
    _LUA_COMMON
    + """
local s = redis.call('HMGET', KEYS[1], 'status', 'step', 'phase', 'bm_step')
if s[1] ~= 'running' or s[2] ~= ARGV[1] or s[3] ~= 'model' or s[4] == ARGV[1] then
  return snapshot(0)
end
redis.call('HSET', KEYS[1], 'bm_step', ARGV[1], 'cause', ARGV[2])
if ARGV[4] ~= '' then
  redis.call('DEL', KEYS[2])
  for _, msg in ipairs(cjson.decode(ARGV[4])) do redis.call('RPUSH', KEYS[2], msg) end
  redis.call('HINCRBY', KEYS[1], 'rev', 1)
end
for _, msg in ipairs(cjson.decode(ARGV[3])) do redis.call('RPUSH', KEYS[2], msg) end
if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'extra', ARGV[5]) end
if ARGV[6] == '1' then
  finish('completed')
  log(ARGV[7])
end
return snapshot(1)
"""
)

# KEYS: every task key. ARGV: step, cause, pending (the ModelResponded to resume with),
# approval_event. The task waits for a human: nothing pending anywhere, no compute held.
_INTERRUPT = (
    _LUA_COMMON
    + """
local s = redis.call('HMGET', KEYS[1], 'status', 'step', 'phase')
if s[1] ~= 'running' or s[2] ~= ARGV[1] or s[3] ~= 'model' then return snapshot(0) end
redis.call('HSET', KEYS[1], 'phase', 'approval', 'pending', ARGV[3], 'cause', ARGV[2])
log(ARGV[4])
return snapshot(1)
"""
)

# KEYS: state, messages, log, results. ARGV: failed_event, cause
_FAIL = (
    _LUA_COMMON
    + """
if redis.call('HGET', KEYS[1], 'status') ~= 'running' then return snapshot(0) end
redis.call('HSET', KEYS[1], 'cause', ARGV[2])
finish('failed')
log(ARGV[1])
return snapshot(1)
"""
)

# KEYS: logged, log. ARGV: dedupe key, event. Logs an event once per key.
_LOG_ONCE = """
if redis.call('SADD', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('XADD', KEYS[2], '*', '__DATA__', ARGV[2])
return 1
""".replace("__DATA__", DATA_FIELD)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The task's state right after a transition attempt."""

    applied: bool
    status: str
    step: int
    phase: str
    cause: str
    transcript_len: int
    expected: list[str]
    agent_id: str
    rev: int = 0
    """Bumped when hooks rewrite the transcript (not a pure append): caches key on it."""
    hooks_step: int = 0
    """The step whose before_model hooks have been applied."""
    done: frozenset[str] = frozenset()
    """In the tools phase: the ids of the step's calls whose results are in."""
    committed: bool = False
    """A fused transition (``services.entry.Fused``) also committed the entry."""

    @classmethod
    def from_reply(cls, reply: list[Any]) -> Snapshot:
        def text(value: Any) -> str:
            return value.decode() if isinstance(value, bytes) else str(value)

        return cls(
            applied=int(reply[0]) == 1,
            status=text(reply[1]),
            step=int(text(reply[2]) or 0),
            phase=text(reply[3]),
            cause=text(reply[4]),
            transcript_len=int(reply[5]),
            expected=json.loads(text(reply[6]) or "[]"),
            agent_id=text(reply[7]),
            rev=int(text(reply[8]) or 0),
            hooks_step=int(text(reply[9]) or 0),
            done=frozenset(text(v) for v in reply[10]) if len(reply) > 10 else frozenset(),
            committed=len(reply) > 11 and int(reply[11]) == 1,
        )


class TaskStore:
    """Typed access to the task scripts. One instance per process and Redis client."""

    def __init__(
        self,
        redis: aioredis.Redis,
        names: Names,
        register: Callable[[str], ScriptCall] | None = None,
    ) -> None:
        """``register``: how scripts are run (``Runtime.register_script``; default:
        redis-py's)."""
        self.redis = redis
        self.names = names
        register = register or redis.register_script
        self._start = register(_START)
        self._model_responded = register(_MODEL_RESPONDED)
        self._tool_completed = register(_TOOL_COMPLETED)
        self._model_responded_fused = register(_MODEL_RESPONDED_FUSED)
        self._tool_completed_fused = register(_TOOL_COMPLETED_FUSED)
        self._fail = register(_FAIL)
        self._apply_hooks = register(_APPLY_HOOKS)
        self._interrupt = register(_INTERRUPT)
        self._log_once = register(_LOG_ONCE)

    def _keys(self, task_id: str) -> list[str]:
        """Every key of the task, state/messages/log/results first (the scripts' KEYS[1-4])."""
        return self.names.task_keys(task_id)

    async def start(
        self,
        task_id: str,
        *,
        agent_id: str,
        max_steps: int,
        submitted_event: bytes,
        step_event: bytes,
        retention_s: int,
        messages: list[bytes],
    ) -> Snapshot:
        args: list[Any] = [agent_id, max_steps, submitted_event, step_event, retention_s]
        args.extend(messages)
        return Snapshot.from_reply(await self._start(keys=self._keys(task_id), args=args))

    async def model_responded(
        self,
        task_id: str,
        *,
        step: int,
        cause: str,
        ai_message: bytes,
        responded_event: bytes,
        expected: list[str],
        pre_results: dict[str, str],
        completed_event: bytes,
        step_event: bytes,
        failed_event: bytes,
        after_ai: list[str] | None = None,
        extra: str = "",
        fuse: Fused | None = None,
    ) -> Snapshot:
        args: list[Any] = [
            step,
            cause,
            ai_message,
            responded_event,
            json.dumps(expected),
            json.dumps(pre_results) if pre_results else "{}",
            completed_event,
            step_event,
            failed_event,
            json.dumps(after_ai or []),
            extra,
        ]
        keys = self._keys(task_id)
        if fuse is None:
            reply = await self._model_responded(keys=keys, args=args)
        else:
            more_keys, more_args = fuse.parts()
            reply = await self._model_responded_fused(keys=keys + more_keys, args=args + more_args)
        return Snapshot.from_reply(reply)

    async def tool_completed(
        self,
        task_id: str,
        *,
        step: int,
        cause: str,
        call_id: str,
        tool_message: bytes,
        tool_event: bytes,
        step_event: bytes,
        failed_event: bytes,
        fuse: Fused | None = None,
    ) -> Snapshot:
        args: list[Any] = [
            step,
            cause,
            call_id,
            tool_message,
            tool_event,
            step_event,
            failed_event,
        ]
        keys = self._keys(task_id)
        if fuse is None:
            reply = await self._tool_completed(keys=keys, args=args)
        else:
            more_keys, more_args = fuse.parts()
            reply = await self._tool_completed_fused(keys=keys + more_keys, args=args + more_args)
        return Snapshot.from_reply(reply)

    async def apply_hooks(
        self,
        task_id: str,
        *,
        step: int,
        cause: str,
        append: list[str],
        rewrite: list[str] | None,
        extra: str,
        end: bool,
        completed_event: bytes,
    ) -> Snapshot:
        args: list[Any] = [
            step,
            cause,
            json.dumps(append),
            json.dumps(rewrite) if rewrite is not None else "",
            extra,
            "1" if end else "0",
            completed_event,
        ]
        reply = await self._apply_hooks(keys=self._keys(task_id), args=args)
        return Snapshot.from_reply(reply)

    async def interrupt(
        self, task_id: str, *, step: int, cause: str, pending: bytes, approval_event: bytes
    ) -> Snapshot:
        reply = await self._interrupt(
            keys=self._keys(task_id), args=[step, cause, pending, approval_event]
        )
        return Snapshot.from_reply(reply)

    async def pending_reply(self, task_id: str) -> tuple[str, bytes | None]:
        """The phase, and the model reply a task waiting for approval will resume with."""
        phase, pending = await self.redis.hmget(self.names.task_state(task_id), "phase", "pending")
        text = phase.decode() if isinstance(phase, bytes) else str(phase or "")
        return text, pending if isinstance(pending, bytes) else None

    async def extra(self, task_id: str) -> dict[str, Any]:
        raw: Any = await self.redis.hget(self.names.task_state(task_id), "extra")
        return dict(json.loads(raw)) if raw else {}

    async def fail(self, task_id: str, *, failed_event: bytes, cause: str) -> Snapshot:
        reply = await self._fail(keys=self._keys(task_id), args=[failed_event, cause])
        return Snapshot.from_reply(reply)

    async def log_once(self, task_id: str, key: str, event: bytes) -> bool:
        """Append to the task's log unless an event with this key is already there."""
        keys = [self.names.task_logged(task_id), self.names.task_log(task_id)]
        return int(await self._log_once(keys=keys, args=[key, event])) == 1

    async def last_message(self, task_id: str) -> bytes | None:
        value: Any = await self.redis.lindex(self.names.task_messages(task_id), -1)
        return value if isinstance(value, bytes) or value is None else str(value).encode()


# -- per-call human approvals (HumanInTheLoopMiddleware, interrupt_mode="per_call") ------
#
# A gated call of the tools phase waits in the task's state hash, step-qualified so a
# later step never sees an earlier one's: ``wait:<step>:<call id>`` holds the tools
# consumer's ToolInterrupted (the call and its ToolApprovalRequest), ``decided:<step>:<call
# id>`` the decision accepted for it. Other calls of the step go on and join as usual.

# KEYS: every task key. ARGV: step, call_id, interrupted_event, approval_event,
# refused_decision ("" when the call asks for the first time). Records the waiting call
# once and logs its ApprovalRequested; with refused_decision (the decision the tool's
# schema refused, if it is still the accepted one) the call waits again: the refusal and a
# new ApprovalRequested are logged.
_CALL_PARKED = (
    _LUA_COMMON
    + """
local s = redis.call('HMGET', KEYS[1], 'status', 'step', 'phase', 'expected')
if s[1] ~= 'running' or s[2] ~= ARGV[1] or s[3] ~= 'tools' then return snapshot(0) end
local known = false
for _, id in ipairs(cjson.decode(s[4])) do if id == ARGV[2] then known = true end end
if not known or redis.call('HEXISTS', KEYS[4], ARGV[2]) == 1 then return snapshot(0) end
local wait = 'wait:' .. ARGV[1] .. ':' .. ARGV[2]
local decided = 'decided:' .. ARGV[1] .. ':' .. ARGV[2]
if ARGV[5] == '' then
  if redis.call('HSETNX', KEYS[1], wait, ARGV[3]) == 0 then return snapshot(0) end
  log(ARGV[4])
  return snapshot(1)
end
if redis.call('HGET', KEYS[1], decided) ~= ARGV[5] then return snapshot(0) end
redis.call('HDEL', KEYS[1], decided)
log(ARGV[3])
log(ARGV[4])
return snapshot(1)
"""
)

# KEYS: state, messages, log, results. ARGV: step, call_id, decision (JSON). Accepts one
# decision per waiting call. Returns {outcome, the accepted decision}: "decided" (this
# one), "taken" (one was accepted before), "done" (the call has its result),
# "not-waiting".
_CALL_DECIDED = """
local s = redis.call('HMGET', KEYS[1], 'status', 'step', 'phase')
if s[1] ~= 'running' or s[2] ~= ARGV[1] or s[3] ~= 'tools' then return {'not-waiting', ''} end
if redis.call('HEXISTS', KEYS[4], ARGV[2]) == 1 then return {'done', ''} end
local wait = 'wait:' .. ARGV[1] .. ':' .. ARGV[2]
local decided = 'decided:' .. ARGV[1] .. ':' .. ARGV[2]
if redis.call('HEXISTS', KEYS[1], wait) == 0 then return {'not-waiting', ''} end
if redis.call('HSETNX', KEYS[1], decided, ARGV[3]) == 1 then return {'decided', ARGV[3]} end
return {'taken', redis.call('HGET', KEYS[1], decided)}
"""


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

    def text(value: Any) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    fields = {text(k): v for k, v in dict(state or {}).items()}
    if text(fields.get("phase", b"")) != "tools":
        return 0, []
    step = int(text(fields.get("step", b"0")))
    done = {text(k) for k in answered or []}
    prefix = f"wait:{step}:"
    found = []
    for name, value in fields.items():
        if not name.startswith(prefix):
            continue
        call_id = name[len(prefix) :]
        if call_id in done:
            continue
        decided = fields.get(f"decided:{step}:{call_id}")
        raw = value if isinstance(value, bytes) else str(value).encode()
        found.append(WaitingCall(call_id, raw, None if decided is None else text(decided)))
    found.sort(key=lambda w: json.loads(w.interrupted).get("at", 0))
    return step, found


class CallWaits:
    """The per-call approval transitions (the loop is their only caller)."""

    def __init__(self, redis: aioredis.Redis, names: Names) -> None:
        self.redis = redis
        self.names = names
        self._parked = redis.register_script(_CALL_PARKED)
        self._decided = redis.register_script(_CALL_DECIDED)

    async def parked(
        self,
        task_id: str,
        *,
        step: int,
        call_id: str,
        interrupted_event: bytes,
        approval_event: bytes,
        refused_decision: str = "",
    ) -> Snapshot:
        args: list[Any] = [
            step,
            call_id,
            interrupted_event,
            approval_event,
            refused_decision,
        ]
        reply = await self._parked(keys=self.names.task_keys(task_id), args=args)
        return Snapshot.from_reply(reply)

    async def decided(
        self, task_id: str, *, step: int, call_id: str, decision: str
    ) -> tuple[str, str]:
        keys = self.names.task_keys(task_id)[:4]
        outcome, accepted = await self._decided(keys=keys, args=[step, call_id, decision])

        def text(value: Any) -> str:
            return value.decode() if isinstance(value, bytes) else str(value or "")

        return text(outcome), text(accepted)

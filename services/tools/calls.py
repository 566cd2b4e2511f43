"""Running a tool call at most once across deliveries: leases, recorded outcomes, and calls
parked for a human.

A call's record in the task's calls hash says where it is: ``running`` (a lease held by a
live worker, renewed while the tool runs), ``waiting`` (parked for a human decision) or
``done`` (its message, recorded with the entry's ack and the result's publication, so a
redelivery re-publishes it instead of running the tool again). A tool declared idempotent
and run without ``wrap_tool_call`` middleware takes no lease: running it again is
harmless by its declaration.

A call whose ``wrap_tool_call`` chain asks a human (``HumanInTheLoopMiddleware`` with
``interrupt_mode="per_call"``) is parked: its record says ``waiting``, nothing is pending
and no thread waits. The loop sends ``ToolResumed`` with the decision; the chain runs
again from the start and LangChain's own code acts on the decision.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from langchain_core.tools import BaseTool
from redis.exceptions import RedisError

from contracts.events import ExceptionInfo, ToolRequested, ToolResumed
from contracts.messages import Message, ToolCall, ToolMessage
from services import approvals
from services.failures import exception_info, failure_text
from services.runtime import Runtime
from services.spec import toolbox
from services.tasks.issued import Admission, IssuedCalls
from services.tools.logic import run_tool, run_wrapped, unknown_outcome

log = logging.getLogger("loopline.tools")


class StillRunning(Exception):
    """Retryable: another live worker runs this call right now."""


@dataclass(frozen=True)
class Parked:
    """A call waiting for a human decision (what its interrupt asked, and why it asks
    again when a decision did not fit)."""

    request: dict[str, Any]
    response_schema: dict[str, Any] | None = None
    error: str | None = None
    decision: dict[str, Any] | None = None


@dataclass(frozen=True)
class Failed:
    """A call whose tool raised (no ``wrap_tool_call`` middleware turned the exception
    into a message): the task fails with it. Recorded like a result, so a redelivery
    reports the same failure instead of running the tool again."""

    error: str
    exception: ExceptionInfo

    @classmethod
    def of(cls, exc: Exception) -> Failed:
        return cls(failure_text(exc), exception_info(exc))


Outcome = ToolMessage | Parked | Failed
Limit = Callable[[], AbstractAsyncContextManager[None]]


@dataclass(frozen=True)
class Job:
    """One call to run: its tool, the agent's wrap_tool_call middleware around it, and
    its time limit (``services.tools.limits``)."""

    task_id: str
    tool: BaseTool
    call: ToolCall
    wrappers: list[Any]
    limit: Limit
    mode: str | None = None
    """The run's ``AgentSpec.run_mode``: which variant of ``wrap_tool_call`` runs."""


# KEYS: the task's calls hash. ARGV: call id, running marker. Takes a parked call for its
# resume: only one delivery of the decision gets to run it. Returns {taken, record}.
_TAKE_PARKED = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then return {0, ''} end
local ok, record = pcall(cjson.decode, current)
if ok and type(record) == 'table' and record['state'] == 'waiting' then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return {1, current}
end
return {0, current}
"""


# KEYS: the task's state hash, its messages list. A wrap_tool_call middleware's state at
# one instant: its fields, the transcript's revision and length (one round trip).
_AGENT_STATE = """
local s = redis.call('HMGET', KEYS[1], 'extra', 'rev')
return {s[1] or '', s[2] or '0', redis.call('LLEN', KEYS[2])}
"""


def parked_field(call_id: str) -> str:
    """Where a parked call's request is kept (next to its record), for asking again."""
    return f"{call_id}:parked"


@dataclass
class Lease:
    """The lease this worker holds on a call while it runs. ``started``, for a call run
    inside wrap_tool_call middleware: whether the tool itself has started (False while
    only the middleware ran, which may park the call for a human before it does)."""

    calls_key: str
    call_id: str
    started: bool | None
    held: bool = True
    """False once the call ended: its renewal stops at its next look (``_keep_lease``)."""


class ToolCalls:
    """One process's tool calls, each run at most once across deliveries."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.issued = IssuedCalls(rt)
        self._take_parked = rt.redis.register_script(_TAKE_PARKED)
        self._read_agent_state = rt.redis.register_script(_AGENT_STATE)
        self.lease_s = rt.settings.claim_idle_ms / 1000

    async def run(self, job: Job, event: ToolRequested) -> Outcome | None:
        """Run a requested call unless a delivery before ran it (or runs it now), and
        only if its task's state issued it (``services.tasks.issued``: raises ``Refused``
        for one it did not; None for one whose task ended or moved on)."""
        calls_key = self.rt.names.task_calls(job.task_id)
        call = job.call
        if toolbox.is_idempotent(job.tool) and not job.wrappers:
            # Running it again is harmless by its declaration, so no lease: a redelivery
            # runs it again, and the transition takes one result. The check is then the
            # call's one round trip before it runs. With wrap_tool_call middleware the
            # record also parks calls for humans.
            if await self.issued.admit(event) is Admission.LATE:
                return None
            try:
                result: ToolMessage | Failed = await run_tool(job.tool, call, limit=job.limit)
            except Exception as exc:  # the tool's own exception: the task fails with it
                result = Failed.of(exc)
            return await self._record_done(calls_key, call.id, result)
        # The check and the lease in one script: the round trip the lease took anyway.
        admission = await self.issued.admit(event, lease=self._first_marker(job))
        if admission is Admission.LATE:
            return None
        if admission is Admission.ISSUED:
            return await self._run_leased(job, None)
        found: Any = await self.rt.redis.hget(calls_key, call.id)
        record = json.loads(found) if found else {}
        if record.get("state") == "waiting":
            # Parked for a human: tell the loop again (it asks only once).
            return await self._parked_request(calls_key, call.id)
        return await self._run_unless_known(job, record, None)

    async def resume(self, job: Job, event: ToolResumed) -> Outcome | None:
        """Run a parked call with its decision, once: the delivery that takes the parked
        record runs it; a duplicate waits for it or re-publishes its result. Only for a
        call of the task's state with an accepted decision (``Refused`` otherwise). None:
        the task ended or moved on, nothing to answer."""
        if await self.issued.admit(event) is Admission.LATE:
            return None
        decision = event.decision
        calls_key = self.rt.names.task_calls(job.task_id)
        taken, found = await self._take_parked(
            keys=[calls_key], args=[job.call.id, self._first_marker(job)]
        )
        if int(taken) == 1:
            return await self._run_leased(job, decision)
        if not found:
            return None
        record = json.loads(found)
        if record.get("state") == "waiting":  # not reachable: the script took it
            raise StillRunning(f"tool call {job.call.id} could not be taken")
        return await self._run_unless_known(job, record, decision)

    # -- leases ------------------------------------------------------------------------

    def _marker(self, started: bool | None = None) -> str:
        """A lease record (``started``: see ``Lease``)."""
        record: dict[str, Any] = {
            "state": "running",
            "consumer": self.rt.consumers.get("tools", ""),
            "until": time.time() + self.lease_s,
        }
        if started is not None:
            record["started"] = started
        return json.dumps(record)

    def _first_marker(self, job: Job) -> str:
        """The lease taken before a call runs: a wrapped call has not reached its tool."""
        return self._marker(False if job.wrappers else None)

    async def _keep_lease(self, lease: Lease) -> None:
        """While the tool runs, renew its lease, so a duplicate delivery of the same call
        waits instead of taking the worker for dead. It ends when the call does: by its
        cancellation, or at its next look at ``lease.held`` when the Redis client
        swallowed the cancellation (seen with a command that Redis refused for want of
        memory at the moment it was cancelled: the call's handler then waited for good)."""
        while lease.held:
            await asyncio.sleep(self.lease_s / 3)
            if not lease.held:
                return
            try:
                await self.rt.redis.hset(
                    lease.calls_key, lease.call_id, self._marker(lease.started)
                )
            except RedisError as exc:  # out of memory or out of reach: again next time
                task = asyncio.current_task()
                if task is not None and task.cancelling():  # a cancellation turned error
                    raise asyncio.CancelledError from exc
                # A renewal Redis refused must not fail the call that runs: its result is
                # still recorded with the entry's commit, when Redis takes writes again.
                log.warning("renewing the lease of tool call %s failed: %r", lease.call_id, exc)

    @staticmethod
    async def _release(lease: Lease, renew: asyncio.Task[None]) -> None:
        """Stop renewing the lease; never wait long for it (see ``_keep_lease``)."""
        lease.held = False
        renew.cancel()
        await asyncio.wait([renew], timeout=1)
        if renew.done() and not renew.cancelled() and renew.exception() is not None:
            log.warning("renewing the lease of tool call %s failed", lease.call_id)

    async def _run_unless_known(
        self, job: Job, record: dict[str, Any], decision: dict[str, Any] | None
    ) -> Outcome:
        """A delivery that did not take the call: its recorded outcome, a retry later while
        a live worker runs it, or (its lease ran out: the worker died mid-run) a run again
        if the tool is idempotent or had not started (only its middleware ran), else the
        model is told the outcome is unknown."""
        calls_key = self.rt.names.task_calls(job.task_id)
        call = job.call
        if record.get("state") == "done":
            return ToolMessage.model_validate(record["message"])
        if record.get("state") == "failed":
            return Failed(record["error"], ExceptionInfo.model_validate(record["exception"]))
        if float(record.get("until", 0)) > time.time():
            # This duplicate stays pending and is retried (by then the result is recorded
            # and gets re-published).
            raise StillRunning(f"tool call {call.id} is running on {record.get('consumer')}")
        if not toolbox.is_idempotent(job.tool) and record.get("started", True):
            return await self._record_done(calls_key, call.id, unknown_outcome(call))
        await self.rt.redis.hset(calls_key, call.id, self._first_marker(job))
        return await self._run_leased(job, decision)

    async def _run_leased(self, job: Job, decision: dict[str, Any] | None) -> Outcome:
        """Run a call whose lease this worker holds; record its outcome."""
        calls_key = self.rt.names.task_calls(job.task_id)
        lease = Lease(calls_key, job.call.id, False if job.wrappers else None)
        renew = asyncio.create_task(self._keep_lease(lease))
        try:
            outcome = await self._run_chain(job, decision, lease)
        except Exception as exc:  # the tool's (or a wrapper's) exception: the task fails
            outcome = Failed.of(exc)
        finally:
            await self._release(lease, renew)
        if isinstance(outcome, Parked):  # after the lease stopped: nothing overwrites it
            return await self._park(calls_key, job.call.id, outcome)
        return await self._record_done(calls_key, job.call.id, outcome)

    async def _run_chain(self, job: Job, decision: dict[str, Any] | None, lease: Lease) -> Outcome:
        """The tool, inside its wrap_tool_call middleware when it has any."""
        call = job.call
        if not job.wrappers:
            return await run_tool(job.tool, call, limit=job.limit)

        async def tool_starts() -> None:
            """Past the middleware: from now on a dead worker's call may have had effects."""
            if not lease.started:
                lease.started = True
                await self.rt.redis.hset(lease.calls_key, call.id, self._marker(True))

        extra, messages = await self._agent_state(job.task_id)
        try:
            return await run_wrapped(
                job.wrappers,
                job.tool,
                call,
                extra,
                decision,
                messages,
                before_tool=tool_starts,
                limit=job.limit,
                mode=job.mode,
            )
        except approvals.Interrupted as asked:
            return Parked(approvals.as_jsonable(asked.value), asked.response_schema)
        except approvals.DecisionRefused as refused_decision:
            asked_before = await self._parked_request(lease.calls_key, call.id)
            return Parked(
                asked_before.request,
                asked_before.response_schema,
                error=f"the decision does not fit this call: {refused_decision}",
                decision=decision,
            )

    async def _agent_state(self, task_id: str) -> tuple[dict[str, Any], list[Message]]:
        """The middleware fields and the transcript at tool time (up to the AI message
        with the calls: the loop appends a step's results only once all are in). Only for
        agents with wrap_tool_call middleware, whose state LangChain fills this way. The
        messages come through the per-task transcript cache: only new ones are read."""
        rt = self.rt
        state_key, messages_key = rt.names.task_state(task_id), rt.names.task_messages(task_id)
        raw, rev, length = await self._read_agent_state(keys=[state_key, messages_key])
        extra = json.loads(raw) if raw else {}
        return extra, await rt.transcript(task_id, int(length), int(rev))

    # -- records -----------------------------------------------------------------------

    async def _park(self, calls_key: str, call_id: str, parked: Parked) -> Parked:
        """Wait for a human with nothing held: only the record says the call waits."""
        kept = {"request": parked.request, "response_schema": parked.response_schema}
        mapping: dict[Any, Any] = {
            parked_field(call_id): json.dumps(kept),
            call_id: json.dumps({"state": "waiting"}),
        }
        await self.rt.redis.hset(calls_key, mapping=mapping)  # one command: both or neither
        return parked

    async def _parked_request(self, calls_key: str, call_id: str) -> Parked:
        found: Any = await self.rt.redis.hget(calls_key, parked_field(call_id))
        kept = json.loads(found) if found else {}
        return Parked(kept.get("request") or {}, kept.get("response_schema"))

    async def _record_done(
        self, calls_key: str, call_id: str, outcome: ToolMessage | Failed
    ) -> ToolMessage | Failed:
        """Recorded with the entry's ack and the result's publication (one script), so a
        redelivery after the commit finds it and re-publishes instead of running again."""
        record: dict[str, Any]
        if isinstance(outcome, Failed):
            exception = outcome.exception.model_dump(mode="json")
            record = {"state": "failed", "error": outcome.error, "exception": exception}
        else:
            record = {"state": "done", "message": outcome.model_dump(mode="json")}
        await self.rt.write(calls_key, call_id, json.dumps(record))
        return outcome

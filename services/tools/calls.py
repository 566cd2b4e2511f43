"""Running a tool call at most once across deliveries: leases, recorded outcomes, and calls
parked for a human.

A call's record in the task's calls hash says where it is: ``running`` (a lease held by a
live worker, renewed while the tool runs), ``waiting`` (parked for a human decision) or
``done`` (its message, recorded with the entry's ack and the result's publication, so a
redelivery re-publishes it instead of running the tool again). A tool declared idempotent
and run without ``wrap_tool_call`` middleware takes no lease: running it again is
harmless by its declaration; requested with a valid seal, its outcome is not recorded
either (no delivery of a sealed request reads it).

A call whose tool or ``wrap_tool_call`` chain calls ``interrupt()`` (a user's own, or
``HumanInTheLoopMiddleware`` with ``interrupt_mode="per_call"``) is parked: its record
says ``waiting``, nothing is pending and no thread waits. The loop sends ``ToolResumed``
with the answer; the call runs again from the start as a LangGraph node
(``services.interrupts``), its ``interrupt()`` calls returning the answers in order, and
LangChain's own code acts on them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

from langchain_core.tools import BaseTool
from langgraph.errors import ParentCommand
from redis.exceptions import RedisError

from contracts.events import ExceptionInfo, ToolRequested, ToolResumed
from contracts.messages import Message, ToolCall, ToolMessage
from services import interrupts
from services.failures import exception_info, failure_text
from services.hooks import lg_runtime, node_config
from services.interrupts import NodeInterrupted, ResumeRefused, is_waiting
from services.runtime import Runtime
from services.spec import toolbox
from services.spec.channels import NO_CHANNELS, StateChannels
from services.spec.statecodec import StateCodec
from services.state_access import StateAccess
from services.tasks.issued import Admission, IssuedCalls, record_field
from services.tools.logic import (
    Answered,
    answered,
    injects,
    reads_state,
    run_tool,
    run_wrapped,
    tool_runtime,
    unknown_outcome,
    with_sends,
)

log = logging.getLogger("loopline.tools")


class StillRunning(Exception):
    """Retryable: another live worker runs this call right now."""


@dataclass(frozen=True)
class Parked:
    """A call waiting for the answer to its interrupt (what it asked, and why it asks
    again when an answer did not fit)."""

    request: Any
    response_schema: dict[str, Any] | None = None
    error: str | None = None
    decision: Any = None
    answered: int = 0
    """How many of the call's interrupts were answered before this one."""
    exception: ExceptionInfo | None = None
    """With ``error``: what refusing the decision raised (the resume raises it again)."""


@dataclass(frozen=True)
class Failed:
    """A call whose tool raised (no ``wrap_tool_call`` middleware turned the exception
    into a message): the task fails with it. Recorded like a result, so a redelivery
    reports the same failure instead of running the tool again."""

    error: str
    exception: ExceptionInfo

    @classmethod
    def of(cls, exc: Exception, task_id: str | None = None) -> Failed:
        return cls(failure_text(exc), exception_info(exc, task_id))


Outcome = Answered | Parked | Failed
Limit = Callable[[], AbstractAsyncContextManager[None]]


@dataclass(frozen=True)
class Job:
    """One call to run: its tool, the agent's wrap_tool_call middleware around it, its
    time limit (``services.tools.limits``), and what its ``ToolRuntime`` gives besides
    the state: the run's context and where ``stream_writer`` writes."""

    task_id: str
    tool: BaseTool | None
    """None: a tool the agent does not define, for its wrap_tool_call middleware to give
    (dynamic tools); the chain answers it as unknown unless a wrapper does."""
    call: ToolCall
    wrappers: list[Any]
    limit: Limit
    step: int = 0
    context: Any = None
    writer: Callable[[Any], None] | None = None
    tools: tuple[BaseTool, ...] = ()
    """The agent's tools (its own and its middleware's), as LangGraph's tool node has
    them: ``ToolRuntime.tools``, and their names answer a call to an unknown tool."""
    mode: str | None = None
    """The run's ``AgentSpec.run_mode``: which variant of ``wrap_tool_call`` runs."""
    channels: StateChannels = NO_CHANNELS
    """The agent's state keys: how their stored values decode, how writes join them."""
    run_config: Mapping[str, Any] = field(default_factory=dict)
    """``HookSet.run_config``: the run's tags, metadata and recursion limit."""

    @property
    def record(self) -> str:
        """The field of the call's record in the task's calls hash."""
        return record_field(self.step, self.call.id)

    @property
    def scope(self) -> str:
        """Where the call runs as a node: its interrupts' ids derive from it."""
        return f"{self.task_id}:{self.step}:{self.call.id}"

    @property
    def idempotent(self) -> bool:
        return self.tool is not None and toolbox.is_idempotent(self.tool)


# KEYS: the task's calls hash. ARGV: the call's record field, running marker. Takes a
# parked call for its resume: only one delivery of the decision gets to run it. Returns
# {taken, record}.
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


# KEYS: the task's state hash, its messages list. The agent's state at one instant, as
# a wrap_tool_call middleware or a tool's runtime sees it: its fields, the transcript's
# revision and length, the thread of a run (one round trip).
_AGENT_STATE = """
local s = redis.call('HMGET', KEYS[1], 'extra', 'rev', 'thread')
return {s[1] or '', s[2] or '0', redis.call('LLEN', KEYS[2]), s[3] or ''}
"""


@dataclass(frozen=True)
class AgentState:
    """The task's state at tool time (``ToolCalls._agent_state``)."""

    extra: dict[str, Any]
    messages: list[Message]
    thread_id: str | None


def tool_message_id(job: Job) -> str:
    """The id of the call's tool message: LangGraph's ``add_messages`` gives every
    message that joins the state one (a uuid); here it derives from the call, so a
    redelivery that runs the call again gives the same."""
    return f"{job.scope}:tool"


def with_message_id(answer: Answered, job: Job) -> Answered:
    """The answer with an id on its tool message (``tool_message_id``), where the message
    came without one (a plain result's is made with it: no copy of the frozen message)."""
    if answer.message.id:
        return answer
    message = answer.message.model_copy(update={"id": tool_message_id(job)})
    return dataclasses.replace(answer, message=message)


def parked_field(record: str) -> str:
    """Where a parked call's request is kept (next to its record), for asking again."""
    return f"{record}:parked"


@dataclass
class Lease:
    """The lease this worker holds on a call while it runs. ``started``, for a call run
    inside wrap_tool_call middleware: whether the tool itself has started (False while
    only the middleware ran, which may park the call for a human before it does)."""

    calls_key: str
    record: str
    """The field of the call's record (``record_field``)."""
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
        if job.idempotent and not job.wrappers:
            # Running it again is harmless by its declaration, so no lease: a redelivery
            # runs it again, and the transition takes one result. A sealed call was
            # issued by a transition; any other is checked against its task's state (a
            # round trip). With wrap_tool_call middleware the record also parks calls
            # for humans.
            sealed = await self.issued.sealed(event)
            if not sealed and await self.issued.admit(event) is Admission.LATE:
                return None
            outcome = await self._run_chain(job, (), None)
            if isinstance(outcome, Parked):
                return await self._park(calls_key, job.record, outcome)
            if sealed and isinstance(outcome, Answered):
                # No record: this call's deliveries are all sealed and run it again
                # without reading one (only an unsealed request asks the record whether
                # it comes too late), so its one write a step would be read by no one.
                return outcome
            return await self._record_done(calls_key, job.record, outcome)
        # The check and the lease in one script: the round trip the lease took anyway.
        admission = await self.issued.admit(event, lease=self._first_marker(job))
        if admission is Admission.LATE:
            return None
        if admission is Admission.ISSUED:
            return await self._run_leased(job, ())
        found: Any = await self.rt.redis.hget(calls_key, job.record)
        record = json.loads(found) if found else {}
        if record.get("state") == "waiting":
            # Parked for a human: tell the loop again (it asks only once).
            return await self._parked_request(calls_key, job.record)
        return await self._run_unless_known(job, record, ())

    async def resume(self, job: Job, event: ToolResumed) -> Outcome | None:
        """Run a parked call with its answer, once: the delivery that takes the parked
        record runs it; a duplicate waits for it or re-publishes its result. Only for a
        call of the task's state with an accepted answer (``Refused`` otherwise). None:
        the task ended or moved on, nothing to answer."""
        if await self.issued.admit(event) is Admission.LATE:
            return None
        answers = [*event.earlier, event.decision]
        calls_key = self.rt.names.task_calls(job.task_id)
        taken, found = await self._take_parked(
            keys=[calls_key], args=[job.record, self._first_marker(job)]
        )
        if int(taken) == 1:
            return await self._run_leased(job, answers)
        if not found:
            return None
        record = json.loads(found)
        if record.get("state") == "waiting":  # not reachable: the script took it
            raise StillRunning(f"tool call {job.call.id} could not be taken")
        return await self._run_unless_known(job, record, answers)

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
                    lease.calls_key, lease.record, self._marker(lease.started)
                )
            except RedisError as exc:  # out of memory or out of reach: again next time
                task = asyncio.current_task()
                if task is not None and task.cancelling():  # a cancellation turned error
                    raise asyncio.CancelledError from exc
                # A renewal Redis refused must not fail the call that runs: its result is
                # still recorded with the entry's commit, when Redis takes writes again.
                log.warning("renewing the lease of tool call %s failed: %r", lease.record, exc)

    @staticmethod
    async def _release(lease: Lease, renew: asyncio.Task[None]) -> None:
        """Stop renewing the lease; never wait long for it (see ``_keep_lease``)."""
        lease.held = False
        renew.cancel()
        await asyncio.wait([renew], timeout=1)
        if renew.done() and not renew.cancelled() and renew.exception() is not None:
            log.warning("renewing the lease of tool call %s failed", lease.record)

    async def _run_unless_known(
        self, job: Job, record: dict[str, Any], answers: Sequence[Any]
    ) -> Outcome:
        """A delivery that did not take the call: its recorded outcome, a retry later while
        a live worker runs it, or (its lease ran out: the worker died mid-run) a run again
        if the tool is idempotent or had not started (only its middleware ran), else the
        model is told the outcome is unknown."""
        calls_key = self.rt.names.task_calls(job.task_id)
        call = job.call
        if record.get("state") == "done":
            message = ToolMessage.model_validate(record["message"])
            writes = record.get("writes")
            return Answered(
                message,
                record.get("update"),
                writes=[(k, v) for k, v in writes] if writes else None,
            )
        if record.get("state") == "failed":
            return Failed(record["error"], ExceptionInfo.model_validate(record["exception"]))
        if float(record.get("until", 0)) > time.time():
            # This duplicate stays pending and is retried (by then the result is recorded
            # and gets re-published).
            raise StillRunning(f"tool call {call.id} is running on {record.get('consumer')}")
        if not job.idempotent and record.get("started", True):
            return await self._record_done(calls_key, job.record, Answered(unknown_outcome(call)))
        await self.rt.redis.hset(calls_key, job.record, self._first_marker(job))
        return await self._run_leased(job, answers)

    async def _run_leased(self, job: Job, answers: Sequence[Any]) -> Outcome:
        """Run a call whose lease this worker holds; record its outcome."""
        calls_key = self.rt.names.task_calls(job.task_id)
        lease = Lease(calls_key, job.record, False if job.wrappers else None)
        renew = asyncio.create_task(self._keep_lease(lease))
        try:
            outcome = await self._run_chain(job, answers, lease)
        finally:
            await self._release(lease, renew)
        if isinstance(outcome, Parked):  # after the lease stopped: nothing overwrites it
            return await self._park(calls_key, job.record, outcome)
        return await self._record_done(calls_key, job.record, outcome)

    async def _run_chain(self, job: Job, answers: Sequence[Any], lease: Lease | None) -> Outcome:
        """The tool, inside its wrap_tool_call middleware when it has any, as a LangGraph
        node: an ``interrupt()`` in either parks the call (``Parked``) or gets its answer
        from ``answers``, in order. An exception that no wrapper turned into a message
        (and that is no wait) is the call's ``Failed`` outcome: the task fails with it,
        as LangChain's agent lets a tool's exception propagate."""
        try:
            runtime = lg_runtime(job.context)
            with interrupts.node("tools", job.scope, answers, runtime, job.run_config):
                return with_message_id(await self._run_tool(job, lease), job)
        except NodeInterrupted as waiting:
            asked = waiting.asked
            return Parked(asked.value, asked.response_schema, answered=len(answers))
        except ParentCommand as handed:
            command = handed.args[0] if handed.args else None
            if getattr(command, "graph", None) != f"tools:{job.scope}":
                return Failed.of(handed, job.task_id)  # for a graph above this one
            # an agent the tool invoked handed this call its Command (a tool of its own
            # returned ``Command(graph=Command.PARENT)``): LangGraph's tools node takes
            # it as its own output, as the tool's returned Command is taken here
            own = dataclasses.replace(command, graph=None)
            return with_message_id(answered(job.tool, job.call, own), job)
        except ResumeRefused as refused:
            calls_key = self.rt.names.task_calls(job.task_id)
            asked_before = await self._parked_request(calls_key, job.record)
            return Parked(
                asked_before.request,
                asked_before.response_schema,
                error=f"the decision does not fit this call: {refused}",
                decision=answers[-1],
                answered=len(answers) - 1,
                exception=exception_info(refused.__cause__ or refused),
            )
        except Exception as exc:  # the tool's (or a wrapper's) exception: the task fails
            if is_waiting(exc):
                raise  # a wait the node did not turn into NodeInterrupted: not a failure
            return Failed.of(exc, job.task_id)

    async def _run_tool(self, job: Job, lease: Lease | None) -> Answered:
        call = job.call
        if not job.wrappers:
            assert job.tool is not None  # an unknown tool comes only with wrappers
            runtime = await self._runtime(job)
            answer = await run_tool(
                job.tool,
                call,
                limit=job.limit,
                runtime=runtime,
                mode=job.mode,
                message_id=tool_message_id(job),
            )
            return with_sends(answer, runtime)
        assert lease is not None  # a wrapped call always runs under its lease

        async def tool_starts() -> None:
            """Past the middleware: from now on a dead worker's call may have had effects."""
            if not lease.started:
                lease.started = True
                await self.rt.redis.hset(lease.calls_key, lease.record, self._marker(True))

        state = await self._agent_state(job.task_id, job.channels.codec)
        return await run_wrapped(
            job.wrappers,
            job.tool,
            call,
            state.extra,
            state.messages,
            before_tool=tool_starts,
            limit=job.limit,
            runtime=self._runtime_of(job, state),
            available=[t.name for t in job.tools],
            mode=job.mode,
        )

    async def _agent_state(self, task_id: str, codec: StateCodec) -> AgentState:
        """The middleware fields and the transcript at tool time (up to the AI message
        with the calls: the loop appends a step's results only once all are in). Only for
        agents with wrap_tool_call middleware and tools that read the state, whose state
        LangChain fills this way. The messages come through the per-task transcript
        cache: only new ones are read."""
        rt = self.rt
        state_key, messages_key = rt.names.task_state(task_id), rt.names.task_messages(task_id)
        raw, rev, length, thread = await self._read_agent_state(keys=[state_key, messages_key])
        extra = codec.loads(raw)
        messages = await rt.transcript(task_id, int(length), int(rev))
        thread_id = thread.decode() if isinstance(thread, bytes) else str(thread)
        return AgentState(extra, messages, thread_id or None)

    async def _runtime(self, job: Job) -> Any:
        """The call's ``ToolRuntime`` when its tool takes one (or an ``Injected*``
        argument); the task's state is read only for a tool that reads it, so other
        tools cost no round trip."""
        if job.tool is None or not injects(job.tool):
            return None  # the tool takes nothing injected: no runtime to build
        if not reads_state(job.tool):
            return self._runtime_of(job, None)
        return self._runtime_of(job, await self._agent_state(job.task_id, job.channels.codec))

    @staticmethod
    def _runtime_of(job: Job, state: AgentState | None) -> Any:
        """LangGraph's ``ToolRuntime`` of the call: the state as its tool node reads it
        (``messages`` and the keys set so far), the run's context, its config: the tools
        node's (``services.hooks.node_config``), with the state's read and send
        (``services.state_access``; the read where the state was read)."""
        from contracts.messages import to_langchain

        values: dict[str, Any] = {}
        thread_id = None
        if state is not None:
            values = {"messages": [to_langchain(m) for m in state.messages], **state.extra}
            thread_id = state.thread_id
        access = StateAccess(job.channels, values if state is not None else None)
        config = node_config(job.run_config, "tools", thread_id)
        # over the node's own configurable (``services.interrupts.node``: the runtime
        # ``get_stream_writer()`` reads, the interrupt's scratchpad), as LangGraph's tool
        # node hands its tools the node's whole config
        config["configurable"] = {
            **interrupts.node_configurable(),
            **config["configurable"],
            **access.configurable(),
        }
        return tool_runtime(
            job.call.id,
            values,
            context=job.context,
            config=config,
            stream_writer=job.writer,
            tools=job.tools,
        )

    # -- records -----------------------------------------------------------------------

    async def _park(self, calls_key: str, record: str, parked: Parked) -> Parked:
        """Wait for a human with nothing held: only the record says the call waits."""
        kept = {
            "request": parked.request,
            "response_schema": parked.response_schema,
            "answered": parked.answered,
        }
        mapping: dict[Any, Any] = {
            parked_field(record): json.dumps(kept),
            record: json.dumps({"state": "waiting"}),
        }
        await self.rt.redis.hset(calls_key, mapping=mapping)  # one command: both or neither
        return parked

    async def _parked_request(self, calls_key: str, record: str) -> Parked:
        found: Any = await self.rt.redis.hget(calls_key, parked_field(record))
        kept = json.loads(found) if found else {}
        return Parked(
            kept.get("request"), kept.get("response_schema"), answered=kept.get("answered", 0)
        )

    async def _record_done(
        self, calls_key: str, field: str, outcome: Answered | Failed
    ) -> Answered | Failed:
        """Recorded with the entry's ack and the result's publication (one script), so a
        redelivery after the commit finds it and re-publishes instead of running again."""
        """Recorded with the entry's ack and the result's publication (one script), so a
        redelivery after the commit finds it and re-publishes instead of running again
        (a failure too: the task fails with the same exception, the tool runs once)."""
        record: dict[str, Any]
        if isinstance(outcome, Failed):
            exception = outcome.exception.model_dump(mode="json")
            record = {"state": "failed", "error": outcome.error, "exception": exception}
        else:
            record = {"state": "done", "message": outcome.message.model_dump(mode="json")}
            if outcome.update is not None:
                record["update"] = outcome.update
            if outcome.writes:
                record["writes"] = outcome.writes
        await self.rt.write(calls_key, field, json.dumps(record))
        return outcome

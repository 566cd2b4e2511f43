"""Tools handler: check the call against the agent's tools, run it, report the result.

A call whose ``wrap_tool_call`` chain asks a human (``HumanInTheLoopMiddleware`` with
``interrupt_mode="per_call"``) is parked: its record says ``waiting``, the loop is told
(``ToolInterrupted``) and the entry is acked, so nothing is pending and no thread waits.
The loop sends ``ToolResumed`` with the decision; the chain runs again from the start and
LangChain's own code acts on the decision.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from langchain_core.tools import BaseTool

from contracts.agent import AgentSpec
from contracts.events import (
    AnyEvent,
    ToolCompleted,
    ToolInterrupted,
    ToolRequested,
    ToolResumed,
)
from contracts.messages import Message, ToolMessage
from services import approvals
from services.agent_view import middleware_tools
from services.errors import BadEvent, ConfigurationError, PayloadTooLarge, PermanentError
from services.hooks import hooks_for
from services.loop.inline import LoopHandOver
from services.runtime import Handler, Runtime
from services.spec import toolbox
from services.tools.logic import refused, run_tool, run_wrapped, too_large, unknown_outcome


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


def handlers(rt: Runtime) -> dict[str, Handler]:
    by_agent: dict[str, dict[str, BaseTool]] = {}
    approvals.install()  # per-call human approvals interrupt in this consumer
    take_parked = rt.redis.register_script(_TAKE_PARKED)
    read_agent_state = rt.redis.register_script(_AGENT_STATE)
    hand_over = LoopHandOver(rt)  # results of hook-free agents skip the loop stream

    for module in rt.settings.tool_modules:  # import errors show at start, not mid-task
        __import__(module)

    def tools_of(agent_id: str, spec: AgentSpec) -> dict[str, BaseTool]:
        found = by_agent.get(agent_id)
        if found is None:
            found = {}
            for extra in middleware_tools(spec):  # tools that middleware add
                made = toolbox.as_tool(extra)
                found[made.name] = made
            for ref in spec.tools:
                made = toolbox.resolve(ref)
                found[made.name] = made
            by_agent[agent_id] = found
        return found

    async def agent_state(task_id: str) -> tuple[dict[str, Any], list[Message]]:
        """The middleware fields and the transcript at tool time (up to the AI message
        with the calls: the loop appends a step's results only once all are in). Only for
        agents with wrap_tool_call middleware, whose state LangChain fills this way. The
        messages come through the per-task transcript cache: only new ones are read."""
        state_key, messages_key = rt.names.task_state(task_id), rt.names.task_messages(task_id)
        raw, rev, length = await read_agent_state(keys=[state_key, messages_key])
        extra = json.loads(raw) if raw else {}
        return extra, await rt.transcript(task_id, int(length), int(rev))

    lease_s = rt.settings.claim_idle_ms / 1000

    def marker(started: bool | None = None) -> str:
        """A lease record. ``started``, for a call run inside wrap_tool_call middleware:
        whether the tool itself has started (False while only the middleware ran, which
        may park the call for a human before it does)."""
        record: dict[str, Any] = {
            "state": "running",
            "consumer": rt.consumers.get("tools", ""),
            "until": time.time() + lease_s,
        }
        if started is not None:
            record["started"] = started
        return json.dumps(record)

    def first_marker(wrappers: list[Any]) -> str:
        """The lease taken before a call runs: a wrapped call has not reached its tool."""
        return marker(False if wrappers else None)

    async def keep_lease(calls_key: str, call_id: str, lease: dict[str, Any]) -> None:
        """While the tool runs, renew its lease, so a duplicate delivery of the same call
        waits instead of taking the worker for dead."""
        while True:
            await asyncio.sleep(lease_s / 3)
            await rt.redis.hset(calls_key, call_id, marker(lease["started"]))

    async def run_once(
        event: ToolRequested, tool: BaseTool, wrappers: list[Any]
    ) -> ToolMessage | Parked:
        """Run the call at most once across deliveries: the result is recorded before the
        entry is acked, and a redelivery re-publishes it instead of running the tool."""
        calls_key = rt.names.task_calls(event.task_id)
        call = event.call
        if toolbox.is_idempotent(tool) and not wrappers:
            # Running it again is harmless by its declaration, so no lease (one round trip
            # fewer): a redelivery runs it again, and the transition takes one result.
            # With wrap_tool_call middleware the record also parks calls for humans.
            return await record_done(calls_key, await run_tool(tool, call))
        if await rt.command("HSETNX", calls_key, call.id, first_marker(wrappers)):
            return await run_leased(event.task_id, tool, call, wrappers, None)
        found: Any = await rt.redis.hget(calls_key, call.id)
        record = json.loads(found) if found else {}
        if record.get("state") == "waiting":
            # Parked for a human: tell the loop again (it asks only once).
            return await parked_request(calls_key, call.id)
        return await run_unless_known(event.task_id, tool, call, wrappers, record, None)

    async def resume_once(
        event: ToolResumed, tool: BaseTool, wrappers: list[Any]
    ) -> ToolMessage | Parked | None:
        """Run a parked call with its decision, once: the delivery that takes the parked
        record runs it; a duplicate waits for it or re-publishes its result."""
        calls_key = rt.names.task_calls(event.task_id)
        call = event.call
        taken, found = await take_parked(keys=[calls_key], args=[call.id, first_marker(wrappers)])
        if int(taken) == 1:
            return await run_leased(event.task_id, tool, call, wrappers, event.decision)
        if not found:  # the task's keys are gone (it ended long ago): nothing to answer
            return None
        record = json.loads(found)
        if record.get("state") == "waiting":  # not reachable: the script took it
            raise StillRunning(f"tool call {call.id} could not be taken")
        return await run_unless_known(event.task_id, tool, call, wrappers, record, event.decision)

    async def run_unless_known(
        task_id: str,
        tool: BaseTool,
        call: Any,
        wrappers: list[Any],
        record: dict[str, Any],
        decision: dict[str, Any] | None,
    ) -> ToolMessage | Parked:
        """A delivery that did not take the call: its recorded outcome, a retry later while
        a live worker runs it, or (its lease ran out: the worker died mid-run) a run again
        if the tool is idempotent or had not started (only its middleware ran), else the
        model is told the outcome is unknown."""
        calls_key = rt.names.task_calls(task_id)
        if record.get("state") == "done":
            return ToolMessage.model_validate(record["message"])
        if float(record.get("until", 0)) > time.time():
            # This duplicate stays pending and is retried (by then the result is recorded
            # and gets re-published).
            raise StillRunning(f"tool call {call.id} is running on {record.get('consumer')}")
        if not toolbox.is_idempotent(tool) and record.get("started", True):
            return await record_done(calls_key, unknown_outcome(call))
        await rt.redis.hset(calls_key, call.id, first_marker(wrappers))
        return await run_leased(task_id, tool, call, wrappers, decision)

    async def run_leased(
        task_id: str,
        tool: BaseTool,
        call: Any,
        wrappers: list[Any],
        decision: dict[str, Any] | None,
    ) -> ToolMessage | Parked:
        """Run a call whose lease this worker holds (``wrappers``: the agent's
        wrap_tool_call middleware); record its outcome."""
        calls_key = rt.names.task_calls(task_id)
        lease: dict[str, Any] = {"started": False if wrappers else None}
        renew = asyncio.create_task(keep_lease(calls_key, call.id, lease))

        async def tool_starts() -> None:
            """Past the middleware: from now on a dead worker's call may have had effects."""
            if not lease["started"]:
                lease["started"] = True
                await rt.redis.hset(calls_key, call.id, marker(True))

        parked: Parked | None = None
        try:
            if wrappers:
                extra, messages = await agent_state(task_id)
                result = await run_wrapped(
                    wrappers, tool, call, extra, decision, messages, before_tool=tool_starts
                )
            else:
                result = await run_tool(tool, call)
        except approvals.Interrupted as asked:
            parked = Parked(approvals.as_jsonable(asked.value), asked.response_schema)
        except approvals.DecisionRefused as refused_decision:
            asked_before = await parked_request(calls_key, call.id)
            parked = Parked(
                asked_before.request,
                asked_before.response_schema,
                error=f"the decision does not fit this call: {refused_decision}",
                decision=decision,
            )
        finally:
            renew.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renew
        if parked is not None:  # after the lease stopped, so nothing overwrites "waiting"
            return await park(calls_key, call.id, parked)
        return await record_done(calls_key, result)

    async def park(calls_key: str, call_id: str, parked: Parked) -> Parked:
        """Wait for a human with nothing held: only the record says the call waits."""
        kept = {"request": parked.request, "response_schema": parked.response_schema}
        mapping: dict[Any, Any] = {
            parked_field(call_id): json.dumps(kept),
            call_id: json.dumps({"state": "waiting"}),
        }
        await rt.redis.hset(calls_key, mapping=mapping)  # one command: both or neither
        return parked

    async def parked_request(calls_key: str, call_id: str) -> Parked:
        found: Any = await rt.redis.hget(calls_key, parked_field(call_id))
        kept = json.loads(found) if found else {}
        return Parked(kept.get("request") or {}, kept.get("response_schema"))

    async def record_done(calls_key: str, message: ToolMessage) -> ToolMessage:
        """Recorded with the entry's ack and the result's publication (one script), so a
        redelivery after the commit finds it and re-publishes instead of running again."""
        record = {"state": "done", "message": message.model_dump(mode="json")}
        await rt.write(calls_key, message.tool_call_id, json.dumps(record))
        return message

    executor_set = False

    async def on_tool_requested(event: AnyEvent) -> None:
        nonlocal executor_set
        if not isinstance(event, ToolRequested | ToolResumed):
            raise BadEvent(f"{event.type} does not belong on the tools stream")
        if not executor_set:  # sync tools run in threads: as many as calls may be in flight
            workers = rt.settings.concurrency("tools")
            asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(workers))
            executor_set = True
        spec = await rt.agent(event.agent_id)
        try:
            tools = tools_of(event.agent_id, spec)
        except ConfigurationError as exc:  # a tool path that does not import here
            raise PermanentError(str(exc)) from exc
        tool = tools.get(event.call.name)
        outcome: ToolMessage | Parked | None
        if tool is None:
            outcome = refused(event.call, list(tools))
        else:
            hooks = hooks_for(event.agent_id, spec)
            wrappers = [m for _, m in hooks.with_hook("wrap_tool_call")]
            if isinstance(event, ToolResumed):
                outcome = await resume_once(event, tool, wrappers)
            else:
                outcome = await run_once(event, tool, wrappers)
        if outcome is None:
            return
        if isinstance(outcome, Parked):
            await rt.publish(
                rt.names.loop,
                ToolInterrupted(
                    task_id=event.task_id,
                    step=event.step,
                    agent_id=event.agent_id,
                    call=event.call,
                    request=outcome.request,
                    response_schema=outcome.response_schema,
                    error=outcome.error,
                    decision=outcome.decision,
                ),
            )
            return
        completed = ToolCompleted(
            task_id=event.task_id, step=event.step, agent_id=event.agent_id, message=outcome
        )
        try:
            if isinstance(event, ToolRequested):
                await hand_over.tool_completed(completed, spec, event.join_len, event.result_at)
            else:
                await hand_over.tool_completed(completed, spec)
        except PayloadTooLarge:
            size = len(completed.model_dump_json())
            limit = rt.settings.max_event_bytes
            small = too_large(event.call, size, limit)
            await rt.publish(rt.names.loop, completed.model_copy(update={"message": small}))

    return {rt.names.tools: on_tool_requested}

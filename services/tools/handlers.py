"""Tools handler: check the call against the agent's tools, run it, report the result."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from langchain_core.tools import BaseTool

from contracts.agent import AgentSpec
from contracts.events import AnyEvent, ToolCompleted, ToolRequested
from contracts.messages import ToolMessage
from services import toolbox
from services.agent_view import middleware_tools
from services.errors import BadEvent, ConfigurationError, PayloadTooLarge, PermanentError
from services.hooks import hooks_for
from services.runtime import Handler, Runtime
from services.tools.logic import refused, run_tool, run_wrapped, too_large, unknown_outcome


class StillRunning(Exception):
    """Retryable: another live worker runs this call right now."""


def handlers(rt: Runtime) -> dict[str, Handler]:
    by_agent: dict[str, dict[str, BaseTool]] = {}

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

    lease_s = rt.settings.claim_idle_ms / 1000

    def marker() -> str:
        until = time.time() + lease_s
        return json.dumps(
            {"state": "running", "consumer": rt.consumers.get("tools", ""), "until": until}
        )

    async def keep_lease(calls_key: str, call_id: str) -> None:
        """While the tool runs, renew its lease, so a duplicate delivery of the same call
        waits instead of taking the worker for dead."""
        while True:
            await asyncio.sleep(lease_s / 3)
            await rt.redis.hset(calls_key, call_id, marker())

    async def run_once(event: ToolRequested, tool: BaseTool) -> ToolMessage:
        """Run the call at most once across deliveries: the result is recorded before the
        entry is acked, and a redelivery re-publishes it instead of running the tool."""
        calls_key = rt.names.task_calls(event.task_id)
        call = event.call
        if not await rt.redis.hsetnx(calls_key, call.id, marker()):
            found: Any = await rt.redis.hget(calls_key, call.id)
            record = json.loads(found) if found else {}
            if record.get("state") == "done":
                return ToolMessage.model_validate(record["message"])
            if float(record.get("until", 0)) > time.time():
                # A live worker runs it now: this duplicate stays pending and is retried
                # (by then the result is recorded and gets re-published).
                raise StillRunning(f"tool call {call.id} is running on {record.get('consumer')}")
            # Its lease ran out: the worker that started it died mid-run.
            if not toolbox.is_idempotent(tool):
                return await record_done(calls_key, unknown_outcome(call))
            await rt.redis.hset(calls_key, call.id, marker())
        renew = asyncio.create_task(keep_lease(calls_key, call.id))
        try:
            spec = await rt.agent(event.agent_id)
            hooks = hooks_for(event.agent_id, spec)
            wrappers = [m for _, m in hooks.with_hook("wrap_tool_call")]
            if wrappers:
                extra = await rt.store.extra(event.task_id)
                result = await run_wrapped(wrappers, tool, call, extra)
            else:
                result = await run_tool(tool, call)
        finally:
            renew.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renew
        return await record_done(calls_key, result)

    async def record_done(calls_key: str, message: ToolMessage) -> ToolMessage:
        record = {"state": "done", "message": message.model_dump(mode="json")}
        await rt.redis.hset(calls_key, message.tool_call_id, json.dumps(record))
        return message

    executor_set = False

    async def on_tool_requested(event: AnyEvent) -> None:
        nonlocal executor_set
        if not isinstance(event, ToolRequested):
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
        message = refused(event.call, list(tools)) if tool is None else await run_once(event, tool)
        completed = ToolCompleted(
            task_id=event.task_id, step=event.step, agent_id=event.agent_id, message=message
        )
        try:
            await rt.publish(rt.names.loop, completed)
        except PayloadTooLarge:
            size = len(completed.model_dump_json())
            limit = rt.settings.max_event_bytes
            small = too_large(event.call, size, limit)
            await rt.publish(rt.names.loop, completed.model_copy(update={"message": small}))

    return {rt.names.tools: on_tool_requested}

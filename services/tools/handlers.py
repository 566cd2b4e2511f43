"""Tools handler: check the call against the agent's tools, run it once (``calls``),
report the result: to the loop, or through the task's transition applied here
(``services.tasks.handover``) for agents without loop-stage hooks."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from langchain_core.tools import BaseTool

from contracts.agent import AgentSpec
from contracts.events import AnyEvent, ToolCompleted, ToolInterrupted, ToolRequested, ToolResumed
from services import toolbox
from services.agent_view import middleware_tools
from services.errors import BadEvent, ConfigurationError, PayloadTooLarge, PermanentError
from services.hooks import hooks_for
from services.loop import approvals
from services.runtime import Handler, Runtime
from services.tasks.handover import LoopHandOver
from services.tools.calls import Outcome, Parked, ToolCalls
from services.tools.logic import refused, too_large

CallEvent = ToolRequested | ToolResumed


class ToolsService:
    """The tools consumer of one process: the agents' tools, loaded once per agent."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.calls = ToolCalls(rt)
        self.hand_over = LoopHandOver(rt)  # results of hook-free agents skip the loop stream
        self._by_agent: dict[str, dict[str, BaseTool]] = {}
        self._executor_set = False

    async def on_call(self, event: AnyEvent) -> None:
        if not isinstance(event, ToolRequested | ToolResumed):
            raise BadEvent(f"{event.type} does not belong on the tools stream")
        self._set_executor()
        spec = await self.rt.agent(event.agent_id)
        outcome = await self._outcome(event, spec)
        if isinstance(outcome, Parked):
            await self._report_parked(event, outcome)
        elif outcome is not None:
            await self._report_done(event, spec, outcome)

    def _set_executor(self) -> None:
        """Sync tools run in threads: as many as calls may be in flight."""
        if not self._executor_set:
            workers = self.rt.settings.concurrency("tools")
            asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(workers))
            self._executor_set = True

    def _tools_of(self, agent_id: str, spec: AgentSpec) -> dict[str, BaseTool]:
        found = self._by_agent.get(agent_id)
        if found is None:
            found = {}
            for extra in middleware_tools(spec):  # tools that middleware add
                made = toolbox.as_tool(extra)
                found[made.name] = made
            for ref in spec.tools:
                made = toolbox.resolve(ref)
                found[made.name] = made
            self._by_agent[agent_id] = found
        return found

    async def _outcome(self, event: CallEvent, spec: AgentSpec) -> Outcome | None:
        try:
            tools = self._tools_of(event.agent_id, spec)
        except ConfigurationError as exc:  # a tool path that does not import here
            raise PermanentError(str(exc)) from exc
        tool = tools.get(event.call.name)
        if tool is None:
            return refused(event.call, list(tools))
        hooks = hooks_for(event.agent_id, spec)
        wrappers: list[Any] = [m for _, m in hooks.with_hook("wrap_tool_call")]
        if isinstance(event, ToolResumed):
            return await self.calls.resume(event, tool, wrappers)
        return await self.calls.run(event, tool, wrappers)

    async def _report_parked(self, event: CallEvent, parked: Parked) -> None:
        await self.rt.publish(
            self.rt.names.loop,
            ToolInterrupted(
                task_id=event.task_id,
                step=event.step,
                agent_id=event.agent_id,
                call=event.call,
                request=parked.request,
                response_schema=parked.response_schema,
                error=parked.error,
                decision=parked.decision,
            ),
        )

    async def _report_done(self, event: CallEvent, spec: AgentSpec, message: Any) -> None:
        completed = ToolCompleted(
            task_id=event.task_id, step=event.step, agent_id=event.agent_id, message=message
        )
        try:
            if isinstance(event, ToolRequested):
                await self.hand_over.tool_completed(
                    completed, spec, event.join_len, event.result_at
                )
            else:
                await self.hand_over.tool_completed(completed, spec)
        except PayloadTooLarge:
            size = len(completed.model_dump_json())
            small = too_large(event.call, size, self.rt.settings.max_event_bytes)
            await self.rt.publish(
                self.rt.names.loop, completed.model_copy(update={"message": small})
            )


def handlers(rt: Runtime) -> dict[str, Handler]:
    approvals.install()  # per-call human approvals interrupt in this consumer
    for module in rt.settings.tool_modules:  # import errors show at start, not mid-task
        __import__(module)
    return {rt.names.tools: ToolsService(rt).on_call}

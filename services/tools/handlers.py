"""Tools handler: check the call against the agent's tools, run it once (``calls``),
report the result: to the loop, or through the task's transition applied here
(``services.tasks.handover``) for agents without loop-stage hooks."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from typing import Any

from langchain_core.tools import BaseTool

from contracts.agent import AgentSpec
from contracts.events import (
    AnyEvent,
    ToolCompleted,
    ToolFailed,
    ToolInterrupted,
    ToolRequested,
    ToolResumed,
)
from services.agent_view import middleware_tools
from services.custom_stream import CustomWriter, writing
from services.errors import (
    BadEvent,
    ConfigurationError,
    PayloadTooLarge,
    PermanentError,
    Refused,
)
from services.held_callbacks import with_callbacks
from services.hooks import hooks_for
from services.runtime import Handler, Runtime
from services.spec import toolbox
from services.tasks.handover import LoopHandOver
from services.tasks.issued import Admission
from services.tools.calls import Failed, Job, Outcome, Parked, ToolCalls
from services.tools.limits import CallLimits, timeout_of
from services.tools.logic import Answered, guarded, refused, too_large
from services.tools.threads import ToolThreads

log = logging.getLogger("loopline.tools")

CallEvent = ToolRequested | ToolResumed


class ToolsService:
    """The tools consumer of one process: the agents' tools, loaded once per agent."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.calls = ToolCalls(rt)
        self.limits = CallLimits(rt)
        self.hand_over = LoopHandOver(rt)  # results of hook-free agents skip the loop stream
        self._by_agent: dict[str, dict[str, BaseTool]] = {}
        self._executor_set = False
        self._stuck_reported = False

    async def on_call(self, event: AnyEvent) -> None:
        if not isinstance(event, ToolRequested | ToolResumed):
            raise BadEvent(f"{event.type} does not belong on the tools stream")
        self._set_executor()
        try:
            spec = await self.rt.agent(event.agent_id)
            outcome = await self._outcome(event, spec)
        except Refused:
            raise
        except PermanentError as exc:
            # An unknown agent or tool path ends the task only if its state issued the
            # call; a forged event is refused on its own (the task it names goes on),
            # its letter saying both why.
            try:
                await self.calls.issued.admit(event)
            except Refused as forged:
                raise Refused(f"{forged}; and: {exc}") from exc
            raise
        if isinstance(outcome, Parked):
            await self._report_parked(event, outcome)
        elif isinstance(outcome, Failed):
            await self._report_failed(event, outcome)
        elif outcome is not None:
            await self._report_done(event, spec, outcome)

    def _set_executor(self) -> None:
        """Sync tools run in threads that a hung tool cannot exhaust."""
        if not self._executor_set:
            threads = ToolThreads(self.rt.settings.tool_stuck_max, self._on_stuck)
            asyncio.get_running_loop().set_default_executor(threads)
            self._executor_set = True

    def _on_stuck(self, stuck: int) -> None:
        """Too many threads of abandoned sync calls: hand the work over and exit (SIGTERM
        runs the graceful shutdown), for the supervisor to start a fresh process."""
        if self._stuck_reported:
            return
        self._stuck_reported = True
        log.error(
            "%d sync tool calls still run past their end (LOOPLINE_TOOL_STUCK_MAX=%d): "
            "handing this process's work over and exiting",
            stuck,
            self.rt.settings.tool_stuck_max,
        )
        os.kill(os.getpid(), signal.SIGTERM)

    def _tools_of(self, agent_id: str, spec: AgentSpec) -> dict[str, BaseTool]:
        found = self._by_agent.get(agent_id)
        if found is None:
            found = {}
            for extra in middleware_tools(spec):  # tools that middleware add
                made = guarded(toolbox.as_tool(extra))
                found[made.name] = made
            for ref in spec.tools:
                made = guarded(toolbox.resolve(ref))
                found[made.name] = made
            self._by_agent[agent_id] = found
        return found

    async def _outcome(self, event: CallEvent, spec: AgentSpec) -> Outcome | None:
        try:
            tools = self._tools_of(event.agent_id, spec)
        except ConfigurationError as exc:  # a tool path that does not import here
            raise PermanentError(str(exc)) from exc
        tool = tools.get(event.call.name)
        hooks = hooks_for(event.agent_id, spec)
        wrappers: list[Any] = [m for _, m in hooks.with_hook("wrap_tool_call")]
        if tool is None and not wrappers:  # with wrappers, one may give the tool (dynamic)
            if await self.calls.issued.admit(event) is Admission.LATE:
                return None
            return Answered(refused(event.call, list(tools)))
        timeout_s = timeout_of(spec, event.call.name, self.rt.settings.tool_timeout_s)
        writer = CustomWriter(self.rt, event.task_id, event.step, "tools", event.call.id)
        job = Job(
            event.task_id,
            tool,
            event.call,
            wrappers,
            limit=lambda: self.limits.limit(event.task_id, timeout_s),
            step=event.step,
            context=hooks.context,
            writer=writer,
            tools=tuple(tools.values()),
            mode=hooks.mode,
            channels=hooks.channels,
            # the caller's callback handlers, where it runs in this process
            run_config=with_callbacks(hooks.run_config, event.task_id),
        )
        with writing(writer, hooks.context):
            if isinstance(event, ToolResumed):
                outcome = await self.calls.resume(job, event)
            else:
                outcome = await self.calls.run(job, event)
        await writer.flush()  # before the result is reported: a client sees them first
        return outcome

    async def _report_parked(self, event: CallEvent, parked: Parked) -> None:
        await self.rt.publish(
            self.rt.names.work("loop", event.task_id),
            ToolInterrupted(
                task_id=event.task_id,
                step=event.step,
                agent_id=event.agent_id,
                call=event.call,
                request=parked.request,
                response_schema=parked.response_schema,
                error=parked.error,
                decision=parked.decision,
                exception=parked.exception,
                answered=parked.answered,
            ),
        )

    async def _report_failed(self, event: CallEvent, failed: Failed) -> None:
        """The loop fails the task with the tool's exception (rare: no fused path)."""
        await self.rt.publish(
            self.rt.names.work("loop", event.task_id),
            ToolFailed(
                task_id=event.task_id,
                step=event.step,
                agent_id=event.agent_id,
                call=event.call,
                error=failed.error,
                exception=failed.exception,
            ),
        )

    async def _report_done(self, event: CallEvent, spec: AgentSpec, answer: Answered) -> None:
        completed = ToolCompleted(
            task_id=event.task_id,
            step=event.step,
            agent_id=event.agent_id,
            message=answer.message,
            update=answer.update,
            writes=answer.writes,
        )
        try:
            if isinstance(event, ToolRequested):
                await self.hand_over.tool_completed(
                    completed, spec, event.join_len, event.result_at, event.rev
                )
            else:
                await self.hand_over.tool_completed(completed, spec)
        except PayloadTooLarge:
            size = len(completed.model_dump_json())
            small = too_large(event.call, size, self.rt.settings.max_event_bytes)
            await self.rt.publish(
                self.rt.names.work("loop", event.task_id),
                completed.model_copy(update={"message": small, "update": None, "writes": None}),
            )


def handlers(rt: Runtime) -> dict[str, Handler]:
    for module in rt.settings.tool_modules:  # import errors show at start, not mid-task
        __import__(module)
    service = ToolsService(rt)
    rt.background.append(service.limits)
    return dict.fromkeys(rt.names.work_streams("tools"), service.on_call)

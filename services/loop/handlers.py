"""Loop handlers: each event on the loop's streams to its method of ``Loop``."""

from __future__ import annotations

from contracts.events import (
    AnyEvent,
    CancelRequested,
    DecisionsSubmitted,
    ModelFailed,
    ModelResponded,
    RunDequeued,
    TaskSubmitted,
    ToolCompleted,
    ToolFailed,
    ToolInterrupted,
)
from services import approvals
from services.errors import BadEvent, Refused
from services.loop.deadlines import DeadlineSweeper
from services.runtime import Handler, Runtime
from services.tasks.loop import Loop


def handlers(rt: Runtime) -> dict[str, Handler]:
    approvals.install()
    loop = Loop(rt)
    rt.background.append(DeadlineSweeper(rt, loop.stop))

    async def on_task(event: AnyEvent) -> None:
        if isinstance(event, TaskSubmitted):
            await loop.task_submitted(event)
        elif isinstance(event, RunDequeued):
            await loop.run_dequeued(event)
        elif isinstance(event, CancelRequested):
            await loop.cancel_requested(event)
        elif isinstance(event, DecisionsSubmitted):
            await loop.decisions_submitted(event)
        else:  # refused on its own: the producers' stream never moves a task otherwise
            raise Refused(f"{event.type} does not belong on the tasks stream")

    async def on_loop_event(event: AnyEvent) -> None:
        if isinstance(event, ModelResponded):
            await loop.model_responded(event)
        elif isinstance(event, ToolCompleted):
            await loop.tool_completed(event)
        elif isinstance(event, ModelFailed):
            await loop.model_failed(event)
        elif isinstance(event, ToolFailed):
            await loop.tool_failed(event)
        elif isinstance(event, ToolInterrupted):
            await loop.tool_interrupted(event)
        else:
            raise BadEvent(f"{event.type} does not belong on the loop stream")

    return {rt.names.tasks: on_task, rt.names.loop: on_loop_event}

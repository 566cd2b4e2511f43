"""Loop handlers: each event on the loop's streams to its method of ``Loop``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from contracts.events import (
    AnyEvent,
    CancelRequested,
    DecisionsSubmitted,
    ModelFailed,
    ModelInterrupted,
    ModelResponded,
    RunDequeued,
    TaskSubmitted,
    ToolCompleted,
    ToolFailed,
    ToolInterrupted,
)
from services.errors import BadEvent, Refused
from services.loop.deadlines import DeadlineSweeper
from services.runtime import Handler, Runtime
from services.tasks.loop import Loop


def handlers(rt: Runtime) -> dict[str, Handler]:
    loop = Loop(rt)
    rt.background.append(DeadlineSweeper(rt, loop.stop))
    rt.background.append(loop.registrations)  # kept registrations, told of changes

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

    # what each result coming back to the loop does to its task
    on_result: dict[type[Any], Callable[[Any], Awaitable[None]]] = {
        ModelResponded: loop.model_responded,
        ToolCompleted: loop.tool_completed,
        ModelFailed: loop.model_failed,
        ToolFailed: loop.tool_failed,
        ToolInterrupted: loop.tool_interrupted,
        ModelInterrupted: loop.model_interrupted,
    }

    async def on_loop_event(event: AnyEvent) -> None:
        apply = on_result.get(type(event))
        if apply is None:
            raise BadEvent(f"{event.type} does not belong on the loop stream")
        await apply(event)

    streams: dict[str, Handler] = dict.fromkeys(rt.names.inputs_of("loop"), on_task)
    streams.update(dict.fromkeys(rt.names.work_streams("loop"), on_loop_event))
    return streams

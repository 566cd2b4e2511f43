"""Loop handlers: parse → one atomic transition → publish what the new state asks for.

A transition's outputs are published by whichever delivery of the event applied it, or by
a redelivery of that same event (the state remembers its ``cause``), so a crash between
the transition and the publish loses nothing, and a duplicate publishes nothing new.
"""

from __future__ import annotations

from contracts.events import (
    AnyEvent,
    ContextRequested,
    ModelFailed,
    ModelResponded,
    StepStarted,
    TaskCompleted,
    TaskFailed,
    TaskSubmitted,
    ToolCompleted,
    ToolRequested,
    dump_event,
)
from contracts.messages import MESSAGE_ADAPTER, AIMessage
from services.agent_view import has_todos
from services.errors import BadEvent
from services.loop.logic import WRITE_TODOS, after_model_results, join_order, step_limit_reason
from services.runtime import Handler, Runtime
from services.store import Snapshot


def handlers(rt: Runtime) -> dict[str, Handler]:
    names = rt.names

    async def emit(task_id: str, snap: Snapshot, ai: AIMessage | None = None) -> None:
        if snap.status != "running":
            rt.forget(task_id)
            return
        if snap.phase == "model":
            await rt.publish(
                names.context,
                ContextRequested(
                    task_id=task_id,
                    step=snap.step,
                    agent_id=snap.agent_id,
                    transcript_len=snap.transcript_len,
                ),
            )
            return
        if ai is None:
            raw = await rt.store.last_message(task_id)
            last = MESSAGE_ADAPTER.validate_json(raw) if raw else None
            if not isinstance(last, AIMessage):
                return
            ai = last
        done = await rt.store.results(task_id)
        spec = await rt.agent(snap.agent_id)
        todos = has_todos(spec)
        pending = [c for c in ai.tool_calls if c.id in snap.expected and c.id not in done]
        await rt.publish_many(
            [
                (
                    names.todo_calls if todos and call.name == WRITE_TODOS else names.tools,
                    ToolRequested(
                        task_id=task_id, step=snap.step, agent_id=snap.agent_id, call=call
                    ),
                )
                for call in pending
            ]
        )

    def failed(task_id: str, step: int, reason: str) -> bytes:
        return dump_event(TaskFailed(task_id=task_id, step=step, reason=reason))

    async def on_task(event: AnyEvent) -> None:
        if not isinstance(event, TaskSubmitted):
            raise BadEvent(f"{event.type} does not belong on the tasks stream")
        if not event.messages:
            raise BadEvent("TaskSubmitted needs at least one message")
        agent_id = await rt.save_agent(event.agent)
        snap = await rt.store.start(
            event.task_id,
            agent_id=agent_id,
            max_steps=event.max_steps or rt.settings.max_steps,
            submitted_event=dump_event(event),
            step_event=dump_event(StepStarted(task_id=event.task_id, step=1)),
            messages=[m.model_dump_json().encode() for m in event.messages],
        )
        if snap.cause == "start":
            await emit(event.task_id, snap)

    async def on_model_responded(event: ModelResponded) -> None:
        spec = await rt.agent(event.agent_id)
        ai = event.message
        decided = after_model_results(spec, ai)
        cause = f"model:{event.step}"
        tid = event.task_id
        snap = await rt.store.model_responded(
            tid,
            step=event.step,
            cause=cause,
            ai_message=ai.model_dump_json().encode(),
            responded_event=dump_event(event),
            expected=join_order(ai, decided),
            pre_results={k: v.model_dump_json() for k, v in decided.items()},
            completed_event=dump_event(
                TaskCompleted(task_id=tid, steps=event.step, answer=ai.text())
            ),
            step_event=dump_event(StepStarted(task_id=tid, step=event.step + 1)),
            failed_event=failed(tid, event.step, step_limit_reason(event.step)),
        )
        if snap.cause == cause:
            await emit(tid, snap, ai if snap.step == event.step else None)

    async def on_tool_completed(event: ToolCompleted) -> None:
        tid = event.task_id
        cause = f"tool:{event.step}:{event.message.tool_call_id}"
        snap = await rt.store.tool_completed(
            tid,
            step=event.step,
            cause=cause,
            call_id=event.message.tool_call_id,
            tool_message=event.message.model_dump_json().encode(),
            tool_event=dump_event(event),
            step_event=dump_event(StepStarted(task_id=tid, step=event.step + 1)),
            failed_event=failed(tid, event.step, step_limit_reason(event.step)),
        )
        if snap.cause == cause:
            await emit(tid, snap)

    async def on_model_failed(event: ModelFailed) -> None:
        cause = f"model-failed:{event.step}"
        reason = f"model call failed at step {event.step}: {event.error}"
        await rt.store.fail(
            event.task_id, failed_event=failed(event.task_id, event.step, reason), cause=cause
        )
        rt.forget(event.task_id)

    async def on_loop_event(event: AnyEvent) -> None:
        if isinstance(event, ModelResponded):
            await on_model_responded(event)
        elif isinstance(event, ToolCompleted):
            await on_tool_completed(event)
        elif isinstance(event, ModelFailed):
            await on_model_failed(event)
        else:
            raise BadEvent(f"{event.type} does not belong on the loop stream")

    return {names.tasks: on_task, names.loop: on_loop_event}

"""Loop handlers: parse → one atomic transition → publish what the new state asks for.

A transition's outputs are published by whichever delivery of the event applied it, or by
a redelivery of that same event (the state remembers its ``cause``), so a crash between
the transition and the publish loses nothing, and a duplicate publishes nothing new.

For an agent without loop-stage hooks the new state is predictable, so a transition is
fused with its outputs and the entry's ack (``services.entry.Fused``: one script), and
the model and tools services apply these transitions themselves
(``services.loop.inline``): the loop service then only starts, cancels and times out
tasks and runs hooks and approvals.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from contracts.events import (
    AnyEvent,
    ApprovalRequested,
    CancelRequested,
    DecisionsSubmitted,
    ModelFailed,
    ModelResponded,
    StepStarted,
    TaskCompleted,
    TaskFailed,
    TaskSubmitted,
    ToolCompleted,
    ToolInterrupted,
    dump_event,
    parse_event,
)
from contracts.messages import MESSAGE_ADAPTER, AIMessage
from services import approvals
from services.errors import BadEvent, UnknownTask
from services.hooks import HookSet, hooks_for
from services.loop.deadlines import DeadlineSweeper
from services.loop.hookrun import model_turn, start_step
from services.loop.logic import (
    after_model_results,
    join_order,
    model_request,
    step_limit_reason,
    tool_requests,
)
from services.loop.per_call import PerCallApprovals
from services.runtime import Handler, Runtime
from services.store import Snapshot

log = logging.getLogger("loopline.loop")

LAST_RESULT_MAX_BYTES = 2048
"""A step's only tool result rides in the next model request up to this size (JSON):
larger ones are read from the transcript, so events stay small."""


@dataclass(frozen=True)
class Transitions:
    """The loop's handlers, built on one runtime. The loop service consumes its streams
    with them; the model and tools services call ``model_responded`` and
    ``tool_completed`` directly for agents whose loop stage has no hooks to run
    (``services.loop.inline``)."""

    on_task: Handler
    on_loop_event: Handler
    model_responded: Callable[[ModelResponded], Awaitable[None]]
    tool_completed: Callable[[ToolCompleted, int | None, int | None], Awaitable[None]]
    stop: Callable[[str, str, str], Awaitable[None]]


def handlers(rt: Runtime) -> dict[str, Handler]:
    approvals.install()
    loop = transitions(rt)
    rt.background.append(DeadlineSweeper(rt, loop.stop))
    return {rt.names.tasks: loop.on_task, rt.names.loop: loop.on_loop_event}


def transitions(rt: Runtime) -> Transitions:
    names = rt.names

    async def emit(task_id: str, snap: Snapshot, ai: AIMessage | None = None) -> None:
        if snap.status != "running":
            rt.forget(task_id)
            await rt.redis.zrem(names.deadlines, task_id)
            return
        if snap.phase == "model":
            request = model_request(
                names,
                await rt.agent(snap.agent_id),
                task_id=task_id,
                agent_id=snap.agent_id,
                step=snap.step,
                transcript_len=snap.transcript_len,
                rev=snap.rev,
            )
            await rt.publish(*request)
            return
        if ai is None:
            raw = await rt.store.last_message(task_id)
            last = MESSAGE_ADAPTER.validate_json(raw) if raw else None
            if not isinstance(last, AIMessage):
                return
            ai = last
        spec = await rt.agent(snap.agent_id)
        pending = [c for c in ai.tool_calls if c.id in snap.expected and c.id not in snap.done]
        await rt.publish_many(
            tool_requests(
                names,
                spec,
                task_id=task_id,
                agent_id=snap.agent_id,
                step=snap.step,
                calls=pending,
                # results join the transcript only when all are in
                join_len=snap.transcript_len + len(snap.expected),
                expected=snap.expected,
            )
        )

    def fused_done(task_id: str, snap: Snapshot) -> bool:
        """Whether the transition also committed the entry (``services.entry.Fused``):
        then everything the new state asks for is published already."""
        if not snap.committed:
            return False
        rt.fused_committed()
        if snap.status != "running":
            rt.forget(task_id)
        return True

    def failed(task_id: str, step: int, reason: str) -> bytes:
        return dump_event(TaskFailed(task_id=task_id, step=step, reason=reason))

    async def hooks_of(task_id: str, agent_id: str) -> HookSet | None:
        """The agent's middleware; a middleware that cannot be built fails the task."""
        spec = await rt.agent(agent_id)
        try:
            return hooks_for(agent_id, spec)
        except Exception as exc:  # a bad import path or parameters: the task's failure
            await fail_now(task_id, f"middleware cannot be loaded: {type(exc).__name__}: {exc}")
            return None

    async def fail_at_current_step(task_id: str, reason: str, cause: str | None) -> Snapshot:
        """Fail a running task at whatever step it is on (one transition, applied once)."""
        state: Any = await rt.redis.hget(names.task_state(task_id), "step")
        step = int(state) if state else 0
        failed_event = failed(task_id, step, reason)
        return await rt.store.fail(
            task_id, failed_event=failed_event, cause=cause or f"failed:{step}"
        )

    async def fail_now(task_id: str, reason: str) -> Snapshot:
        snap = await fail_at_current_step(task_id, reason, None)
        await emit(task_id, snap)
        return snap

    async def begin_step(task_id: str, snap: Snapshot) -> Snapshot | None:
        """A step is about to call the model: run before_agent/before_model hooks once."""
        if snap.status != "running" or snap.phase != "model" or snap.hooks_step == snap.step:
            return snap
        hooks = await hooks_of(task_id, snap.agent_id)
        if hooks is None:
            return None
        wanted = hooks.with_hook("before_model") or (
            snap.step == 1 and hooks.with_hook("before_agent")
        )
        if not wanted:
            return snap
        transcript = await rt.transcript(task_id, snap.transcript_len, snap.rev)
        extra = await rt.store.extra(task_id)
        try:
            outcome = await start_step(hooks, snap.step, transcript, extra)
        except Exception as exc:  # a hook that raises (a limit with exit "error") ends it
            await fail_now(task_id, f"{type(exc).__name__}: {exc}")
            return None
        completed = TaskCompleted(task_id=task_id, steps=snap.step - 1, answer=outcome.answer)
        return await rt.store.apply_hooks(
            task_id,
            step=snap.step,
            cause=f"bm:{snap.step}",
            append=[m.model_dump_json() for m in outcome.append],
            rewrite=None
            if outcome.rewrite is None
            else [m.model_dump_json() for m in outcome.rewrite],
            extra=json.dumps(outcome.extra) if outcome.extra is not None else "",
            end=outcome.end,
            completed_event=dump_event(completed),
        )

    async def advance(task_id: str, snap: Snapshot) -> None:
        """Publish what a state that just moved (or is being re-driven) asks for."""
        started = await begin_step(task_id, snap)
        if started is not None:
            await emit(task_id, started)

    def resumes(snap: Snapshot, cause: str, step: int) -> bool:
        """Whether this event (by its cause) should (re-)publish the state's outputs: it
        caused the state, or it caused the step whose hooks were applied since."""
        return snap.cause == cause or (snap.cause == f"bm:{snap.step}" and step == snap.step - 1)

    def known(snap: Snapshot, task_id: str) -> Snapshot:
        if not snap.status:
            raise UnknownTask(f"no task {task_id!r}")
        return snap

    async def on_task(event: AnyEvent) -> None:
        if isinstance(event, CancelRequested):
            await stop(event.task_id, f"cancelled: {event.reason}", "cancel")
            return
        if isinstance(event, DecisionsSubmitted):
            await on_decisions(event)
            return
        if not isinstance(event, TaskSubmitted):
            raise BadEvent(f"{event.type} does not belong on the tasks stream")
        if not event.messages:
            raise BadEvent("TaskSubmitted needs at least one message")
        # Messages get ids as LangGraph gives them, so middleware can replace them by id;
        # derived from the task id, so a redelivery stores the same ones.
        inputs = [
            m if m.id else m.model_copy(update={"id": f"{event.task_id}:in:{i}"})
            for i, m in enumerate(event.messages)
        ]
        agent_id = await rt.save_agent(event.agent)
        deadline_s = event.deadline_s or rt.settings.task_deadline_s
        if deadline_s:
            # Before the start, so a crash in between cannot leave a task without one.
            await rt.redis.zadd(names.deadlines, {event.task_id: event.at + deadline_s}, nx=True)
        snap = await rt.store.start(
            event.task_id,
            agent_id=agent_id,
            max_steps=event.max_steps or rt.settings.max_steps,
            submitted_event=dump_event(event),
            step_event=dump_event(StepStarted(task_id=event.task_id, step=1)),
            retention_s=rt.settings.retention_s,
            messages=[m.model_dump_json().encode() for m in inputs],
        )
        if snap.cause in ("start", "bm:1"):
            await advance(event.task_id, snap)

    async def stop(task_id: str, reason: str, cause: str) -> None:
        """Fail a running task now (cancel, deadline); later events for it are dropped."""
        snap = await fail_at_current_step(task_id, reason, cause)
        if not snap.status:
            await rt.redis.zrem(names.deadlines, task_id)
            if cause == "cancel":
                raise UnknownTask(f"cannot cancel: no task {task_id!r}")
            return
        await emit(task_id, snap)

    async def wait_for_human(event: ModelResponded, request: Any) -> None:
        asked = ApprovalRequested(
            task_id=event.task_id, step=event.step, request=approvals.as_jsonable(request)
        )
        snap = await rt.store.interrupt(
            event.task_id,
            step=event.step,
            cause=f"approval:{event.step}",
            pending=dump_event(event),
            approval_event=dump_event(asked),
        )
        if snap.cause == f"approval:{event.step}":
            await rt.publish(names.approvals, asked)

    async def on_decisions(event: DecisionsSubmitted) -> None:
        phase, pending = await rt.store.pending_reply(event.task_id)
        if phase == "tools":  # calls that wait one by one (interrupt_mode="per_call")
            await per_call.decisions(event)
            return
        if phase != "approval" or pending is None:
            raise BadEvent(f"task {event.task_id} is not waiting for a decision")
        reply = parse_event(pending)
        assert isinstance(reply, ModelResponded)
        await on_model_responded(reply, event.decisions)

    async def on_model_responded(
        event: ModelResponded, decisions: list[dict[str, Any]] | None = None
    ) -> None:
        spec = await rt.agent(event.agent_id)
        tid = event.task_id
        ai = event.message
        if ai.id is None:
            ai = ai.model_copy(update={"id": f"{tid}:ai:{event.step}"})
        decided = after_model_results(spec, ai)
        after_ai: list[Any] = []
        extra = ""
        finishing = not ai.tool_calls
        hooks = await hooks_of(tid, event.agent_id)
        if hooks is None:
            return
        if hooks.with_hook("after_model") or (finishing and hooks.with_hook("after_agent")):
            state: Any = await rt.redis.hget(names.task_state(tid), "rev")
            length = int(await rt.redis.llen(names.task_messages(tid)))
            transcript = await rt.transcript(tid, length, int(state or 0))
            try:
                with approvals.answering(decisions):
                    turn = await model_turn(hooks, transcript, ai, await rt.store.extra(tid))
            except approvals.Interrupted as asked:
                await wait_for_human(event, asked.value)
                return
            except ValueError as exc:
                if decisions is not None:  # decisions that do not fit: reject them, keep waiting
                    raise BadEvent(f"decisions rejected: {exc}") from exc
                await fail_now(tid, f"{type(exc).__name__}: {exc}")
                return
            except Exception as exc:  # a hook that raises ends the task, with the reason
                await fail_now(tid, f"{type(exc).__name__}: {exc}")
                return
            ai, after_ai, finishing = turn.ai, turn.after_ai, turn.end
            decided.update(turn.decided)
            extra = json.dumps(turn.extra) if turn.extra is not None else ""
        answer = next((m.text() for m in reversed([ai, *after_ai]) if isinstance(m, AIMessage)), "")
        cause = f"model:{event.step}"
        fuse = None
        if decisions is None and event.transcript_len is not None and not hooks.has_state_hooks:
            # No hooks ran: the new state is predictable, so the transition can publish
            # the step's tool calls and ack the entry itself (one round trip, not two).
            expected = [] if finishing else join_order(ai, decided)
            outputs = tool_requests(
                names,
                spec,
                task_id=tid,
                agent_id=event.agent_id,
                step=event.step,
                calls=[c for c in ai.tool_calls if c.id not in decided],
                join_len=event.transcript_len + 1 + len(expected),
                expected=expected,
            )
            fuse = rt.fuse(tid, ("tools", "done"), "tools", outputs, event.transcript_len + 1)
        snap = known(
            await rt.store.model_responded(
                tid,
                step=event.step,
                cause=cause,
                ai_message=ai.model_dump_json().encode(),
                responded_event=rt.encode(event),  # with the size check of a publish
                expected=[] if finishing else join_order(ai, decided),
                pre_results={k: v.model_dump_json() for k, v in decided.items()},
                completed_event=dump_event(
                    TaskCompleted(task_id=tid, steps=event.step, answer=answer)
                ),
                step_event=dump_event(StepStarted(task_id=tid, step=event.step + 1)),
                failed_event=failed(tid, event.step, step_limit_reason(event.step)),
                after_ai=[m.model_dump_json() for m in after_ai],
                extra=extra,
                fuse=fuse,
            ),
            tid,
        )
        if fused_done(tid, snap):
            # The reply stands at transcript_len now (the script checked the length):
            # this process's cached transcript takes it without reading it back.
            if event.transcript_len is not None:
                rt.remember(tid, 0, event.transcript_len, ai)
            return
        if snap.step == event.step and snap.cause == cause:
            await emit(tid, snap, ai)
        elif resumes(snap, cause, event.step):
            await advance(tid, snap)

    async def on_tool_completed(
        event: ToolCompleted, join_len: int | None = None, result_at: int | None = None
    ) -> None:
        """``join_len``, ``result_at``: from the call's ToolRequested, when the caller has
        them."""
        tid = event.task_id
        cause = f"tool:{event.step}:{event.message.tool_call_id}"
        tool_message = event.message.model_dump_json().encode()
        fuse = None
        if join_len is not None:
            spec = await rt.agent(event.agent_id)
            hooks = hooks_for(event.agent_id, spec)
            if not hooks.has_state_hooks:
                # No before_model hooks to run: when this result completes the step, the
                # transition publishes the next model request and acks, in one script
                # (the transcript revision only moves when hooks rewrite it).
                request = model_request(
                    names,
                    spec,
                    task_id=tid,
                    agent_id=event.agent_id,
                    step=event.step + 1,
                    transcript_len=join_len,
                    rev=0,
                    # the step's only result, when small: the model need not read it back
                    last_result=event.message
                    if result_at == join_len - 1 and len(tool_message) <= LAST_RESULT_MAX_BYTES
                    else None,
                )
                fuse = rt.fuse(tid, ("model", "tools", "done"), "model", [request], join_len)
        snap = known(
            await rt.store.tool_completed(
                tid,
                step=event.step,
                cause=cause,
                call_id=event.message.tool_call_id,
                tool_message=tool_message,
                tool_event=rt.encode(event),  # with the size check of a publish
                step_event=dump_event(StepStarted(task_id=tid, step=event.step + 1)),
                failed_event=failed(tid, event.step, step_limit_reason(event.step)),
                fuse=fuse,
            ),
            tid,
        )
        if fused_done(tid, snap):
            return
        if resumes(snap, cause, event.step):
            await advance(tid, snap)

    async def on_model_failed(event: ModelFailed) -> None:
        cause = f"model-failed:{event.step}"
        reason = f"model call failed at step {event.step}: {event.error}"
        snap = known(
            await rt.store.fail(
                event.task_id, failed_event=failed(event.task_id, event.step, reason), cause=cause
            ),
            event.task_id,
        )
        await emit(event.task_id, snap)

    async def on_loop_event(event: AnyEvent) -> None:
        if isinstance(event, ModelResponded):
            await on_model_responded(event)
        elif isinstance(event, ToolCompleted):
            await on_tool_completed(event)
        elif isinstance(event, ModelFailed):
            await on_model_failed(event)
        elif isinstance(event, ToolInterrupted):
            await per_call.interrupted(event)
        else:
            raise BadEvent(f"{event.type} does not belong on the loop stream")

    per_call = PerCallApprovals(rt)

    return Transitions(
        on_task=on_task,
        on_loop_event=on_loop_event,
        model_responded=on_model_responded,
        tool_completed=on_tool_completed,
        stop=stop,
    )

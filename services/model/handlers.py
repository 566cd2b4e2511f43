"""Model handler: transcript prefix + context edits + system message → one model call."""

from __future__ import annotations

import logging
import time
from typing import Any

from contracts.events import (
    AnyEvent,
    CommandWrite,
    ModelFailed,
    ModelInterrupted,
    ModelRequested,
    ModelResponded,
    ModelResumed,
    StructuredOutcome,
)
from contracts.messages import AIMessage, Message, from_langchain
from services import interrupts
from services.agent_view import system_message
from services.custom_stream import CustomWriter, writing
from services.editing.engine import apply_edits
from services.errors import BadEvent, PayloadTooLarge
from services.failures import exception_info
from services.hooks import hooks_for, lg_runtime
from services.interrupts import NodeInterrupted
from services.middleware import ratelimit
from services.model import streaming
from services.model.chat import ModelPool, prompt_of
from services.model.failures import failure_text
from services.model.lcview import LangChainViews
from services.model.node_writes import Placed
from services.model.wrapped import ModelCaller, call_with_middleware
from services.runtime import Handler, Runtime
from services.secrets import scrub
from services.spec import structured
from services.tasks.handover import LoopHandOver

log = logging.getLogger("loopline.model")


def handlers(rt: Runtime) -> dict[str, Handler]:
    pool = ModelPool()
    ratelimit.configure(rt.redis, rt.names.prefix)
    hand_over = LoopHandOver(rt)  # replies of hook-free agents skip the loop stream
    views = LangChainViews(rt.settings.transcript_cache_size)
    requests = streaming.StreamRequests(rt)  # which tasks stream: no command per step
    rt.background.append(requests)

    def streaming_caller(event: ModelRequested) -> ModelCaller:
        async def call(bound: Any, prompt: Any) -> Any:
            return await streaming.streamed_call(
                bound,
                prompt,
                rt.connection,
                rt.names,
                rt.settings,
                task_id=event.task_id,
                step=event.step,
                blocks=requests.blocks(event.task_id),
            )

        return call

    async def on_model_requested(event: AnyEvent) -> None:
        event, answers = requested_of(event)
        spec = await rt.agent(event.agent_id)
        transcript = await rt.transcript(
            event.task_id, event.transcript_len, event.rev, carried(event)
        )
        view = apply_edits(transcript, event.edits) if event.edits else transcript
        started = time.perf_counter()
        outcome: StructuredOutcome | None = None
        update: dict[str, Any] | None = None
        writes: list[CommandWrite] = []
        placed = Placed()
        try:
            streamed = await requests.wanted(event.task_id)
            caller = streaming_caller(event) if streamed else None
            hooks = hooks_for(event.agent_id, spec)
            if hooks.with_hook("wrap_model_call"):
                extra = await hand_over.loop.store.extra(event.task_id, hooks.channels.codec)
                # unedited: the chain edits at ContextEditingMiddleware's place, so the
                # middleware outside it see what LangChain's would; it runs as LangGraph's
                # model node, where an interrupt() waits for its answer
                message: Message
                scope = f"{event.task_id}:{event.step}"
                writer = CustomWriter(rt, event.task_id, event.step, "model")
                with (
                    writing(writer, hooks.context),
                    # lg_runtime inside writing(): the node's runtime carries the writer
                    interrupts.node("model", scope, answers, lg_runtime(hooks.context)),
                ):
                    message, outcome, update, writes, placed = await call_with_middleware(
                        spec, hooks, list(transcript), extra, event.edits, caller=caller
                    )
                await writer.flush()
            else:
                request = views.convert(
                    event.task_id, event.rev, transcript, view, system_message(spec)
                )
                bound, strategy = pool.bound_with_strategy(event.agent_id, spec)
                prompt = prompt_of(request)
                reply = await (caller(bound, prompt) if caller else bound.ainvoke(prompt))
                if spec.message_name:
                    reply.name = spec.message_name  # as LangChain's model node names it
                if spec.response_format is not None:
                    outcome = structured.outcome(spec.response_format, strategy, reply)
                message = from_langchain(reply)
            if not isinstance(message, AIMessage):
                raise TypeError(f"the model returned a {message.type} message")
        except NodeInterrupted as waiting:  # the task waits for the answer (the loop parks it)
            await rt.publish(
                rt.names.work("loop", event.task_id), interrupted(event, answers, waiting)
            )
            return
        except Exception as exc:  # any failure of the call is the task's failure, reported
            log.warning("model call failed for task %s: %r", event.task_id, exc)
            await rt.publish(
                rt.names.work("loop", event.task_id),
                ModelFailed(
                    task_id=event.task_id,
                    step=event.step,
                    agent_id=event.agent_id,
                    # a provider may echo the key it was given: no secret on the bus
                    error=scrub(failure_text(exc)),
                    exception=exception_info(exc, event.task_id),
                ),
            )
            return
        responded = ModelResponded(
            task_id=event.task_id,
            step=event.step,
            agent_id=event.agent_id,
            message=message,
            transcript_len=event.transcript_len,
            model_ms=round((time.perf_counter() - started) * 1000, 3),
            structured=outcome,
            update=update,
            writes=writes,
            rewrite=placed.rewrite,
            repaired=placed.repaired,
            rev=event.rev + (1 if placed.rewrite is not None else 0),
            after_reply=placed.after,
        )
        try:
            await hand_over.model_responded(responded, spec)
        except PayloadTooLarge as exc:
            await rt.publish(
                rt.names.work("loop", event.task_id),
                ModelFailed(
                    task_id=event.task_id, step=event.step, agent_id=event.agent_id, error=str(exc)
                ),
            )

    return dict.fromkeys(rt.names.work_streams("model"), on_model_requested)


def carried(event: ModelRequested) -> list[Message]:
    """The end of the transcript the request carries (``transcript``, ``last_result``)."""
    if event.transcript is not None:
        return event.transcript
    return [event.last_result] if event.last_result is not None else []


def requested_of(event: AnyEvent) -> tuple[ModelRequested, list[Any]]:
    """The model request to run, and the answers of its wrap_model_call interrupts (a
    ``ModelResumed``: its interrupt was answered)."""
    if isinstance(event, ModelResumed):
        return event.requested, event.answers
    if not isinstance(event, ModelRequested):
        raise BadEvent(f"{event.type} does not belong on the model stream")
    return event, []


def interrupted(
    event: ModelRequested, answers: list[Any], waiting: NodeInterrupted
) -> ModelInterrupted:
    return ModelInterrupted(
        task_id=event.task_id,
        step=event.step,
        agent_id=event.agent_id,
        requested=event,
        answered=answers,
        request=waiting.asked.value,
        interrupt_id=waiting.asked.interrupt_id,
        response_schema=waiting.asked.response_schema,
    )

"""Context handler: the model's view for a step, and a public record of every edit.

Token counts are computed once per message (kept in this process and in the task's
``tokens`` hash for other replicas), so a step costs arithmetic over the history, not
re-tokenizing it.
"""

from __future__ import annotations

from collections import OrderedDict

from contracts.events import (
    AnyEvent,
    AppliedEdit,
    ContextEdited,
    ContextRequested,
    ModelRequested,
    dump_event,
)
from contracts.messages import Message
from services.agent_view import system_message
from services.editing.counting import TokenCounter, make_counter
from services.editing.engine import base_tokens_for, edit_context
from services.errors import BadEvent
from services.middleware.context_editing import ContextEditingMiddleware
from services.runtime import Handler, Runtime
from services.spec.middleware import from_spec
from services.tasks.store import TaskStore


class CountCache:
    """Per-message token counts per (task, method, model), memory first, then Redis."""

    def __init__(self, rt: Runtime, max_tasks: int) -> None:
        self.rt = rt
        self.max_tasks = max_tasks
        self._counts: OrderedDict[tuple[str, str], list[int]] = OrderedDict()

    async def counts(
        self, task_id: str, rev: int, messages: list[Message], counter: TokenCounter, model: str
    ) -> list[int]:
        tag = f"{rev}:{counter.method}:{model}"
        key = (task_id, tag)
        known = self._counts.get(key)
        if known is None:
            known = []
            self._counts[key] = known
            if len(self._counts) > self.max_tasks:
                self._counts.popitem(last=False)
        else:
            self._counts.move_to_end(key)
        if len(known) >= len(messages):
            return known[: len(messages)]
        hkey = self.rt.names.task_tokens(task_id)
        fields = [f"{i}:{tag}" for i in range(len(known), len(messages))]
        stored = await self.rt.redis.hmget(hkey, fields)
        fresh: dict[str, int] = {}
        for i, value in zip(range(len(known), len(messages)), stored, strict=True):
            if value is None:
                count = counter.count_message(messages[i])
                fresh[f"{i}:{tag}"] = count
            else:
                count = int(value)
            known.append(count)
        if fresh:
            await self.rt.redis.hset(hkey, mapping=fresh)  # type: ignore[arg-type]
        return known[: len(messages)]


def handlers(rt: Runtime) -> dict[str, Handler]:
    names = rt.names
    store = TaskStore(rt.redis, names, rt.register_script)
    cache = CountCache(rt, rt.settings.transcript_cache_size)
    counters: dict[tuple[str, str], TokenCounter] = {}

    def counter_for(method: str, model: str) -> TokenCounter:
        found = counters.get((method, model))
        if found is None:
            found = counters[(method, model)] = make_counter(method, model)
        return found

    async def on_context_requested(event: AnyEvent) -> None:
        if not isinstance(event, ContextRequested):
            raise BadEvent(f"{event.type} does not belong on the context stream")
        spec = await rt.agent(event.agent_id)
        applied: list[AppliedEdit] = []
        editors = [
            (i, m) for i, m in enumerate(spec.middleware) if m.type == "ContextEditingMiddleware"
        ]
        if editors and event.transcript_len:
            transcript = await rt.transcript(event.task_id, event.transcript_len, event.rev)
            view: list[Message] = transcript
            model = spec.model.model_name
            for position, mw_spec in editors:
                middleware = from_spec(mw_spec)  # its token_counter function imported
                assert isinstance(middleware, ContextEditingMiddleware)
                custom = middleware.token_counter is not None
                if custom:  # the user's count of the whole list: nothing to keep per message
                    counter = middleware.counter(model)
                else:
                    counter = counter_for(middleware.token_count_method, model)
                counts = None
                if view is transcript and not custom:
                    counts = await cache.counts(
                        event.task_id, event.rev, transcript, counter, model
                    )
                result = edit_context(
                    view,
                    middleware.engine_edits(),
                    counter,
                    counts=counts,
                    base_tokens=base_tokens_for(counter, system_message(spec, before=position)),
                )
                view = result.messages
                applied.extend(result.applied)
                for n, report in enumerate(result.reports):
                    edited = ContextEdited(
                        task_id=event.task_id,
                        step=event.step,
                        strategy=report.strategy,
                        token_count_method=counter.method,
                        tokens_before=report.tokens_before,
                        tokens_after=report.tokens_after,
                        cleared_tool_call_ids=report.cleared_tool_call_ids,
                        cleared_inputs=report.cleared_inputs,
                    )
                    key = f"edit:{event.step}:{position}:{n}"
                    if await store.log_once(event.task_id, key, dump_event(edited)):
                        await rt.publish(names.edits, edited)
        await rt.publish(
            names.work("model", event.task_id),
            ModelRequested(
                task_id=event.task_id,
                step=event.step,
                agent_id=event.agent_id,
                transcript_len=event.transcript_len,
                rev=event.rev,
                edits=applied,
            ),
        )

    return dict.fromkeys(names.work_streams("context"), on_context_requested)

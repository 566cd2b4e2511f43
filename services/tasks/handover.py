"""Handing a model reply or a tool result to the loop, or applying its transition here.

The loop's work on a ``ModelResponded`` or ``ToolCompleted`` is one atomic transition (a
Lua script on the task's keys, keyed by the event's cause) followed by publishing what the
new state asks for. When the agent's loop stage has no hooks to run (no ``before_*`` or
``after_*`` middleware), that is all the loop does, so the model and tools services apply
the transition themselves, with the loop's own code (``services.tasks.loop``): two stream
hops and two process wake-ups fewer per step. Nothing about delivery changes: the
transition applies once however many replicas race or redeliver (its cause says whether
it was already applied), and what it asks for is published with the ack of the entry
being handled. If the transition cannot be applied here (Redis failing, say), the event
goes to the loop stream instead, whose handler is idempotent: nothing is lost, and the
model is not called again.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from contracts.agent import AgentSpec
from contracts.events import ModelResponded, ToolCompleted
from services.errors import PayloadTooLarge
from services.hooks import hooks_for
from services.runtime import Runtime
from services.tasks.loop import Loop

log = logging.getLogger("loopline.loop")


class LoopHandOver:
    """Used by the model and tools services; one per process."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.enabled = rt.settings.inline_loop
        self.loop = Loop(rt)

    def applies_here(self, spec: AgentSpec, agent_id: str) -> bool:
        """Whether the loop stage has nothing to run but the transition."""
        return self.enabled and not hooks_for(agent_id, spec).has_state_hooks

    async def model_responded(self, event: ModelResponded, spec: AgentSpec) -> None:
        await self._hand(event, spec, lambda: self.loop.model_responded(event))

    async def tool_completed(
        self,
        event: ToolCompleted,
        spec: AgentSpec,
        join_len: int | None = None,
        result_at: int | None = None,
        rev: int = 0,
    ) -> None:
        """``join_len``, ``result_at``, ``rev``: from the call's ToolRequested
        (``contracts.events``)."""
        await self._hand(
            event, spec, lambda: self.loop.tool_completed(event, join_len, result_at, rev)
        )

    async def _hand(
        self,
        event: ModelResponded | ToolCompleted,
        spec: AgentSpec,
        apply: Callable[[], Awaitable[None]],
    ) -> None:
        rt = self.rt
        if not self.applies_here(spec, event.agent_id):
            await rt.publish(rt.names.work("loop", event.task_id), event)
            return
        mark = rt.outbox_mark()
        try:
            await apply()  # encodes the event once, for the task's log, with the size check
        except PayloadTooLarge:
            rt.outbox_rollback(mark)
            raise  # the caller reports it, as it would a publish that was too large
        except Exception as exc:
            rt.outbox_rollback(mark)
            log.warning(
                "applying %s of task %s here failed (%r): handing it to the loop",
                event.type,
                event.task_id,
                exc,
            )
            await rt.publish(rt.names.work("loop", event.task_id), event)

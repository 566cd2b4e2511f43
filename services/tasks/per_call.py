"""A tool call's interrupts: a call whose tool or ``wrap_tool_call`` chain called
``interrupt()`` (HumanInTheLoopMiddleware's per-call approvals, or a user's own) waits on
its own while its step goes on."""

from __future__ import annotations

import logging
from typing import Any

from contracts.events import (
    ApprovalRequested,
    DecisionsSubmitted,
    ToolInterrupted,
    ToolResumed,
    dump_event,
    parse_event,
)
from services.errors import BadEvent, UnknownTask
from services.runtime import Runtime
from services.tasks.store import TaskStore, decision_key, tool_interrupt_id, waiting_calls
from services.tasks.transitions import DecideCall, ParkCall

log = logging.getLogger("loopline.loop")


class PerCallApprovals:
    """A tool call's interrupt (``HumanInTheLoopMiddleware(interrupt_mode="per_call")``,
    or ``interrupt()`` in a tool or a user's ``wrap_tool_call``): the call waits on its own
    in the tools phase, while the step's other calls run and report as usual.

    ToolInterrupted (a call's interrupt, from the tools consumer) records the waiting call
    once and asks: ApprovalRequested on the task's log (in the same script) and the public
    approvals stream. DecisionsSubmitted accepts one answer per waiting call and sends
    ToolResumed, so the tools consumer runs the call again from its start with its
    ``interrupt()`` calls returning the answers in order. The call's ToolCompleted then
    joins the step as any; a call that interrupts once more waits again."""

    def __init__(self, rt: Runtime, store: TaskStore) -> None:
        self.rt = rt
        self.store = store

    async def interrupted(self, event: ToolInterrupted) -> None:
        rt, tid, call_id = self.rt, event.task_id, event.call.id
        asked = ApprovalRequested(
            task_id=tid,
            step=event.step,
            request=event.request,
            interrupt_id=tool_interrupt_id(call_id, event.answered),
            node="tools",
            response_schema=event.response_schema,
        )
        refused = decision_key(event.decision) if event.error else ""
        data = dump_event(event)
        state = await self.store.apply(
            tid,
            ParkCall(
                step=event.step,
                call_id=call_id,
                interrupted_event=data,
                approval_event=dump_event(asked),
                refused_decision=refused,
                answered=event.answered,
            ),
        )
        if not state.exists:
            raise UnknownTask(f"no task {tid!r}")
        if not state.applied:
            # Ask the public stream again only on a redelivery of the very event that
            # asked (its publish may not have happened), never for a duplicate (a new
            # event for the same call), and only while the call waits for an answer.
            key = rt.names.task_state(tid)
            first: Any = await rt.redis.hget(key, f"wait:{event.step}:{call_id}")
            if refused or first != data:
                return
            if await rt.redis.hexists(key, f"decided:{event.step}:{call_id}"):
                return
        await rt.publish(rt.names.approvals, asked)

    async def decisions(self, event: DecisionsSubmitted) -> None:
        """Answers address calls by their tool call id: ``answers`` by key, HITL's
        ``decisions`` by a ``tool_call_id`` next to LangChain's decision fields (without
        it, a decision is for the one call that waits)."""
        rt, tid = self.rt, event.task_id
        step, calls = await waiting_calls(rt.redis, rt.names, tid)
        by_id = {w.call_id: w for w in calls}
        by_interrupt = {w.interrupt_id: w for w in calls}
        open_ids = [w.call_id for w in calls if w.decision is None]
        if not event.decisions and not event.answers:
            raise BadEvent("DecisionsSubmitted needs at least one decision")
        plan: list[tuple[str, Any]] = []
        for target, decision in _addressed(event):
            if target is None:
                if len(open_ids) != 1:
                    raise BadEvent(
                        f"task {tid}: {len(open_ids)} calls wait for a decision "
                        f"({', '.join(open_ids) or 'none'}); name one with tool_call_id"
                    )
                target = open_ids[0]
            # answers name the interrupt (a call's later ones have ids of their own);
            # HITL's decisions name the call
            found = (by_interrupt if event.answers else by_id).get(str(target))
            if found is None:
                raise BadEvent(f"task {tid}: call {target!r} is not waiting for a decision")
            if found.decision is not None and found.decision != decision_key(decision):
                raise BadEvent(f"task {tid}: call {target!r} has been decided already")
            plan.append((found.call_id, decision))
        if len({target for target, _ in plan}) != len(plan):
            raise BadEvent(f"task {tid}: more than one decision for the same call")
        resumed = []
        for target, decision in plan:
            key = decision_key(decision)
            outcome, accepted = await self.store.decide_call(
                tid, DecideCall(step=step, call_id=target, decision=key)
            )
            if outcome == "decided" or (outcome == "taken" and accepted == key):
                # "taken" with this decision: a redelivery, whose ToolResumed may not have
                # gone out (the tools consumer runs a decided call once either way).
                parked = parse_event(by_id[target].interrupted)
                assert isinstance(parked, ToolInterrupted)
                resumed.append(
                    ToolResumed(
                        task_id=tid,
                        step=step,
                        agent_id=parked.agent_id,
                        call=parked.call,
                        decision=decision,
                        earlier=by_id[target].earlier,
                    )
                )
            else:  # a concurrent decision won the race, or the call has its result
                log.warning("task %s: decision for call %s not applied (%s)", tid, target, outcome)
        await rt.publish_many([(rt.names.work("tools", tid), r) for r in resumed])


def _addressed(event: DecisionsSubmitted) -> list[tuple[str | None, Any]]:
    """(call id or None, answer) for each answer of the event."""
    found: list[tuple[str | None, Any]] = [(k, v) for k, v in event.answers.items()]
    for raw in event.decisions:
        decision = dict(raw)
        target = decision.pop("tool_call_id", None)
        found.append((None if target is None else str(target), decision))
    return found

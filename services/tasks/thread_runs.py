"""The runs of a thread, as the loop drives them: taking the thread when a run is
submitted (or dequeued), the multitask strategies when it is busy, and writing a run's
state back when it ends (``services.tasks.threads`` holds the scripts)."""

from __future__ import annotations

import asyncio
import json
import logging
import typing
from collections.abc import Awaitable, Callable
from typing import Any

from contracts.events import RunDequeued, TaskFailed, TaskSubmitted, dump_event, parse_event
from contracts.streams import SAVER_SPACE_MARK, shown_thread_id
from services.entry import CURRENT, current_entry_id
from services.errors import BadEvent
from services.hooks import HookSet
from services.runtime import Runtime
from services.tasks.state import Cause, Phase, TaskState, text
from services.tasks.store import TaskStore, waiting_calls
from services.tasks.threads import Claim, ThreadStore
from services.tasks.transitions import RefuseTask, StopRun

Stop = Callable[[str, str, str], Awaitable[None]]
"""``Loop.stop``: fail a running task now and publish what that asks for."""
Emit = Callable[[str, TaskState], Awaitable[None]]
"""``Loop._emit``: publish what a task's new state asks for."""

log = logging.getLogger("loopline.loop")

EPHEMERAL_KEYS = frozenset({"jump_to"})
"""State LangGraph never keeps between runs whatever the middleware declares."""


def untracked_keys(hooks: HookSet) -> set[str]:
    """State fields the agent's middleware declare ``UntrackedValue`` (a run's own
    counters, such as ``run_model_call_count``): LangGraph does not checkpoint them, so a
    new run of the thread starts without them."""
    from langgraph.channels.untracked_value import UntrackedValue

    found: set[str] = set(EPHEMERAL_KEYS)
    for _, instance in hooks.instances:
        schema = getattr(instance, "state_schema", None)
        if schema is None:
            continue
        try:
            hints = typing.get_type_hints(schema, include_extras=True)
        except Exception:  # a schema that cannot be resolved keeps everything
            continue
        for name, hint in hints.items():
            if _mentions(hint, UntrackedValue):
                found.add(name)
    return found


def _mentions(hint: Any, marker: type) -> bool:
    for part in getattr(hint, "__metadata__", ()):
        if part is marker or isinstance(part, marker):
            return True
    return any(_mentions(a, marker) for a in getattr(hint, "__args__", ()) or ())


def carried_extra(raw: str, hooks: HookSet) -> str:
    """The thread's middleware state as a new run starts with it."""
    if not raw:
        return ""
    state = dict(json.loads(raw))
    for key in untracked_keys(hooks):
        state.pop(key, None)
    return json.dumps(state) if state else ""


class ThreadRuns:
    """One per ``Loop``: the thread side of starting and ending a task."""

    def __init__(self, rt: Runtime, tasks: TaskStore, stop: Stop, emit: Emit) -> None:
        self.rt = rt
        self.names = rt.names
        self.tasks = tasks
        self.stop = stop
        self.emit = emit
        self.store = ThreadStore(rt.redis, rt.names, rt.register_script)
        self._ending: set[asyncio.Task[None]] = set()

    async def submitted(self, event: TaskSubmitted) -> Claim | None:
        """Take the thread for a submitted run: the claim to start from, or None when
        the run waits, was refused, or is a redelivery."""
        assert event.thread_id is not None
        thread_id = event.thread_id
        submitted = dump_event(event)
        strategy = event.multitask_strategy
        if await self._waits_for_human(thread_id):
            # LangGraph: a run stopped at an interrupt has ended (its state checkpointed
            # with the unanswered call); a new input runs from that state, whatever the
            # double-texting strategy (those apply to runs pending or running). The
            # waiting run stops now, keeping what it did, and this run goes next.
            strategy = "interrupt"
        claim = await self.store.claim(thread_id, event.task_id, strategy, submitted)
        ended_unrecorded = claim.outcome in ("busy", "queued", "stop") and await self._recover(
            thread_id, claim.active
        )
        if ended_unrecorded and claim.outcome == "busy":  # the thread may be free now
            claim = await self.store.claim(
                thread_id, event.task_id, strategy, submitted, again=True
            )
        if claim.outcome == "start":
            return claim
        if claim.outcome == "busy":
            await self._reject(event, claim.active)
        elif claim.outcome == "stop":
            await self._stop_active(event, claim.active, strategy)
        return None

    async def _waits_for_human(self, thread_id: str) -> bool:
        """The thread's active run waits for a human: a hook's interrupt (the approval
        phase) or tool calls that wait one by one."""
        active: Any = await self.rt.redis.hget(self.names.thread_state(thread_id), "active")
        active_id = text(active or "")
        if not active_id:
            return False
        status, phase = await self.rt.redis.hmget(
            self.names.task_state(active_id), "status", "phase"
        )
        if text(status or "") != "running":
            return False
        if text(phase or "") == Phase.APPROVAL:
            return True
        return bool((await waiting_calls(self.rt.redis, self.names, active_id))[1])

    async def dequeued(self, event: RunDequeued) -> tuple[Claim, TaskSubmitted] | None:
        """A queued run's turn: its claim and the submission the thread kept."""
        claim = await self.store.claim(event.thread_id, event.task_id, "enqueue", b"")
        if claim.outcome != "start" or not claim.submission:
            return None
        submitted = parse_event(claim.submission)
        if not isinstance(submitted, TaskSubmitted):
            raise BadEvent(f"run {event.task_id} of thread {event.thread_id} has no submission")
        return claim, submitted

    async def cancel_queued(self, thread_id: str, task_id: str, reason: str) -> bool:
        """Cancel a run that waits for its thread: it leaves the queue and fails with
        ``reason``. False when it does not wait (it runs, ended, or is unknown)."""
        if not await self.store.drop_queued(thread_id, task_id):
            return False
        failed = dump_event(TaskFailed(task_id=task_id, step=0, reason=reason))
        state = await self.tasks.apply(
            task_id,
            RefuseTask(
                failed_event=failed,
                cause=Cause.CANCEL,
                retention=self.rt.settings.retention_s,
                create=True,
                entry="",  # it never started: no submission of its own to compare
            ),
        )
        if state.applied:
            await self.emit(task_id, state)
        return True

    async def roll_back(self, thread_id: str, task_id: str) -> None:
        """A cancel with ``rollback`` of the thread's active run: when it ends, nothing of
        it becomes the thread's (a run that is not the active one has nothing to undo)."""
        await self.store.roll_back(thread_id, task_id)

    async def _recover(self, thread_id: str, active: str) -> bool:
        """The thread's active run ended without its end being recorded (its process
        died in between): record it now. True when it had ended."""
        if not active:
            return False
        _, status = await self.store.run_of(active)
        if status in ("", "running"):
            return False
        await self.ended(active, thread_id)
        return True

    async def _reject(self, event: TaskSubmitted, active: str) -> None:
        reason = (
            f"thread {shown_thread_id(event.thread_id or '')} is busy with run {active} "
            "(multitask_strategy='reject'; use 'enqueue', 'interrupt' or 'rollback' to "
            "send it anyway)"
        )
        failed = dump_event(TaskFailed(task_id=event.task_id, step=0, reason=reason))
        state = await self.tasks.apply(
            event.task_id,
            RefuseTask(
                failed_event=failed,
                cause=Cause.refused("thread"),
                retention=self.rt.settings.retention_s,
                create=True,
                entry=current_entry_id(),
            ),
        )
        if state.applied:
            await self.emit(event.task_id, state)

    async def _stop_active(self, event: TaskSubmitted, active: str, how: str) -> None:
        """interrupt: the active run stops at its next step boundary, keeping what it did;
        rollback: it stops now and its changes to the thread are dropped."""
        if how != event.multitask_strategy:  # it waited for a human: ``submitted``
            reason = (
                f"ended at its interrupt: run {event.task_id} arrived on thread "
                f"{shown_thread_id(event.thread_id or '')} with new input"
            )
        else:
            reason = (
                f"{'interrupted' if how == 'interrupt' else 'rolled back'}: run "
                f"{event.task_id} arrived on thread {shown_thread_id(event.thread_id or '')} "
                f"(multitask_strategy={how!r})"
            )
        if how == "rollback":
            await self.stop(active, reason, Cause.SUPERSEDED)
            return
        step = await self.tasks.current_step(active)
        failed = dump_event(TaskFailed(task_id=active, step=step, reason=reason))
        state = await self.tasks.apply(active, StopRun(failed_event=failed, cause=Cause.SUPERSEDED))
        if state.exists and not state.running:
            await self.emit(active, state)
        elif state.running and (await waiting_calls(self.rt.redis, self.names, active))[1]:
            # calls that wait for a human one by one: no step boundary comes without one
            await self.stop(active, reason, Cause.SUPERSEDED)

    # -- a run ends ------------------------------------------------------------------

    async def ended(self, task_id: str, thread_id: str = "") -> None:
        """Write an ended run's state back to its thread and start the next run; a task
        of no thread, or a run recorded already, changes nothing. ``thread_id``: the run's
        thread when the caller knows it (a transition's reply names it), else it is read."""
        if not thread_id:
            thread_id, _ = await self.store.run_of(task_id)
        if not thread_id:
            return
        parts = await self.store.ending_of(task_id)
        if parts is None:
            return
        ttl = self.rt.settings.thread_ttl_s or 0  # threads last until deleted unless set
        if not ttl and thread_id.startswith(SAVER_SPACE_MARK):
            # an in-process saver's thread: the saver is its record (the client writes
            # each run's end there), so Redis's working copy goes once idle, and the
            # threads of a process that is gone do not stay in Redis for ever
            ttl = self.rt.settings.retention_s
        # the run's transcript is read from the thread's once written there, where the
        # thread outlives the run's own keys (kept for the retention time)
        retention = self.rt.settings.retention_s
        hand_s = retention if not ttl or ttl >= retention else 0
        outcome = await self.store.end(thread_id, parts.args(task_id, ttl, hand_s))
        if hand_s and outcome.outcome == "ended" and outcome.epoch is not None:
            await self.store.hand_over(task_id, outcome.epoch, parts.length)
        following = outcome.next
        if outcome.outcome == "stale":
            following = await self._unstarted_active(thread_id)
        if following:
            await self.rt.publish(
                self.names.work("tasks", following),
                RunDequeued(task_id=following, thread_id=thread_id),
            )

    async def _unstarted_active(self, thread_id: str) -> str:
        """A dequeued run whose start notice was lost (the process that ended the run
        before it died before publishing it): its id, to notify again."""
        active: Any = await self.rt.redis.hget(self.names.thread_state(thread_id), "active")
        active_id = text(active or "")
        if not active_id or await self.rt.redis.exists(self.names.task_state(active_id)):
            return ""
        kept = await self.rt.redis.hexists(self.names.thread_pending(thread_id), active_id)
        return active_id if kept else ""

    def ended_later(self, task_id: str, thread_id: str) -> None:
        """``ended`` after the entry's commit (a fused transition ended the task)."""
        task = asyncio.get_running_loop().create_task(self._ended_logged(task_id, thread_id))
        self._ending.add(task)
        task.add_done_callback(self._ending.discard)

    async def _ended_logged(self, task_id: str, thread_id: str) -> None:
        CURRENT.set(None)  # this task's copy of the context: the committed entry is done
        try:
            await self.ended(task_id, thread_id)
        except Exception:  # the next submission on the thread records it (``_recover``)
            log.warning("recording the end of run %s failed", task_id, exc_info=True)

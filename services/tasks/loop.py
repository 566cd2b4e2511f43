"""The agent loop: one method per event, each one atomic transition followed by publishing
what the new state asks for.

A transition's outputs are published by whichever delivery of the event applied it, or by
a redelivery of that same event (the state remembers its ``cause``), so a crash between
the transition and the publish loses nothing, and a duplicate publishes nothing new.

For an agent without loop-stage hooks the new state is predictable, so a transition is
fused with its outputs and the entry's ack (``Fusion``: one script), and the model and
tools services apply these transitions themselves (``services.tasks.handover``): the loop
service then only starts, cancels and times out tasks and runs hooks and approvals.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import Iterator
from typing import Any

from contracts.agent import AgentSpec
from contracts.events import (
    ApprovalRequested,
    CancelRequested,
    DecisionsRefused,
    DecisionsSubmitted,
    Event,
    ExceptionInfo,
    KeptMessages,
    ModelFailed,
    ModelInterrupted,
    ModelRequested,
    ModelResponded,
    ModelResumed,
    NodesUpdated,
    NodeUpdate,
    RunDequeued,
    StepStarted,
    StructuredOutcome,
    TaskCompleted,
    TaskFailed,
    TaskSubmitted,
    ToolCompleted,
    ToolFailed,
    ToolInterrupted,
    dump_event,
    parse_event,
    rewritten,
)
from contracts.messages import MESSAGE_ADAPTER, AIMessage, Message, with_input_ids
from services import deployed
from services.custom_stream import CustomWriter, writing
from services.entry import CURRENT, current_entry_id
from services.errors import AnswerRefused, BadEvent, Refused, UnknownAgent, UnknownTask
from services.failures import exception_info, failure_text, own_exception_info
from services.hooks import HOOK_SETS_CACHED, HookSet, current_thread, hooks_for
from services.interrupts import Answers, Asked, NodeInterrupted, ResumeRefused, interrupt_id
from services.runtime import Runtime
from services.secrets import scrub
from services.spec.validation import InvalidSpec, check_agent
from services.tasks import invalid_calls
from services.tasks.hookrun import ModelTurn, model_turn, start_step, turn_with
from services.tasks.issued import call_digests
from services.tasks.per_call import PerCallApprovals
from services.tasks.plan import (
    after_model_results,
    join_order,
    model_request,
    tool_requests,
)
from services.tasks.recursion import NO_RECURSION_LIMIT, StepLimit
from services.tasks.state import Cause, Phase, TaskState
from services.tasks.store import TaskStore
from services.tasks.thread_runs import ThreadRuns, carried_extra
from services.tasks.threads import Claim
from services.tasks.transition import Fusion
from services.tasks.transitions import (
    ApplyHooks,
    AskHuman,
    FailTask,
    RecordReply,
    RecordResult,
    RefuseTask,
    StartRun,
    StartTask,
)

log = logging.getLogger("loopline.loop")


REQUESTS_ABOUT_A_TASK = frozenset({"CancelRequested", "DecisionsSubmitted"})
"""Events from outside about a task; refusing one leaves the task as it is."""

INLINE_REFUSED = (
    "inline agent specs are not run here: the operator deploys agents (`loopline deploy "
    "AGENT_FILE`) and tasks name them (agent: NAME or NAME@VERSION); "
    "LOOPLINE_ALLOW_INLINE_AGENTS=true runs inline specs where every producer is trusted"
)

LAST_RESULT_MAX_BYTES = 2048
"""A step's only tool result rides in the next model request up to this size (JSON):
larger ones are read from the transcript, so events stay small."""


class Loop:
    """The loop's transitions on one runtime. The loop service consumes its streams with
    them; the model and tools services call ``model_responded`` and ``tool_completed``
    directly for agents whose loop stage has no hooks to run."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.names = rt.names
        self.producer_streams = frozenset((rt.names.tasks, *rt.names.work_streams("tasks")))
        """Where producers submit (the one tasks stream, and each partition's)."""
        self.store = TaskStore(rt.redis, rt.names, rt.register_script)
        self.per_call = PerCallApprovals(rt, self.store)
        self.threads = ThreadRuns(rt, self.store, self.stop, self._emit)
        self._touching: set[asyncio.Task[None]] = set()
        self._limits: dict[str, StepLimit] = {}
        # read Redis until started (services.loop.handlers)
        self.registrations = deployed.Registrations(rt.redis, rt.names, enabled=not rt.cluster)

    # -- events ------------------------------------------------------------------------

    async def task_submitted(self, event: TaskSubmitted) -> None:
        # no messages is a task too: the model is called with none (or with the thread's
        # and the system prompt), as LangChain's agent calls it
        spec, max_steps = await self._agent_of(event)
        claim = None
        if event.thread_id is not None:
            claim = await self.threads.submitted(event)
            if claim is None:  # it waits for the thread, was refused, or is a redelivery
                return
        await self._start(event, claim, spec, max_steps)

    async def run_dequeued(self, event: RunDequeued) -> None:
        """A run that waited for its thread is the thread's active run now."""
        found = await self.threads.dequeued(event)
        if found is not None:
            claim, submitted = found
            spec, max_steps = await self._agent_of(submitted)
            await self._start(submitted, claim, spec, max_steps)

    async def _start(
        self, event: TaskSubmitted, claim: Claim | None, spec: AgentSpec, max_steps: int | None
    ) -> None:
        """Start a task, or a run of a thread from the thread's state (``claim``)."""
        rt = self.rt
        # Messages get ids as LangGraph gives them, so middleware can replace them by id;
        # derived from the task id, so a redelivery stores the same ones.
        # Malformed tool calls answered as LangChain's model node answers them.
        inputs = with_input_ids(event.task_id, invalid_calls.answered(event.messages))
        agent_id = await rt.save_agent(spec)
        submitted_event = dump_event(event)
        step_event = dump_event(StepStarted(task_id=event.task_id, step=1))
        max_steps = max_steps or rt.settings.max_steps
        messages = [m.model_dump_json() for m in inputs]
        hooks = await self._hooks_or_none(agent_id)
        start: StartTask | StartRun
        if claim is None:
            start = StartTask(
                agent_id=agent_id,
                max_steps=max_steps,
                submitted_event=submitted_event,
                step_event=step_event,
                retention=rt.settings.retention_s,
                messages=messages,
                entry=current_entry_id(),
                extra=_started_state(hooks, "", event),
            )
        else:
            assert event.thread_id is not None
            carried = _started_state(hooks, carried_extra(claim.extra, hooks), event)
            start = StartRun(
                agent_id=agent_id,
                max_steps=max_steps,
                submitted_event=submitted_event,
                step_event=step_event,
                retention=rt.settings.retention_s,
                messages=invalid_calls.answered_stored(claim.messages + messages),
                todos=claim.todos,
                extra=carried,
                thread_id=event.thread_id,
            )
        deadline_s = event.deadline_s or rt.settings.task_deadline_s
        fusion = None if deadline_s else self._start_fusion(event.task_id, spec, start, inputs)
        state = await self.store.apply(event.task_id, start, fusion)
        if state.duplicate:  # a replayed id: the first submission's task goes on as it was
            raise Refused(f"task {event.task_id!r} exists already; this submission is refused")
        if state.committed:  # the first model request went out with the start
            return
        if deadline_s and state.running:
            # After the start, so only the submission that started the task sets it; a
            # crash in between leaves the entry pending, and its redelivery sets it.
            await rt.redis.zadd(
                self.names.deadlines_of(event.task_id),
                {event.task_id: event.at + deadline_s},
                nx=True,
            )
        if state.cause == Cause.START and self._step_limit(spec).model_calls == 0:
            # the recursion limit ends it before the first model call, as LangGraph's
            await self._fail_with(event.task_id, self._step_limit(spec).error(0))
            return
        if state.cause in (Cause.START, Cause.hooks(1)):
            await self._advance(event.task_id, state)

    def _start_fusion(
        self, task_id: str, spec: AgentSpec, start: StartTask | StartRun, inputs: list[Message]
    ) -> Fusion | None:
        """A task whose first step runs no hook before the model call: its start also
        publishes the step's model request and acks the submission, in one script (one
        round trip before the first model call, not two). A new task's small input rides
        along, so the model service need not read it back (another round trip)."""
        try:
            hooks = hooks_for(start.agent_id, spec)
        except Exception:  # the step's hooks report it (``_begin_step``)
            return None
        if _hooks_before_model(hooks, 1):
            return None
        if self._step_limit(spec).model_calls == 0:
            return None  # it fails where it starts
        request = model_request(
            self.names,
            spec,
            task_id=task_id,
            agent_id=start.agent_id,
            step=1,
            transcript_len=len(start.messages),
            rev=0,
            transcript=inputs if _inline(start) else None,
        )
        return self._fusion(task_id, (Phase.MODEL,), Phase.MODEL, [request], len(start.messages))

    async def _agent_of(self, event: TaskSubmitted) -> tuple[AgentSpec, int | None]:
        """The spec a submitted task runs and its step limit: the deployed agent it names
        with the overrides its registration allows, or (where inline agents are allowed)
        the spec it carries. Checked once per task, where it starts, never per step: the
        import allow-list and the model's endpoint again, as this process sees them."""
        if isinstance(event.agent, str):
            try:
                found = await self.registrations.lookup(event.agent)
                if found is None:
                    raise BadEvent(
                        f"no deployed agent {event.agent!r}: the operator deploys it first "
                        "(`loopline deploy AGENT_FILE`)"
                    )
                limited = event.recursion_limit is not None
                spec, max_steps = deployed.run_spec(
                    found, event.overrides, event.max_steps, limited=limited
                )
            except ValueError as exc:
                raise BadEvent(str(exc)) from exc
        elif not self.rt.settings.allow_inline_agents:
            raise BadEvent(INLINE_REFUSED)
        else:
            spec, max_steps = event.agent, event.max_steps
            if event.overrides:
                raise BadEvent("overrides apply to deployed agents; an inline spec is whole")
        if event.run_mode is not None:  # invoke or ainvoke: that variant of each hook
            spec = spec.model_copy(update={"run_mode": event.run_mode})
        if event.recursion_limit is not None:  # the run's config: the step limit from it
            spec = spec.model_copy(update={"recursion_limit": event.recursion_limit})
        if event.tags or event.metadata:  # what hooks and tools find in their config
            run_config = {"tags": list(event.tags), "metadata": dict(event.metadata)}
            spec = spec.model_copy(update={"run_config": run_config})
        try:
            check_agent(spec)  # once per distinct middleware spec: cached
        except InvalidSpec as exc:
            raise BadEvent(str(exc)) from exc
        calls = self._step_limit(spec).model_calls
        if calls is not None:
            max_steps = max(calls, 1)  # 0: it fails where it starts (Loop._start)
        return spec, max_steps

    async def cancel_requested(self, event: CancelRequested) -> None:
        reason = f"cancelled: {event.reason}"
        if event.thread_id and await self.threads.cancel_queued(
            event.thread_id, event.task_id, reason
        ):
            return  # it waited for its thread: it leaves the queue, never started
        if event.rollback and event.thread_id:  # before it ends, so its end writes nothing
            await self.threads.roll_back(event.thread_id, event.task_id)
        await self.stop(event.task_id, reason, Cause.CANCEL)

    async def stop(self, task_id: str, reason: str, cause: str) -> None:
        """Fail a running task now (cancel, deadline); later events for it are dropped."""
        state = await self._fail_at_current_step(task_id, reason, cause)
        if not state.exists:
            await self.rt.redis.zrem(self.names.deadlines_of(task_id), task_id)
            if cause == Cause.CANCEL:
                raise UnknownTask(f"cannot cancel: no task {task_id!r}")
            return
        await self._emit(task_id, state)

    async def decisions_submitted(self, event: DecisionsSubmitted) -> None:
        """An answer to the interrupt a task waits on: a tool call's (tools phase; one
        per waiting call), or a loop-stage hook's, whose node then runs again from its
        start with ``interrupt()`` returning it (and the answers it had before). An
        answer the node refuses is logged (``DecisionsRefused``: the client that sent it
        raises the node's exception, as LangGraph's resume does) and dead-lettered."""
        try:
            await self._decided(event)
        except AnswerRefused as refused:
            logged = DecisionsRefused(
                task_id=event.task_id,
                step=refused.step,
                reason=str(refused),
                exception=exception_info(refused.cause),
            )
            await self.store.log_once(
                event.task_id, f"refused:{current_entry_id()}", dump_event(logged)
            )
            raise

    async def _decided(self, event: DecisionsSubmitted) -> None:
        tid = event.task_id
        waiting = await self.store.waiting(tid)
        if waiting.phase == Phase.TOOLS:  # calls that wait one by one
            await self.per_call.decisions(event)
            return
        if waiting.phase != Phase.APPROVAL or waiting.pending is None:
            raise BadEvent(f"task {tid} is not waiting for a decision")
        node = waiting.node or HITL_NODE
        value = _answer_for(event, waiting.interrupt_id)
        resumed = parse_event(waiting.pending)
        assert isinstance(resumed, ModelResponded | StepStarted | ModelRequested)
        answers = Answers(
            scope=_scope(tid, resumed.step),
            by_node={**waiting.resume, node: [*waiting.resume.get(node, []), value]},
            answered=waiting.interrupt_id,
            done=dict(waiting.done),
        )
        if isinstance(resumed, ModelRequested):  # a wrap_model_call interrupt: call again
            again = ModelResumed(
                task_id=tid,
                step=resumed.step,
                agent_id=resumed.agent_id,
                requested=resumed,
                answers=answers.of(node),
            )
            await self.rt.publish(self.names.work("model", tid), again)
            return
        if isinstance(resumed, ModelResponded):
            await self.model_responded(resumed, answers)
            return
        state = await self._begin_step(tid, None, answers)
        if state is not None:
            await self._emit(tid, state)

    async def model_responded(self, event: ModelResponded, answers: Answers | None = None) -> None:
        """``answers``: the answers to the interrupts this reply's hooks asked."""
        tid = event.task_id
        hooks = await self._hooks(tid, event.agent_id)
        if hooks is None:
            return
        ai = event.message
        if ai.id is None:
            ai = ai.model_copy(update={"id": f"{tid}:ai:{event.step}"})
        found = await self._turn(event, hooks, ai, answers)
        if found is None:
            return
        turn = found
        if event.structured is not None:
            turn = await self._with_structured(tid, turn, event.structured, hooks)
        fusion = None
        digests = {} if turn.end else call_digests(turn.ai, turn.decided)
        if (
            answers is None
            and event.transcript_len is not None
            and not hooks.has_state_hooks
            and not turn.after_ai  # the fused join length counts the reply alone
            and event.rewrite is None  # and the transcript it was given
        ):
            fusion = await self._tool_calls_fusion(event, turn, digests)
        state = self._known(await self._record_reply(event, turn, fusion, digests, hooks), tid)
        if state.committed:
            # The reply stands at transcript_len now (the script checked the length):
            # this process's cached transcript takes it without reading it back.
            self._committed(tid, state)
            if event.transcript_len is not None:
                self.rt.remember(tid, event.rev, event.transcript_len, turn.ai)
            return
        cause = Cause.model(event.step)
        if state.step == event.step and state.cause == cause:
            await self._emit(tid, state, turn.ai)
        elif self._resumes(state, cause, event.step):
            await self._advance(tid, state)

    async def _turn(
        self,
        event: ModelResponded,
        hooks: HookSet,
        ai: AIMessage,
        answers: Answers | None,
    ) -> ModelTurn | None:
        """The reply with what comes with it: the state update of its wrap_model_call
        middleware, then what after_model hooks decide (None: the task waits or failed).
        ``answers``: the answers to the interrupts those hooks asked."""
        spec = await self.rt.agent(event.agent_id)
        turn = ModelTurn(ai, decided=after_model_results(spec, ai), end=not ai.tool_calls)
        if event.update:  # applied before after_model runs, as LangChain's model node does
            codec = hooks.channels.codec
            stored = await self.store.extra(event.task_id, codec)
            turn.extra = {**stored, **codec.decode(event.update)}
        if hooks.with_hook("after_model") or (turn.end and hooks.with_hook("after_agent")):
            answers = answers or Answers(scope=_scope(event.task_id, event.step))
            hooked = await self._after_model(event, hooks, turn, answers)
            if hooked is not None and hooked.extra is None:  # the hooks changed no key
                hooked.extra = turn.extra
            return hooked
        return turn_with(turn, event.added) if event.added else turn

    async def tool_completed(
        self,
        event: ToolCompleted,
        join_len: int | None = None,
        result_at: int | None = None,
        rev: int = 0,
    ) -> None:
        """``join_len``, ``result_at``, ``rev``: from the call's ToolRequested, when the
        caller has them (then a result that completes the step can fuse the next model
        request)."""
        tid = event.task_id
        cause = Cause.tool(event.step, event.message.tool_call_id)
        tool_message = event.message.model_dump_json().encode()
        fusion = None
        if join_len is not None:
            fusion = await self._model_request_fusion(event, tool_message, join_len, result_at, rev)
        record = RecordResult(
            step=event.step,
            cause=cause,
            call_id=event.message.tool_call_id,
            tool_message=tool_message,
            tool_event=self.rt.encode(event),  # with the size check of a publish
            step_event=dump_event(StepStarted(task_id=tid, step=event.step + 1)),
            failed_event=b"",  # asked for by the one result that needs it
            update=_update_pairs(_writes_of(event)),
        )
        state = await self._record_result(event, record, fusion)
        if state is None:
            return
        state = self._known(state, tid)
        if state.committed:
            self._committed(tid, state)
        elif self._resumes(state, cause, event.step):
            await self._advance(tid, state)

    async def _record_result(
        self, event: ToolCompleted, record: RecordResult, fusion: Fusion | None
    ) -> TaskState | None:
        """Apply a tool result, with what the transition asks for when it needs more: the
        joined state of a step whose calls updated it, the step limit's TaskFailed (each
        computed only then). None: the task failed computing the joined state."""
        tid = event.task_id
        state = await self.store.apply(tid, record, fusion)
        for _ in range(2):  # each is asked for once at most
            if state.limit_event_needed and not record.failed_event:
                failed = await self._result_limit_failed(event)
                record = dataclasses.replace(record, failed_event=failed)
            elif state.joining and not record.joined:
                try:
                    joined = await self._joined(event, state.expected)
                except Exception as exc:  # LangGraph's InvalidUpdateError, a reducer's error
                    await self._fail_with(tid, exc)
                    return None
                record = dataclasses.replace(record, joined=joined)
            else:
                break
            state = await self.store.apply(tid, record, fusion)
        return state

    async def _joined(self, event: ToolCompleted, expected: list[str]) -> str:
        """The task's state keys (JSON) once the step's updates are applied as one
        superstep of LangGraph's: every call's update in call order, through the keys'
        reducers; two updates of a key without one raise LangGraph's InvalidUpdateError.
        Read when every other result of the step is in, so nothing changes them."""
        own = event.message.tool_call_id
        others = [c for c in expected if c != own]
        hooks = await self._hooks_or_none(event.agent_id)
        codec = hooks.channels.codec
        state, updates = await self.store.step_updates(event.task_id, others, codec)
        own_writes = _writes_of(event)
        if own_writes:
            updates[own] = codec.decode_pairs(own_writes)
        writes = [w for call_id in expected for w in updates.get(call_id, [])]
        return codec.dumps(hooks.channels.apply(state, writes))

    async def model_failed(self, event: ModelFailed) -> None:
        reason = f"model call failed at step {event.step}: {event.error}"
        state = await self.store.apply(
            event.task_id,
            FailTask(
                failed_event=self._failed(event.task_id, event.step, reason, event.exception),
                cause=Cause.model_failed(event.step),
            ),
        )
        await self._emit(event.task_id, self._known(state, event.task_id))

    async def model_interrupted(self, event: ModelInterrupted) -> None:
        """A wrap_model_call middleware called ``interrupt()``: the task waits for the
        answer, with the model request to send again once answered."""
        tid, step = event.task_id, event.step
        scope = _scope(tid, step)
        given = len(event.answered)
        answers = Answers(
            scope,
            {MODEL_NODE: event.answered},
            answered=interrupt_id(MODEL_NODE, scope, given - 1) if given else "",
        )
        asked = Asked(event.request, event.interrupt_id, event.response_schema)
        waiting = NodeInterrupted(MODEL_NODE, asked)
        await self._wait(tid, step, waiting, dump_event(event.requested), "model", answers)

    async def tool_failed(self, event: ToolFailed) -> None:
        """A tool raised: the task fails with its exception, as LangChain's agent lets a
        tool's exception propagate (the step's other calls may still finish; their
        results change nothing)."""
        reason = f"tool {event.call.name!r} failed at step {event.step}: {event.error}"
        state = await self.store.apply(
            event.task_id,
            FailTask(
                failed_event=self._failed(event.task_id, event.step, reason, event.exception),
                cause=Cause.tool_failed(event.step, event.call.id),
            ),
        )
        await self._emit(event.task_id, self._known(state, event.task_id))

    async def tool_interrupted(self, event: ToolInterrupted) -> None:
        await self.per_call.interrupted(event)

    async def event_refused(self, task_id: str, event_type: str, stage: str, reason: str) -> None:
        """A stage dead-lettered one of the task's events (``services.runner``): the task
        cannot go on, so it ends with the stage and the reason, for its waiting client.
        Requests about a task from outside (a cancel, decisions, anything else on the
        producers' tasks stream) are refused without ending it: a decision that does not
        fit leaves the task waiting for a good one. A refused submission ends only the
        task it started itself, never one another submission of the same id started."""
        entry = CURRENT.get()
        from_producers = entry is not None and entry.stream in self.producer_streams
        if event_type in REQUESTS_ABOUT_A_TASK:
            return
        if from_producers and event_type != "TaskSubmitted":
            return  # anything else on the producers' stream never ends a task
        step = await self.store.current_step(task_id)
        text = f"the {stage} stage could not handle {event_type}: {reason}"
        state = await self.store.apply(
            task_id,
            RefuseTask(
                failed_event=self._failed(task_id, step, text),
                cause=Cause.refused(stage),
                retention=self.rt.settings.retention_s,
                create=event_type == "TaskSubmitted",
                entry=current_entry_id(),
            ),
        )
        if state.applied:
            await self._emit(task_id, state)

    # -- what a new state asks for -----------------------------------------------------

    async def _emit(self, task_id: str, state: TaskState, ai: AIMessage | None = None) -> None:
        """Publish what the state asks for: the model request of its step, or the step's
        tool calls that have no result yet; a task that ended leaves the deadline set; one
        that waits for an answer asks for nothing."""
        rt = self.rt
        if state.running and state.phase == Phase.APPROVAL:
            return
        if not state.running:
            rt.forget(task_id)
            await rt.redis.zrem(self.names.deadlines_of(task_id), task_id)
            if state.agent_id:
                await rt.agents.touch(state.agent_id)
            if state.thread:  # a run of a thread writes back
                await self.threads.ended(task_id, state.thread)
            return
        spec = await rt.agent(state.agent_id)
        if state.phase == Phase.MODEL:
            await rt.publish(*self._model_request(spec, task_id, state))
            return
        if ai is None:
            ai = await self._last_reply(task_id)
            if ai is None:
                return
        pending = [c for c in ai.tool_calls if c.id in state.expected and c.id not in state.done]
        await rt.publish_many(
            tool_requests(
                self.names,
                spec,
                task_id=task_id,
                agent_id=state.agent_id,
                step=state.step,
                calls=pending,
                # results join the transcript only when all are in
                join_len=state.transcript_len + len(state.expected),
                expected=state.expected,
                sealer=await rt.sealer(),
                rev=state.rev,
            )
        )

    def _model_request(self, spec: AgentSpec, task_id: str, state: TaskState) -> tuple[str, Event]:
        return model_request(
            self.names,
            spec,
            task_id=task_id,
            agent_id=state.agent_id,
            step=state.step,
            transcript_len=state.transcript_len,
            rev=state.rev,
        )

    async def _last_reply(self, task_id: str) -> AIMessage | None:
        raw = await self.store.last_message(task_id)
        last = MESSAGE_ADAPTER.validate_json(raw) if raw else None
        return last if isinstance(last, AIMessage) else None

    async def _advance(self, task_id: str, state: TaskState) -> None:
        """Publish what a state that just moved (or is being re-driven) asks for."""
        started = await self._begin_step(task_id, state)
        if started is not None:
            await self._emit(task_id, started)

    def _committed(self, task_id: str, state: TaskState) -> None:
        """A fused transition committed the entry: everything the new state asks for is
        published already."""
        if not state.running:
            self.rt.forget(task_id)
            self._touch_later(state.agent_id)
            if state.thread:  # a run of a thread writes back (no read for other tasks)
                self.threads.ended_later(task_id, state.thread)

    def _touch_later(self, agent_id: str) -> None:
        """Keep the agent's spec for the retention time from the end of this task (after
        the commit: nothing may be queued on a committed entry)."""
        if not self.rt.agents.touch_due(agent_id):
            return
        task = asyncio.get_running_loop().create_task(self.rt.agents.touch(agent_id))
        self._touching.add(task)
        task.add_done_callback(self._touching.discard)

    @staticmethod
    def _resumes(state: TaskState, cause: str, step: int) -> bool:
        """Whether this event (by its cause) should (re-)publish the state's outputs: it
        caused the state, or it caused the step whose hooks were applied since."""
        return state.cause == cause or (
            state.cause == Cause.hooks(state.step) and step == state.step - 1
        )

    @staticmethod
    def _known(state: TaskState, task_id: str) -> TaskState:
        if not state.exists:
            raise UnknownTask(f"no task {task_id!r}")
        return state

    # -- fused transitions (agents without loop-stage hooks) ---------------------------

    async def _tool_calls_fusion(
        self, event: ModelResponded, turn: ModelTurn, digests: dict[str, str]
    ) -> Fusion | None:
        """No hooks ran: the new state is predictable, so the transition can publish the
        step's tool calls and ack the entry itself (one round trip, not two)."""
        assert event.transcript_len is not None
        expected = [] if turn.end else join_order(turn.ai, turn.decided)
        outputs = tool_requests(
            self.names,
            await self.rt.agent(event.agent_id),
            task_id=event.task_id,
            agent_id=event.agent_id,
            step=event.step,
            calls=[c for c in turn.ai.tool_calls if c.id not in turn.decided],
            join_len=event.transcript_len + 1 + len(expected),
            expected=expected,
            sealer=await self.rt.sealer(),
            digests=digests,
            rev=event.rev,
        )
        return self._fusion(
            event.task_id, (Phase.TOOLS, Phase.DONE), Phase.TOOLS, outputs, event.transcript_len + 1
        )

    async def _model_request_fusion(
        self,
        event: ToolCompleted,
        tool_message: bytes,
        join_len: int,
        result_at: int | None,
        rev: int,
    ) -> Fusion | None:
        """When this result completes the step and no before_model hooks are to run, the
        transition publishes the next model request and acks, in one script (``rev``:
        the transcript's revision, which only hooks and the model node's rewrites move)."""
        spec = await self.rt.agent(event.agent_id)
        if hooks_for(event.agent_id, spec).has_state_hooks:
            return None
        small = result_at == join_len - 1 and len(tool_message) <= LAST_RESULT_MAX_BYTES
        request = model_request(
            self.names,
            spec,
            task_id=event.task_id,
            agent_id=event.agent_id,
            step=event.step + 1,
            transcript_len=join_len,
            rev=rev,
            # the step's only result, when small: the model need not read it back
            last_result=event.message if small else None,
        )
        phases = (Phase.MODEL, Phase.TOOLS, Phase.DONE)
        return self._fusion(event.task_id, phases, Phase.MODEL, [request], join_len)

    def _fusion(
        self,
        task_id: str,
        phases: tuple[Phase, ...],
        publish_phase: Phase,
        outputs: list[tuple[str, Event]],
        expect_len: int | None,
    ) -> Fusion | None:
        rt = self.rt
        return Fusion.of_current_entry(
            task_id,
            phases=tuple(p.value for p in phases),
            publish_phase=publish_phase.value,
            outputs=[(stream, rt.encode(event)) for stream, event in outputs],
            deadlines_key=self.names.deadlines_of(task_id),
            expect_len=expect_len,
            cluster=self.names if rt.cluster else None,
        )

    async def _record_reply(
        self,
        event: ModelResponded,
        turn: ModelTurn,
        fusion: Fusion | None,
        digests: dict[str, str],
        hooks: HookSet,
    ) -> TaskState:
        """``digests``: of the reply's calls to run (``call_digests``). The events the
        script may log are built only where it can: the completion when nothing is to
        run, the next step's start (or its limit) when hooks answered every call."""
        tid = event.task_id
        spec = await self.rt.agent(event.agent_id)
        over = self._step_limit(spec).reply_over(event.step, turn.end)
        expected = [] if turn.end or turn.again else join_order(turn.ai, turn.decided)
        ends = (not expected and not turn.again) or turn.end_after_tools
        completed = self._completed(event, turn) if ends else b""
        advances = turn.again or (bool(expected) and len(turn.decided) >= len(expected))
        limit_failed = self._limit_failed(spec, tid, event.step) if advances or over else b""
        return await self.store.apply(
            tid,
            RecordReply(
                step=event.step,
                cause=Cause.model(event.step),
                ai_message=turn.ai.model_dump_json().encode(),
                responded_event=self.rt.encode(event),  # with the size check of a publish
                expected=expected,
                pre_results={k: v.model_dump_json() for k, v in turn.decided.items()},
                completed_event=completed if not expected else b"",
                step_event=(
                    dump_event(StepStarted(task_id=tid, step=event.step + 1)) if advances else b""
                ),
                failed_event=limit_failed if advances else b"",
                limit_event=limit_failed if over else b"",
                after_ai=[m.model_dump_json() for m in turn.after_ai],
                extra=hooks.channels.codec.dumps(turn.extra) if turn.extra is not None else "",
                issued=digests,
                end_after=completed if turn.end_after_tools else b"",
                nodes_event=_nodes_event(tid, event.step, turn.ran),
                again=turn.again,
                rewrite=_rewrite_args(event),
            ),
            fusion,
        )

    @staticmethod
    def _completed(event: ModelResponded, turn: ModelTurn) -> bytes:
        """The TaskCompleted of a task that ends with this reply (or its step's results)."""
        answer = next(
            (m.text() for m in reversed([turn.ai, *turn.after_ai]) if isinstance(m, AIMessage)),
            "",
        )
        completed = TaskCompleted(
            task_id=event.task_id,
            steps=event.step,
            answer=answer,
            structured_response=_structured_response(event, turn),
        )
        return dump_event(completed)

    async def _with_structured(
        self, task_id: str, turn: ModelTurn, outcome: StructuredOutcome, hooks: HookSet
    ) -> ModelTurn:
        """The model service's structured outcome joined to the turn (LangChain's model
        node adds it before after_model runs): its tool messages answer the structured
        calls, and a structured response with no other call to run ends the task with
        ``structured_response`` in the state."""
        answers = {m.tool_call_id: m for m in outcome.tool_messages}
        extra = turn.extra
        if outcome.given:
            codec = hooks.channels.codec
            base = extra if extra is not None else await self.store.extra(task_id, codec)
            extra = {**base, "structured_response": outcome.response}
        decided = {**turn.decided, **answers}
        pending = [c for c in turn.ai.tool_calls if c.id not in decided]
        if outcome.given and not pending:
            after = [*answers.values(), *turn.after_ai]
            return ModelTurn(turn.ai, after, {}, extra, end=True, ran=turn.ran)
        # LangChain runs the reply's other calls, then ends on the structured answer
        return ModelTurn(
            turn.ai,
            turn.after_ai,
            decided,
            extra,
            turn.end,
            end_after_tools=outcome.given,
            ran=turn.ran,
        )

    # -- hooks of the loop stage -------------------------------------------------------

    async def _hooks(self, task_id: str, agent_id: str) -> HookSet | None:
        """The agent's middleware; a middleware that cannot be built fails the task."""
        spec = await self.rt.agent(agent_id)
        try:
            return hooks_for(agent_id, spec)
        except Exception as exc:  # a bad import path or parameters: the task's failure
            reason = f"middleware cannot be loaded: {type(exc).__name__}: {exc}"
            await self._fail_now(task_id, reason)
            return None

    async def _hooks_or_none(self, agent_id: str) -> HookSet:
        """The agent's middleware where a task starts; none when they cannot be built
        (the step's hooks then fail the task with the reason)."""
        try:
            return hooks_for(agent_id, await self.rt.agent(agent_id))
        except Exception:
            return HookSet()

    async def _transcript(self, task_id: str) -> list[Message]:
        """The whole transcript as it stands (for hooks, which may read all of it)."""
        rt = self.rt
        rev: Any = await rt.redis.hget(self.names.task_state(task_id), "rev")
        length = int(await rt.redis.llen(self.names.task_messages(task_id)))
        return await rt.transcript(task_id, length, int(rev or 0))

    async def _after_model(
        self, event: ModelResponded, hooks: HookSet, turn: ModelTurn, answers: Answers
    ) -> ModelTurn | None:
        """Run after_model (and at the end after_agent) hooks; None when the task waits
        for an answer to an interrupt or failed."""
        tid = event.task_id
        transcript = await self._transcript(tid)
        if event.rewrite is not None:  # the model node's writes changed the messages before it
            transcript = rewritten(event.rewrite, transcript, lambda m: m)
        writer = CustomWriter(self.rt, tid, event.step, "after_model")
        thread: Any = None
        if hooks.wants_config:  # the thread is in the config a hook is given
            thread = await self.rt.redis.hget(self.names.task_state(tid), "thread")
        try:
            with writing(writer, hooks.context), in_thread(thread):
                extra = turn.extra
                if extra is None:
                    extra = await self.store.extra(tid, hooks.channels.codec)
                hooked = await model_turn(
                    hooks, transcript, turn.ai, extra, answers, beside=event.added
                )
            await writer.flush()  # before the reply is recorded: a client sees them first
        except NodeInterrupted as asked:
            await self._wait(tid, event.step, asked, dump_event(event), "after", answers)
            return None
        except (ValueError, ResumeRefused) as exc:
            if answers.answered:  # answers that do not fit: refuse them, keep waiting
                raise AnswerRefused(event.step, _refusal(exc)) from exc
            await self._fail_with(tid, exc)
            return None
        except Exception as exc:  # a hook that raises ends the task with its exception
            await self._fail_with(tid, exc)
            return None
        hooked.decided = {**turn.decided, **hooked.decided}
        hooked.ran = list(answers.ran)
        return hooked

    async def _wait(
        self,
        task_id: str,
        step: int,
        asked: NodeInterrupted,
        pending: bytes,
        at: str,
        answers: Answers,
    ) -> None:
        """A loop-stage hook called ``interrupt()``: the task waits for the answer, with
        the event it resumes with (``pending``) and the answers its nodes had so far."""
        request = ApprovalRequested(
            task_id=task_id,
            step=step,
            request=asked.asked.value,
            interrupt_id=asked.asked.interrupt_id,
            node=asked.node,
            response_schema=asked.asked.response_schema,
        )
        # Fused: once the task's log says it waits, nothing of this entry is pending.
        outputs: list[tuple[str, Event]] = [(self.names.approvals, request)]
        fusion = self._fusion(task_id, (Phase.APPROVAL,), Phase.APPROVAL, outputs, None)
        state = await self.store.apply(
            task_id,
            AskHuman(
                step=step,
                cause=Cause.approval(step),
                pending=pending,
                approval_event=dump_event(request),
                node=asked.node,
                interrupt_id=asked.asked.interrupt_id,
                at=at,
                resume={node: list(values) for node, values in answers.by_node.items()},
                answered=answers.answered,
                done=answers.done or None,
                nodes_event=_nodes_event(task_id, step, answers.ran),
            ),
            fusion,
        )
        if not state.committed and state.cause == Cause.approval(step):
            await self.rt.publish(self.names.approvals, request)

    async def _begin_step(
        self, task_id: str, state: TaskState | None, answers: Answers | None = None
    ) -> TaskState | None:
        """A step is about to call the model: run before_agent/before_model hooks once.
        ``answers``: resuming the step's hooks (``state`` None: it waits for them)."""
        if state is None:
            state = await self.store.state(task_id)
            if not state.running or state.phase != Phase.APPROVAL:
                return None  # answered already (a redelivery), or it ended meanwhile
        elif not state.running or state.phase != Phase.MODEL or state.hooks_step == state.step:
            return state
        hooks = await self._hooks(task_id, state.agent_id)
        if hooks is None:
            return None
        if not _hooks_before_model(hooks, state.step):
            return state
        transcript = await self.rt.transcript(task_id, state.transcript_len, state.rev)
        extra = await self.store.extra(task_id, hooks.channels.codec)
        answers = answers or Answers(scope=_scope(task_id, state.step))
        writer = CustomWriter(self.rt, task_id, state.step, "before_model")
        try:
            with writing(writer, hooks.context), in_thread(state.thread):
                outcome = await start_step(hooks, state.step, transcript, extra, answers)
            await writer.flush()
        except NodeInterrupted as asked:
            started = dump_event(StepStarted(task_id=task_id, step=state.step))
            await self._wait(task_id, state.step, asked, started, "before", answers)
            return None
        except ResumeRefused as exc:
            raise AnswerRefused(state.step, _refusal(exc)) from exc
        except Exception as exc:  # a hook that raises (a limit with exit "error") ends it
            if answers.answered and isinstance(exc, ValueError):
                raise AnswerRefused(state.step, exc) from exc
            await self._fail_with(task_id, exc)
            return None
        completed = TaskCompleted(task_id=task_id, steps=state.step - 1, answer=outcome.answer)
        return await self.store.apply(
            task_id,
            ApplyHooks(
                step=state.step,
                cause=Cause.hooks(state.step),
                append=[m.model_dump_json() for m in outcome.append],
                rewrite=None
                if outcome.rewrite is None
                else [m.model_dump_json() for m in outcome.rewrite],
                extra=hooks.channels.codec.dumps(outcome.extra)
                if outcome.extra is not None
                else "",
                end_now=outcome.end,
                completed_event=dump_event(completed),
                nodes_event=_nodes_event(task_id, state.step, answers.ran),
            ),
        )

    # -- failures ----------------------------------------------------------------------

    def _step_limit(self, spec: AgentSpec | None) -> StepLimit:
        """The task's step limit (from the run's ``recursion_limit`` and the hooks; its
        ``max_steps`` alone for a spec that is not stored)."""
        if spec is None or spec.recursion_limit is None:
            return NO_RECURSION_LIMIT
        found = self._limits.get(spec.agent_id)
        if found is None:
            try:
                hooks = hooks_for(spec.agent_id, spec)
            except Exception:  # middleware that cannot load: the first hook fails the task
                hooks = HookSet()
            if len(self._limits) >= HOOK_SETS_CACHED:
                self._limits.clear()
            found = self._limits[spec.agent_id] = StepLimit.of(spec, hooks)
        return found

    async def _result_limit_failed(self, event: ToolCompleted) -> bytes:
        """The step limit's TaskFailed for a tool result's step. A result naming an agent
        that is not stored names no task either: the transition says which
        (``UnknownTask``), as it did before step limits read the agent."""
        try:
            spec = await self.rt.agent(event.agent_id)
        except UnknownAgent:
            return self._limit_failed(None, event.task_id, event.step)
        return self._limit_failed(spec, event.task_id, event.step)

    def _limit_failed(self, spec: AgentSpec | None, task_id: str, step: int) -> bytes:
        """The TaskFailed a task ends with at its step limit: LangGraph's
        ``GraphRecursionError`` (for ``invoke`` to raise) with the reason it reads as."""
        limit = self._step_limit(spec)
        error = limit.error(step)
        # loopline's text or LangGraph's, with numbers: no secret in it to scrub
        message = str(error)
        reason = message if limit.recursion_limit is None else f"{type(error).__name__}: {message}"
        return self._failed(task_id, step, reason, own_exception_info(error))

    @staticmethod
    def _failed(
        task_id: str, step: int, reason: str, exception: ExceptionInfo | None = None
    ) -> bytes:
        failed = TaskFailed(task_id=task_id, step=step, reason=reason, exception=exception)
        return dump_event(failed)

    async def _fail_at_current_step(
        self,
        task_id: str,
        reason: str,
        cause: str | None,
        exception: ExceptionInfo | None = None,
    ) -> TaskState:
        """Fail a running task at whatever step it is on (one transition, applied once)."""
        step = await self.store.current_step(task_id)
        return await self.store.apply(
            task_id,
            FailTask(
                failed_event=self._failed(task_id, step, reason, exception),
                cause=cause or Cause.failed(step),
            ),
        )

    async def _fail_now(
        self, task_id: str, reason: str, exception: ExceptionInfo | None = None
    ) -> TaskState:
        state = await self._fail_at_current_step(task_id, scrub(reason), None, exception)
        await self._emit(task_id, state)
        return state

    async def _fail_with(self, task_id: str, exc: Exception) -> TaskState:
        """A middleware hook raised: the task fails with its exception (``invoke``
        raises it again, as LangChain's agent lets it propagate)."""
        return await self._fail_now(task_id, failure_text(exc), exception_info(exc, task_id))


MODEL_NODE = "model"
"""LangChain's model node: where wrap_model_call middleware run."""
HITL_NODE = "HumanInTheLoopMiddleware.after_model"
"""The node of a wait recorded before waits named theirs (HITL's batched approval)."""


def _scope(task_id: str, step: int) -> str:
    """Where a step's hooks run: their interrupts' ids derive from it (and the node)."""
    return f"{task_id}:{step}"


def _answer_for(event: DecisionsSubmitted, interrupt_id: str) -> Any:
    """The value the waiting interrupt gets: its answer by id, or (HumanInTheLoop-
    Middleware's batched approval) ``{"decisions": [...]}``."""
    if event.answers:
        if interrupt_id not in event.answers:
            raise BadEvent(
                f"task {event.task_id}: interrupt {next(iter(event.answers))!r} is not "
                f"waiting (waiting: {interrupt_id or 'none'})"
            )
        return event.answers[interrupt_id]
    if not event.decisions:
        raise BadEvent("DecisionsSubmitted needs decisions or answers")
    return {"decisions": event.decisions}


def _hooks_before_model(hooks: HookSet, step: int) -> bool:
    """Whether hooks run before the model call of ``step`` (before_agent: at the first)."""
    return bool(hooks.with_hook("before_model") or (step == 1 and hooks.with_hook("before_agent")))


def _refusal(exc: BaseException) -> BaseException:
    """The node's own exception behind a refused resume (``ResumeRefused`` wraps it)."""
    return exc.__cause__ if isinstance(exc, ResumeRefused) and exc.__cause__ else exc


def _inline(start: StartTask | StartRun) -> bool:
    """Whether a start's transcript is small enough to ride on its model request."""
    return isinstance(start, StartTask) and sum(map(len, start.messages)) <= LAST_RESULT_MAX_BYTES


@contextlib.contextmanager
def in_thread(thread: str | bytes | None) -> Iterator[None]:
    """The task's thread, for the ``config`` its hooks are given (``current_thread``)."""
    found = thread.decode() if isinstance(thread, bytes) else thread
    token = current_thread.set(found or None)
    try:
        yield
    finally:
        current_thread.reset(token)


def _started_state(hooks: HookSet, carried: str, event: TaskSubmitted) -> str:
    """The state keys a run starts with, as stored ("" for none): ``HookSet.start_state``
    of the thread's (``carried``, as stored) and the input's (as the client encoded it)."""
    codec = hooks.channels.codec
    state = hooks.start_state(codec.loads(carried), codec.decode(event.state))
    return codec.dumps(state) if state else ""


def _nodes_event(task_id: str, step: int, ran: list[tuple[str, dict[str, Any] | None]]) -> bytes:
    """The ``NodesUpdated`` a transition logs for the hook nodes that ran, or b"" for
    none."""
    if not ran:
        return b""
    nodes = [NodeUpdate(node=node, update=update) for node, update in ran]
    return dump_event(NodesUpdated(task_id=task_id, step=step, nodes=nodes))


def _writes_of(event: ToolCompleted) -> list[tuple[str, Any]]:
    """A call's writes in LangGraph's order: those it sent while it ran, then its
    ``Command``'s update."""
    return [*(event.writes or []), *(event.update or {}).items()]


def _update_pairs(writes: list[tuple[str, Any]]) -> str:
    """A tool's state writes as ``RecordResult`` takes them: each key with its value's
    JSON text, so the script splices values in without decoding them."""
    if not writes:
        return ""
    return json.dumps([part for key, value in writes for part in (key, json.dumps(value))])


def _rewrite_args(event: ModelResponded) -> list[str | list[int]] | None:
    """``ModelResponded.rewrite`` as the transition takes it: each new message's JSON, each
    run of kept ones as ``[start, count]``."""
    if event.rewrite is None:
        return None
    return [
        [m.start, m.count] if isinstance(m, KeptMessages) else m.model_dump_json()
        for m in event.rewrite
    ]


def _structured_response(event: ModelResponded, turn: ModelTurn) -> Any:
    """The structured response this reply gave, when it gave one."""
    given = event.structured is not None and event.structured.given
    return (turn.extra or {}).get("structured_response") if given else None

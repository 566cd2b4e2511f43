"""Runs as LangGraph's server has them, on loopline's tasks: a run body parsed, a run
started (a task submitted, or decisions for a waiting task), its status, its outcome
awaited, and a cancel.

Statuses map as LangGraph shows them: a run waiting for its thread is ``pending``; a task
that runs is ``running``; one that ended or stopped at an interrupt (a human is asked) is
``success``; cancelled or stopped by a newer run (``multitask_strategy="interrupt"``)
``interrupted``; failed ``error``; a run rolled back (``rollback``) is gone (404).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from contracts.agent import DeployedAgent
from contracts.events import ApprovalRequested, TaskCompleted, TaskFailed
from contracts.messages import to_langchain, with_input_ids
from loopline.api import delayed_runs, run_modes, saver_recorder, webhooks
from loopline.api.assistants import AssistantVersion
from loopline.api.params import RunBody, parse
from loopline.api.records import RunRecord, ThreadRecord
from loopline.api.run_errors import run_error
from loopline.api.tenant import NotFound, Tenant
from loopline.api.thread_sweep import set_thread_ttl
from loopline.api.wire import BadRequest, input_messages, jsonable
from loopline.conversation import (
    RunConfig,
    answers_of,
    snapshot_values,
    waiting_interrupts,
)
from loopline.stream_modes import STREAM_MODES
from loopline.threads import ThreadValues
from services.tasks.state import text

STOPPED_CAUSES = ("cancel", "superseded")
"""A failed task's causes that LangGraph calls ``interrupted`` rather than ``error``."""

TAGGED_MODES = ("messages-tuple",)
"""LangGraph's server names for loopline's stream modes (``messages-tuple`` is the
``messages`` mode's ``(chunk, metadata)`` pairs; ``messages`` is its older shape)."""


class Busy(Exception):
    """The thread has a run going and the new one asked ``reject`` (409)."""

    DETAIL = (
        "Thread is already running a task. Wait for it to finish or choose a different "
        "multitask strategy."
    )


@dataclass
class RunRequest:
    """A run body as ``langgraph_sdk`` sends it (the fields loopline acts on)."""

    assistant_id: str
    input: Any = None
    command: dict[str, Any] | None = None
    config: dict[str, Any] = field(default_factory=dict)
    context: dict[str, Any] | None = None
    stream_mode: list[str] = field(default_factory=lambda: ["values"])
    multitask_strategy: str = "reject"
    metadata: dict[str, Any] = field(default_factory=dict)
    if_not_exists: str = "reject"
    webhook: str | None = None
    on_completion: str = "delete"
    after_seconds: float = 0.0
    """Start the run this much later (``delayed_runs``); meanwhile it is pending."""

    @classmethod
    def parse(cls, body: Any) -> RunRequest:
        """A run body, read against ``params.RunBody`` (what loopline does not implement
        is refused there)."""
        run = parse(RunBody, body)
        if run.input is not None and run.command is not None:
            raise BadRequest("give input or command, not both")
        return cls(
            assistant_id=run.assistant_id,
            input=run.input,
            command=None if run.command is None else run.command.model_dump(),
            config=run.config.model_dump(exclude_defaults=True),
            context=dict(run.context) if run.context else None,
            stream_mode=list(run.stream_mode),
            multitask_strategy=run.multitask_strategy,
            metadata=dict(run.metadata),
            if_not_exists=run.if_not_exists,
            webhook=run.webhook,
            on_completion=run.on_completion or "delete",
            after_seconds=run.after_seconds or 0.0,
        )

    @property
    def kwargs(self) -> dict[str, Any]:
        return {
            "input": self.input,
            "command": self.command,
            "config": self.config,
            "context": self.context or {},
            "stream_mode": self.stream_mode,
            **({"webhook": self.webhook} if self.webhook else {}),
        }


def loopline_modes(requested: list[str]) -> list[str]:
    """The stream-mode layer's modes behind the modes a client asked for (those only
    LangGraph's server streams, ``events``, ``debug``, ..., are made from some of them:
    ``run_modes.reads``)."""
    found: list[str] = []
    for mode in [*requested, *run_modes.reads(requested)]:
        name = "messages" if mode in TAGGED_MODES else mode
        if name in STREAM_MODES and name not in found:
            found.append(name)
    return found


async def thread_exists(tenant: Tenant, thread_id: str) -> bool:
    await tenant.restore_thread(thread_id)  # its working copy back from its record
    if await tenant.records.thread(thread_id) is not None:
        return True
    return await tenant.threads.info(thread_id) is not None


MANY_THREADS = 10_000
"""The most threads of the bus (beside the gateway's own) a search looks at."""


async def thread_ids(tenant: Tenant) -> list[str]:
    """Every thread of the tenant: those the gateway created and those a client of the
    bus ran (``loopline.Client``, an agent's ``invoke`` on the deployment)."""
    known = await tenant.records.thread_ids()
    known += [t.thread_id for t in await tenant.threads.list(limit=MANY_THREADS)]
    return list(dict.fromkeys(known))


async def thread_busy(tenant: Tenant, thread_id: str, besides: str = "") -> bool:
    """Whether the thread has a run that has not ended (a run that ended but whose end is
    not yet written back does not count: the loop records it when the next run comes),
    or a delayed run (other than ``besides``) that has not started.
    A run that waits for a human has ended, as on LangGraph's server (its status is
    ``interrupted``, not pending nor running): a new input runs from where it stopped."""
    if await delayed_runs.waiting_on(tenant, thread_id, besides):
        return True
    info = await tenant.threads.info(thread_id)
    if info is None:
        return False
    if not info.active:
        return any(status == "queued" for status in info.runs.values())
    if await tenant.client.status(info.active) not in (None, "running"):
        return False
    state = await tenant.threads.of_run(thread_id, info.active)
    return not await waiting_interrupts(tenant.client, state)


async def run_agent(tenant: Tenant, request: RunRequest) -> tuple[DeployedAgent, RunRequest]:
    """The deployed agent a run body names, and the request with the assistant's
    configuration under it (422 for no such assistant: in a run body, LangGraph's server
    calls an unknown assistant invalid input)."""
    try:
        agent, configured = await tenant.configured(request.assistant_id)
    except NotFound as exc:
        raise BadRequest(f"Invalid assistant: {exc}") from exc
    if configured is None:
        return agent, request
    return agent, with_assistant(request, configured)


def with_assistant(request: RunRequest, assistant: AssistantVersion) -> RunRequest:
    """The run's config and context over its assistant's, as LangGraph's server merges
    them: tags added, metadata and ``configurable`` merged key by key, the run's
    ``recursion_limit`` and ``run_name`` before the assistant's."""
    given, base = request.config, assistant.config
    config = {**base, **given}
    config["tags"] = [*base.get("tags", ()), *given.get("tags", ())]
    for key in ("metadata", "configurable"):
        config[key] = {**base.get(key, {}), **given.get(key, {})}
    context = {**assistant.context, **(request.context or {})}
    return replace(
        request,
        config={k: v for k, v in config.items() if v not in ([], {})},
        context=context or None,
    )


async def start_run(
    tenant: Tenant,
    thread_id: str | None,
    request: RunRequest,
    run_id: str | None = None,
    temporary_thread: str | None = None,
) -> RunRecord:
    """Start a run of the thread (None: a stateless run) and record it. A stateless run
    with ``on_completion="keep"`` runs on a new thread that stays; otherwise on none
    (``temporary_thread``: the id clients see it under, when it was chosen before).
    ``run_id``: the run's id when the caller chose it (a cron's tick, a delayed run),
    else a new one. With ``after_seconds`` the run is checked and recorded now and
    started later (``delayed_runs``)."""
    if request.webhook:
        await webhooks.policy().check(request.webhook)  # refused before anything runs
    agent, request = await run_agent(tenant, request)
    thread_id, temporary_thread = await _run_thread(
        tenant, thread_id, request, agent, temporary_thread
    )
    if request.command is not None:
        if thread_id is None or "resume" not in request.command:
            raise BadRequest("command takes resume, on a thread's run")
        if request.after_seconds:
            raise BadRequest("after_seconds with command: not implemented (a resume starts now)")
        return await _resume(tenant, thread_id, request)
    if request.input is None:
        raise BadRequest("a run needs input (or command.resume)")
    run_id = run_id or uuid.uuid4().hex
    if request.after_seconds > 0:
        return await _later(tenant, thread_id, request, agent, run_id, temporary_thread or "")
    # with the loop's ids, so a run's stream knows where its inputs end in the thread
    messages = with_input_ids(run_id, input_messages(request.input))
    busy_matters = thread_id is not None and request.multitask_strategy == "reject"
    if busy_matters and await thread_busy(tenant, str(thread_id), besides=run_id):
        raise Busy(Busy.DETAIL)
    config = _run_config(request)
    input_ids = [str(m.id) for m in messages]
    record = _new_record(request, agent, run_id, thread_id, temporary_thread or "", input_ids)
    try:
        await tenant.client.submit(
            agent.ref,
            messages,
            task_id=run_id,
            recursion_limit=config.recursion_limit,
            overrides={"context": request.context} if request.context else None,
            thread_id=thread_id,
            multitask_strategy=request.multitask_strategy,
            run_name=config.run_name,
            tags=config.tags,
            metadata={**config.metadata, **request.metadata},
            stream_ttl_s=tenant.settings.stream_ttl_s,  # any stream of it may ask for tokens
            along=lambda pipe: _record_run(tenant, pipe, record, request),  # one round trip
        )
    except ValueError as exc:  # over the event size limit
        raise BadRequest(str(exc)) from exc
    return record


async def _run_thread(
    tenant: Tenant,
    thread_id: str | None,
    request: RunRequest,
    agent: DeployedAgent,
    temporary_thread: str | None,
) -> tuple[str | None, str | None]:
    """The run's thread (made when ``if_not_exists`` or ``on_completion="keep"`` says
    so), or for a run of none the id clients see it under."""
    if thread_id is None and request.on_completion == "keep":
        thread_id = str(uuid.uuid4())
        await tenant.records.save_thread(ThreadRecord(thread_id=thread_id))
        await set_thread_ttl(tenant, thread_id, None, created=True)
    elif thread_id is None:
        temporary_thread = temporary_thread or str(uuid.uuid4())
    if thread_id is not None:
        await _thread_for_run(tenant, thread_id, request, agent)
    return thread_id, temporary_thread


def _run_config(request: RunRequest) -> RunConfig:
    try:
        return RunConfig.of(request.config)
    except ValueError as exc:
        raise BadRequest(f"config: {exc}") from exc


def _new_record(
    request: RunRequest,
    agent: DeployedAgent,
    run_id: str,
    thread_id: str | None,
    temporary_thread: str,
    input_ids: list[str] | None = None,
) -> RunRecord:
    """The gateway's record of a run it is about to start (or to start later)."""
    return RunRecord(
        run_id=run_id,
        task_id=run_id,
        thread_id=thread_id or "",
        assistant_id=request.assistant_id,
        multitask_strategy=request.multitask_strategy,
        stream_mode=request.stream_mode,
        metadata=request.metadata,
        kwargs=jsonable(request.kwargs),
        agent_ref=agent.ref,
        temporary_thread=temporary_thread,
        input_ids=input_ids or [],
    )


async def _later(
    tenant: Tenant,
    thread_id: str | None,
    request: RunRequest,
    agent: DeployedAgent,
    run_id: str,
    temporary_thread: str,
) -> RunRecord:
    """A run checked now (its config) and started ``after_seconds`` later."""
    _run_config(request)
    record = _new_record(request, agent, run_id, thread_id, temporary_thread)
    await delayed_runs.schedule(tenant, record, request, request.after_seconds, temporary_thread)
    return record


async def start_delayed(tenant: Tenant, run_id: str, start: dict[str, Any]) -> RunRecord:
    """Start a delayed run now, from what ``delayed_runs.schedule`` kept."""
    request = RunRequest(**{**start["request"], "after_seconds": 0.0})
    return await start_run(
        tenant,
        start["thread_id"],
        request,
        run_id=run_id,
        temporary_thread=start["temporary_thread"] or None,
    )


def _record_run(tenant: Tenant, pipe: Any, record: RunRecord, request: RunRequest) -> None:
    tenant.records.queue_run(pipe, record)
    if tenant.thread_saver is not None and record.thread_id:
        saver_recorder.queue_run(pipe, tenant, record.task_id)
    if request.webhook:
        names, keep_s = tenant.names, tenant.settings.retention_s
        webhooks.queue_webhook(pipe, names, record.run_id, request.webhook, keep_s)


async def _thread_for_run(
    tenant: Tenant, thread_id: str, request: RunRequest, agent: DeployedAgent
) -> None:
    """The run's thread, made if ``if_not_exists`` says so, its metadata naming the
    graph and assistant that run on it, as LangGraph's server writes them (clients such
    as agent-chat-ui list an assistant's threads by them). A thread whose working copy
    left Redis is taken back in from the deployment's record of it first."""
    await tenant.restore_thread(thread_id)
    record = await tenant.records.thread(thread_id)
    if record is None:  # a thread of a client of the bus, or none yet
        info = await tenant.threads.info(thread_id)
        if info is None and request.if_not_exists != "create":
            raise NotFound(f"Thread {thread_id} not found")
        record = ThreadRecord(thread_id=thread_id)
        record.created_at = info.created if info and info.created else record.created_at
        if info is None:  # created by this run: the operator's default TTL applies
            await set_thread_ttl(tenant, thread_id, None, created=True)
    ran = {"graph_id": agent.name, "assistant_id": request.assistant_id}
    if any(record.metadata.get(k) != v for k, v in ran.items()):
        record.metadata = {**record.metadata, **ran}
        await tenant.records.save_thread(record)
    else:
        await tenant.records.touch_thread(thread_id)


async def _resume(tenant: Tenant, thread_id: str, request: RunRequest) -> RunRecord:
    """``command.resume``: the thread's waiting run gets the decisions; the new run is
    the rest of that task."""
    assert request.command is not None
    state = await tenant.threads.current(thread_id)
    waits = await waiting_interrupts(tenant.client, state)
    if not waits:
        raise BadRequest(f"thread {thread_id} has no interrupt waiting for a resume")
    try:
        answers = answers_of(request.command["resume"], [str(w.interrupt.id) for w in waits])
    except (ValueError, RuntimeError) as exc:
        raise BadRequest(str(exc)) from exc
    task_id = state.run_id
    log_after = await tenant.client.last_entry(task_id)
    chunks: Any = await tenant.redis.xrevrange(tenant.names.task_chunks(task_id), count=1)
    record = RunRecord(
        run_id=uuid.uuid4().hex,
        task_id=task_id,
        thread_id=thread_id,
        assistant_id=request.assistant_id,
        multitask_strategy=request.multitask_strategy,
        stream_mode=request.stream_mode,
        metadata=request.metadata,
        kwargs=jsonable(request.kwargs),
        log_after=log_after,
        chunks_after=chunks[0][0].decode() if chunks else "0",
        base_len=len(state.messages),
        answered=list(answers),
    )
    await _end_answered_runs(tenant, thread_id, task_id)
    async with tenant.redis.pipeline(transaction=False) as pipe:
        _record_run(tenant, pipe, record, request)
        await pipe.execute()
    await tenant.client.stream_replies(task_id, tenant.settings.stream_ttl_s)
    try:
        await tenant.client.answer(task_id, answers)
    except ValueError as exc:
        raise BadRequest(str(exc)) from exc
    return record


async def _end_answered_runs(tenant: Tenant, thread_id: str, task_id: str) -> None:
    """The runs of the task that stopped at the interrupt now answered stay ``success``
    (the task they ran goes on in the new run)."""
    for run_id in await tenant.records.run_ids(thread_id, 0, 100):
        earlier = await tenant.records.run(run_id)
        if earlier is not None and earlier.task_id == task_id and not earlier.ended:
            earlier.ended = "success"
            await tenant.records.save_run(earlier)


async def run_record(tenant: Tenant, thread_id: str | None, run_id: str) -> RunRecord:
    record = await tenant.records.run(run_id)
    if record is None or thread_id not in (None, record.thread_id or record.temporary_thread):
        raise NotFound(f"Run {run_id} not found")
    return record


async def run_status(tenant: Tenant, record: RunRecord) -> str:
    """The run's LangGraph status (``NotFound`` for a run rolled back)."""
    if record.ended:
        return record.ended
    if record.thread_id:
        runs = (await tenant.threads.info(record.thread_id)) or None
        on_thread = runs.runs.get(record.task_id, "") if runs else ""
        if on_thread == "rolled_back":
            raise NotFound(f"Run {record.run_id} not found (rolled back)")
        if on_thread == "rejected":
            return "error"
        if on_thread == "queued":
            return "pending"
    found: Any = await tenant.redis.hmget(
        tenant.names.task_state(record.task_id), "status", "phase", "cause", "stop"
    )
    status, phase, cause, stop = (text(v or "") for v in found)
    if status == "completed":
        return "success"
    if status == "failed":
        return "interrupted" if _stopped(cause, stop) else "error"
    if status == "running" and await _stopped_at_interrupt(tenant, record, phase):
        return "success"
    return "running" if status else "pending"


async def _stopped_at_interrupt(tenant: Tenant, record: RunRecord, phase: str) -> bool:
    """The task waits for a human, asked after this run began (a run that answered the
    previous interrupt is running until the task moves on)."""
    if phase != "approval" and not await tenant.client.waiting_calls(record.task_id):
        return False
    last = await tenant.client.last_entry(record.task_id)
    return _entry_key(last) > _entry_key(record.log_after)


def _entry_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms or 0), int(seq or 0)


async def wait_for(tenant: Tenant, record: RunRecord) -> dict[str, Any]:
    """Wait until the run ends (or stops at an interrupt) and return what LangGraph's
    ``/wait`` and ``/join`` return: the state's values (with ``__interrupt__`` when a
    human is asked), or ``{"__error__": ...}`` for a run that failed. A delayed run
    cancelled before it started: the thread's values as they are."""
    if not await delayed_runs.until_started(tenant, record.run_id):
        state = await tenant.threads.current(record.thread_id) if record.thread_id else None
        return await state_values(tenant, state) if state is not None and state.run_id else {}
    _, outcome = await tenant.client.outcome(record.task_id, after=record.log_after)
    if isinstance(outcome, TaskFailed) and not await was_stopped(tenant, record.task_id):
        return {"__error__": run_error(outcome)}
    return await final_values(tenant, record, outcome)


async def was_stopped(tenant: Tenant, task_id: str) -> bool:
    """The task was cancelled or stopped by a newer run of its thread (LangGraph's
    ``interrupted``), rather than failed."""
    found: Any = await tenant.redis.hmget(tenant.names.task_state(task_id), "cause", "stop")
    return _stopped(*(text(v or "") for v in found))


def _stopped(cause: str, stop: str) -> bool:
    """Cancelled, stopped at once by a newer run, or stopped by one at a step boundary
    (the state keeps the stop it was asked for; ``lua/stop_run.lua``)."""
    return cause in STOPPED_CAUSES or bool(stop)


async def final_values(
    tenant: Tenant,
    record: RunRecord,
    outcome: TaskCompleted | TaskFailed | ApprovalRequested | None = None,
) -> dict[str, Any]:
    state = await tenant.threads.of_run(record.thread_id, record.task_id)
    values = await state_values(tenant, state)
    if isinstance(outcome, ApprovalRequested):
        waits = await waiting_interrupts(tenant.client, state)
        values["__interrupt__"] = jsonable([w.interrupt for w in waits])  # as in streams
    return values


async def state_values(tenant: Tenant, state: ThreadValues) -> dict[str, Any]:
    """A state's values as LangGraph's API shows them (messages as JSON)."""
    spec = await tenant.spec_of_task(state.run_id) if state.run_id else None
    if spec is None:
        messages = [*state.messages, *state.written.messages]
        values: dict[str, Any] = {"messages": [to_langchain(m) for m in messages]}
        if state.todos is not None:
            values["todos"] = state.todos
    else:
        values = snapshot_values(spec, state)
    return dict(jsonable(values))


async def cancel_run(tenant: Tenant, record: RunRecord, *, rollback: bool = False) -> None:
    """Cancel the run: a delayed one that has not started never does (``interrupted``,
    as LangGraph's server shows a cancelled pending run). With ``rollback`` as
    LangGraph's server does it: the run is gone at once (404) and, once it stops, the
    thread is as before it (the loop writes nothing of it back)."""
    if await delayed_runs.forget(tenant, record.run_id):
        if rollback:
            await tenant.records.delete_run(record)
        else:
            record.ended = "interrupted"
            await tenant.records.save_run(record)
        return
    await tenant.client.cancel(
        record.task_id,
        "cancelled by request",
        thread_id=record.thread_id or None,
        rollback=rollback,
    )
    if rollback:
        await tenant.records.delete_run(record)

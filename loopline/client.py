"""Talking to a loopline deployment from outside: submit tasks, read a task's log, follow
the public streams. Plain Redis commands on the documented wire format."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis.asyncio as aioredis

from contracts.agent import AgentSpec, DeployedAgent, RunMode
from contracts.chunks import BLOCKS, SUBTASKS, ChunkBatch
from contracts.events import (
    MULTITASK_STRATEGIES,
    AnyEvent,
    ApprovalRequested,
    CancelRequested,
    DeadLettered,
    DecisionsRefused,
    DecisionsSubmitted,
    TaskCompleted,
    TaskFailed,
    TaskSubmitted,
    ToolCompleted,
    ToolInterrupted,
    parse_event,
)
from contracts.messages import MESSAGE_ADAPTER, Message
from contracts.streams import DATA_FIELD, Names
from loopline.errors import TaskFailedError as TaskFailedError  # re-exported
from loopline.threads import DEPLOYMENT, ThreadReader, ThreadSpace
from services import deployed
from services.redisconn import async_client
from services.settings import Settings
from services.tasks.threads import transcript

if TYPE_CHECKING:
    from services.tasks.store import StepWritten

TERMINAL = (TaskCompleted, TaskFailed)
log = logging.getLogger("loopline.client")


async def read_stream(
    redis: aioredis.Redis, key: str, after: str, *, block_ms: int | None, count: int = 500
) -> list[tuple[str, bytes]]:
    """Entries of one stream after ``after`` as (entry id, event JSON). A lost connection
    (Redis restarting) is retried from the same id: no gap, no duplicate."""
    for attempt in range(120):
        try:
            reply: Any = await redis.xread({key: after}, count=count, block=block_ms)
            break
        except (aioredis.ConnectionError, aioredis.TimeoutError):
            if attempt == 119:
                raise
            await asyncio.sleep(0.5)
    if not reply:
        return []
    data_key = DATA_FIELD.encode()
    return [(entry_id.decode(), fields.get(data_key, b"")) for entry_id, fields in reply[0][1]]


def chunk_batch(raw: bytes, entry_id: str) -> ChunkBatch | None:
    """A chunk-stream entry, or None (logged) when it is not a ChunkBatch: the chunks are
    a preview of a reply the log keeps whole, so a reader goes on without it."""
    try:
        return ChunkBatch.model_validate_json(raw)
    except ValueError as exc:
        first = str(exc).splitlines()[0]
        log.warning("chunk stream entry %s skipped: not a chunk batch (%s)", entry_id, first)
        return None


LOST_STATE = (
    "the task's state was lost: Redis restarted without persistence (or failed over and "
    "lost writes), and the task with it; submit it again"
)
LOST_CHECK_S = 2.0
"""How often a client waiting on a quiet task checks that its state still exists."""


class LostTaskWatch:
    """Tells a client that waits on a task whose state Redis lost: the server restarted
    (its run id changed) or the log it was reading is gone, and the task's state with it.
    Nothing would ever be logged for such a task, so without this its client waits
    forever."""

    def __init__(self, client: Client, task_id: str) -> None:
        self.client = client
        self.task_id = task_id
        self.seen = False
        self._next = 0.0
        self._began: asyncio.Future[str] | None = None  # the server's run id at begin

    async def begin(self) -> None:
        """Note the server's run id, read beside the caller's first reads (no round trip
        before them: only ``lost``, seconds later, needs it)."""
        self._began = asyncio.ensure_future(self._run_id())
        self._began.add_done_callback(_retrieved)
        self._next = asyncio.get_running_loop().time() + LOST_CHECK_S

    async def lost(self) -> TaskFailed | None:
        now = asyncio.get_running_loop().time()
        if now < self._next:
            return None
        self._next = now + LOST_CHECK_S
        names, redis = self.client.names, self.client.redis
        if await redis.exists(names.task_state(self.task_id), names.task_log(self.task_id)):
            return None
        began = await self._began if self._began is not None else ""
        if not self.seen and await self._run_id() == began:
            return None  # not started yet (queued): its log appears when it starts
        return TaskFailed(task_id=self.task_id, step=0, reason=LOST_STATE)

    async def _run_id(self) -> str:
        try:
            info: Any = await self.client.redis.info("server")
        except aioredis.ResponseError:  # INFO not allowed for this user
            return ""
        return str(info.get("run_id", ""))


def _retrieved(future: asyncio.Future[Any]) -> None:
    """Marks a future's failure seen (it is raised again where the future is awaited)."""
    if not future.cancelled():
        future.exception()


def _spec_of(agent: Any) -> tuple[AgentSpec, int | None]:
    """The spec and step limit of what ``Client.deploy`` was given."""
    if isinstance(agent, AgentSpec):
        return agent, None
    if isinstance(agent, str | Path):
        from loopline.agentfile import load_agent_file

        return load_agent_file(agent)
    spec = getattr(agent, "spec", None)
    if isinstance(spec, AgentSpec):  # an Agent from create_agent
        return spec, getattr(agent, "max_steps", None)
    raise TypeError(f"cannot deploy {agent!r}: give an AgentSpec, an Agent or an agent file")


PRUNE_EVERY_S = 1.0
"""How often a client drops the lapsed requests from ``Names.stream_requested``."""


class Client:
    def __init__(
        self,
        url: str,
        prefix: str = "loopline",
        max_event_bytes: int | None = None,
        *,
        space: ThreadSpace = DEPLOYMENT,
    ) -> None:
        self.url = url
        self.names = Names(prefix)
        self.space = space
        """The threads this client's ``thread_id``s name (``loopline.threads.space_of``:
        an agent's checkpointer decides it); the deployment's by default."""
        self.redis: aioredis.Redis = async_client(url)  # a server or a Redis Cluster
        self._max_event_bytes = max_event_bytes
        """The settings' ``max_event_bytes`` (read at the first submit when not given)."""
        self._pruned_at = 0.0  # when this client last dropped lapsed stream requests
        self._partitions_read = False

    async def _adopt_partitions(self) -> None:
        """Once, before the first submission: take the number of partitions the
        deployment's services recorded (``LOOPLINE_PARTITIONS``) where this process was
        told another, so its tasks go where the services look for them and their keys
        are read where the services write them."""
        if self._partitions_read:
            return
        self._partitions_read = True
        try:
            recorded = await self.redis.get(self.names.partitions_key)
        except aioredis.ResponseError:  # a user that may not read it: the settings' number
            return
        if recorded is not None and int(recorded) != self.names.partitions:
            self.names = Names(self.names.prefix, int(recorded))

    async def close(self) -> None:
        await self.redis.aclose()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- deployed agents (the operator's) --

    async def deploy(
        self,
        agent: AgentSpec | Any,
        *,
        name: str | None = None,
        overridable: Sequence[str] | None = None,
        max_steps: int | None = None,
        check_here: bool = True,
    ) -> DeployedAgent:
        """Register an agent (an ``AgentSpec``, an ``Agent`` from ``create_agent``, or an
        agent file's path) under ``name`` (default: the spec's name), checked in full
        first (``check_here=False``: only what needs no code; the services check the rest
        when its tasks start, ``deployed.registration``). An unchanged registration keeps
        its version; a changed one is the next.
        ``overridable``: what a task may override (default: ``OVERRIDABLE``). A Redis
        user that may not write the registry gets ``RegistryDenied``."""
        spec, steps = _spec_of(agent)
        found = deployed.registration(
            spec,
            name=name,
            overridable=overridable,
            max_steps=max_steps if max_steps is not None else steps,
            check_here=check_here,
        )
        stored, _ = await deployed.deploy(self.redis, self.names, found)
        return stored

    async def list_agents(self, *, all_versions: bool = False) -> list[DeployedAgent]:
        """The deployed agents (their latest versions, or every version)."""
        if all_versions:
            return await deployed.all_versions(self.redis, self.names)
        return await deployed.latest_versions(self.redis, self.names)

    async def get_agent(self, ref: str) -> DeployedAgent:
        """``NAME`` (the latest version) or ``NAME@VERSION``; ``NotDeployed`` if none."""
        found = await deployed.lookup(self.redis, self.names, ref)
        if found is None:
            raise deployed.NotDeployed(f"no deployed agent {ref!r} (see `loopline agents list`)")
        return found

    async def remove_agent(self, ref: str) -> list[int]:
        """Remove ``NAME`` (every version) or ``NAME@VERSION``; the versions removed.
        Tasks already running go on; new tasks naming it are refused."""
        return await deployed.remove(self.redis, self.names, ref)

    # -- tasks --

    async def submit(
        self,
        agent: AgentSpec | str,
        messages: Sequence[Message],
        *,
        task_id: str | None = None,
        max_steps: int | None = None,
        deadline_s: float | None = None,
        overrides: Mapping[str, Any] | None = None,
        thread_id: str | None = None,
        multitask_strategy: str = "reject",
        run_name: str | None = None,
        tags: Sequence[str] = (),
        metadata: Mapping[str, Any] | None = None,
        state: Mapping[str, Any] | None = None,
        run_mode: RunMode | None = None,
        stream_ttl_s: int | None = None,
        recursion_limit: int | None = None,
        along: Callable[[Any], object] | None = None,
        stream_blocks: bool = False,
        stream_subtasks: bool = False,
    ) -> str:
        """Submit a task and return its id. ``agent``: a deployed agent's ``NAME`` or
        ``NAME@VERSION`` (with ``overrides`` its registration allows), or an inline spec
        (run only where the services allow inline agents). ``thread_id``: a run of that
        thread, continuing its state; ``multitask_strategy``: what happens if the thread
        has a run going (see ``TaskSubmitted``); ``state``: the input's state keys
        besides the messages (those of the agent's input schema start its state);
        ``stream_ttl_s``: also ask for its token stream (``stream_replies``), in the same
        round trip (``stream_blocks``: its content-block events; ``stream_subtasks``: the
        agents its tool calls run too, as ``stream_replies``); ``recursion_limit``:
        LangChain's, the task's step limit derived from it;
        ``along``: queues more commands on the submission's pipeline (sent before the task,
        in the same round trip, only once the task passed its checks)."""
        await self._adopt_partitions()
        fields: dict[str, Any] = {"agent": agent, "messages": list(messages)}
        if state:
            fields["state"] = dict(state)
        if overrides:
            fields["overrides"] = dict(overrides)
        if task_id:
            fields["task_id"] = task_id
        if multitask_strategy not in MULTITASK_STRATEGIES:
            raise ValueError(
                f"multitask_strategy must be one of {', '.join(MULTITASK_STRATEGIES)}, "
                f"not {multitask_strategy!r}"
            )
        event = TaskSubmitted(
            max_steps=max_steps,
            deadline_s=deadline_s,
            thread_id=None if thread_id is None else self.space.key(thread_id),
            multitask_strategy=multitask_strategy,
            run_name=run_name,
            tags=list(tags),
            metadata=dict(metadata or {}),
            run_mode=run_mode,
            recursion_limit=recursion_limit,
            **fields,
        )
        data = event.model_dump_json()
        if self._max_event_bytes is None:  # reading the settings costs milliseconds
            self._max_event_bytes = Settings().max_event_bytes
        limit = self._max_event_bytes
        if len(data) > limit:
            raise ValueError(
                f"the task is {len(data)} bytes, over the event limit of {limit} bytes "
                "(LOOPLINE_MAX_EVENT_BYTES)"
            )
        if stream_ttl_s is None and along is None:
            await self.redis.xadd(self.names.work("tasks", event.task_id), {DATA_FIELD: data})
            return event.task_id
        async with self.redis.pipeline(transaction=False) as pipe:  # one round trip
            if along is not None:
                along(pipe)
            if stream_ttl_s is not None:
                self._ask_streaming(
                    pipe,
                    event.task_id,
                    stream_ttl_s,
                    blocks=stream_blocks,
                    subtasks=stream_subtasks,
                )
            pipe.xadd(self.names.work("tasks", event.task_id), {DATA_FIELD: data})
            await pipe.execute()
        return event.task_id

    async def cancel(
        self,
        task_id: str,
        reason: str = "cancelled by request",
        *,
        thread_id: str | None = None,
        rollback: bool = False,
    ) -> None:
        """Stop a running task; with ``thread_id``, also a run still queued for its thread,
        and with ``rollback`` nothing of the run is written back to the thread."""
        key = None if thread_id is None else self.space.key(thread_id)
        event = CancelRequested(task_id=task_id, reason=reason, thread_id=key, rollback=rollback)
        await self.redis.xadd(
            self.names.work("tasks", task_id), {DATA_FIELD: event.model_dump_json()}
        )

    async def decide(
        self,
        task_id: str,
        decisions: Sequence[dict[str, Any]] | Mapping[str, Any],
    ) -> list[str]:
        """Answer a task waiting for approval, with LangChain's decision shapes.

        Batched mode (``HITLRequest``): a list, one decision per gated call, in order.
        ``interrupt_mode="per_call"`` (one ``ToolApprovalRequest`` per call): a mapping
        ``{tool_call_id: decision}`` (as LangChain resumes per-call interrupts by id), a
        list of decisions that each carry ``"tool_call_id"``, or one decision (or a list of
        one) for the one call that waits. Returns the ids of the calls answered (per-call
        mode; empty in batched mode)."""
        if isinstance(decisions, Mapping):
            if "type" in decisions:  # one decision
                wire = [dict(decisions)]
            else:
                wire = [{**dict(d), "tool_call_id": k} for k, d in decisions.items()]
        else:
            wire = [dict(d) for d in decisions]
        open_calls = await self.waiting_calls(task_id)
        if open_calls:
            open_ids = [r.call_id for r in open_calls]
            unnamed = [d for d in wire if "tool_call_id" not in d]
            if unnamed and len(open_ids) != 1:
                raise ValueError(
                    f"task {task_id} has {len(open_ids)} calls waiting for a decision "
                    f"({', '.join(open_ids)}): name the call (tool_call_id)"
                )
            for d in unnamed:
                d["tool_call_id"] = open_ids[0]
            unknown = [d["tool_call_id"] for d in wire if d["tool_call_id"] not in open_ids]
            if unknown:
                raise ValueError(
                    f"task {task_id}: no call {unknown[0]!r} waits for a decision "
                    f"(waiting: {', '.join(open_ids)})"
                )
        event = DecisionsSubmitted(task_id=task_id, decisions=wire)
        await self.redis.xadd(
            self.names.work("tasks", task_id), {DATA_FIELD: event.model_dump_json()}
        )
        return [str(d["tool_call_id"]) for d in wire if "tool_call_id" in d]

    async def answer(self, task_id: str, answers: Mapping[str, Any]) -> list[str]:
        """Answer a task's waiting interrupts by id (``ApprovalRequested.interrupt_id``),
        as LangGraph's ``Command(resume={interrupt_id: value})``: each ``interrupt()``
        returns its value. Returns the ids of the tool calls answered (calls that wait
        one by one; empty for a hook's interrupt)."""
        if not answers:
            raise ValueError("answer needs at least one interrupt id and its value")
        open_calls = await self.waiting_calls(task_id)
        by_interrupt = {r.interrupt_id: r.call_id for r in open_calls}
        event = DecisionsSubmitted(task_id=task_id, answers=dict(answers))
        await self.redis.xadd(
            self.names.work("tasks", task_id), {DATA_FIELD: event.model_dump_json()}
        )
        return [by_interrupt[i] for i in answers if i in by_interrupt]

    async def waiting_calls(self, task_id: str) -> list[ApprovalRequested]:
        """The open per-call approval requests of a task (``interrupt_mode="per_call"``):
        one per gated call of the current step that has no decision yet, oldest first.
        Each ``request`` is LangChain's ToolApprovalRequest (``tool_call_id``, ``name``,
        ``args``, ``description``)."""
        from services.tasks.store import waiting_calls

        step, calls = await waiting_calls(self.redis, self.names, task_id)
        found = []
        for call in calls:
            if call.decision is not None:
                continue
            parked = parse_event(call.interrupted)
            if isinstance(parked, ToolInterrupted):
                found.append(
                    ApprovalRequested(
                        task_id=task_id,
                        step=step,
                        request=parked.request,
                        at=parked.at,
                        interrupt_id=call.interrupt_id,
                        node="tools",
                        response_schema=parked.response_schema,
                    )
                )
        return found

    async def step_settled(self, task_id: str, timeout: float = 60.0) -> None:
        """Wait until every call of the task's current step has its result or waits for
        an answer to its interrupt: LangGraph returns an interrupt once its superstep's
        other tasks ran too, with all the interrupts they raised."""
        from services.tasks.store import waiting_calls

        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            found: Any = await self.redis.hmget(self.names.task_state(task_id), "phase", "expected")
            phase, expected = found
            if (phase or b"").decode() != "tools":
                return
            done: Any = await self.redis.hkeys(self.names.task_results(task_id))
            _, waits = await waiting_calls(self.redis, self.names, task_id)
            settled = {k.decode() for k in done} | {w.call_id for w in waits}
            if set(json.loads(expected or b"[]")) <= settled:
                return
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"task {task_id}: the step's calls did not settle")
            await asyncio.sleep(0.02)

    async def outcome_of_decisions(
        self, task_id: str, call_ids: Sequence[str], *, after: str = "0"
    ) -> tuple[str, TaskCompleted | TaskFailed | ApprovalRequested | ToolInterrupted]:
        """What answering per-call approvals led to: like ``outcome``, and also a decision
        that did not fit its call (``ToolInterrupted`` with ``error``; the call still
        waits), or, once every answered call has its result while other calls of the step
        still wait, the first of those (the task cannot go on without them)."""
        pending = set(call_ids)
        async for entry_id, event in self.events(task_id, after=after):
            if isinstance(event, TaskCompleted | TaskFailed | ApprovalRequested):
                return entry_id, event
            if isinstance(event, ToolInterrupted) and event.error and event.call.id in pending:
                return entry_id, event
            if isinstance(event, ToolCompleted) and event.message.tool_call_id in pending:
                pending.discard(event.message.tool_call_id)
                if not pending:
                    still = await self.waiting_calls(task_id)
                    if still:
                        return entry_id, still[0]
        raise RuntimeError("task log ended without an outcome")  # pragma: no cover

    async def waiting(self, task_id: str) -> ApprovalRequested | None:
        """The open approval request of a task, if it is waiting for one (per-call mode:
        the oldest call without a decision; ``waiting_calls`` lists them all)."""
        state: Any = await self.redis.hmget(self.names.task_state(task_id), "phase", "step")
        if (state[0] or b"").decode() == "tools":
            open_calls = await self.waiting_calls(task_id)
            return open_calls[0] if open_calls else None
        if (state[0] or b"").decode() != "approval":
            return None
        step = int(state[1] or 0)
        last = None
        async for _, event in self.events(task_id, follow=False):
            if isinstance(event, ApprovalRequested) and event.step == step:
                last = event
        return last

    async def pending_approvals(self) -> list[ApprovalRequested]:
        """Every task that waits for a human now, oldest first."""
        found: dict[str, ApprovalRequested] = {}
        async for _, event in self.subscribe("approvals", from_start=True, follow=False):
            if isinstance(event, ApprovalRequested):
                found[event.task_id] = event
        waiting = []
        for task_id, event in found.items():
            if event.per_call:  # per call: every open one
                waiting.extend(await self.waiting_calls(task_id))
                continue
            open_request = await self.waiting(task_id)
            if open_request is not None:
                waiting.append(open_request)
        return waiting

    async def outcome(
        self, task_id: str, *, after: str = "0"
    ) -> tuple[str, TaskCompleted | TaskFailed | ApprovalRequested]:
        """Follow the log from ``after`` until the task ends or asks for approval."""
        async for entry_id, event in self.events(task_id, after=after):
            if isinstance(event, TaskCompleted | TaskFailed | ApprovalRequested):
                return entry_id, event
        raise RuntimeError("task log ended without an outcome")  # pragma: no cover

    async def outcome_of_answer(
        self, task_id: str, *, after: str
    ) -> tuple[str, TaskCompleted | TaskFailed | ApprovalRequested | DecisionsRefused]:
        """What answering the task's interrupt (just before log entry ``after``) led to:
        like ``outcome``, or the answer refused by the node that asked."""
        async for entry_id, event in self.events(task_id, after=after):
            if isinstance(event, TaskCompleted | TaskFailed | ApprovalRequested):
                return entry_id, event
            if isinstance(event, DecisionsRefused):
                return entry_id, event
        raise RuntimeError("task log ended without an outcome")  # pragma: no cover

    async def last_entry(self, task_id: str) -> str:
        entries: Any = await self.redis.xrevrange(self.names.task_log(task_id), count=1)
        return entries[0][0].decode() if entries else "0"

    async def last_chunk(self, task_id: str) -> str:
        """The last entry of the task's chunk stream ("0": none)."""
        entries: Any = await self.redis.xrevrange(self.names.task_chunks(task_id), count=1)
        return entries[0][0].decode() if entries else "0"

    async def status(self, task_id: str) -> str | None:
        """running, completed, failed, or None for a task that does not exist (anymore)."""
        value: Any = await self.redis.hget(self.names.task_state(task_id), "status")
        return value.decode() if isinstance(value, bytes) else value

    # -- threads --

    def threads(self) -> ThreadReader:
        """Read, list and remove threads (``loopline.threads``)."""
        return ThreadReader(self.redis, self.names, self.space)

    # -- dead letters --

    async def dead_letters(self, count: int = 100) -> list[tuple[str, DeadLettered]]:
        entries: Any = await self.redis.xrange(self.names.dlq, count=count)
        out = []
        for entry_id, fields in entries:
            event = parse_event(fields[DATA_FIELD.encode()])
            if isinstance(event, DeadLettered):
                out.append((entry_id.decode(), event))
        return out

    async def dead_letter(self, entry_id: str) -> DeadLettered:
        entries: Any = await self.redis.xrange(self.names.dlq, entry_id, entry_id)
        if not entries:
            raise KeyError(entry_id)
        event = parse_event(entries[0][1][DATA_FIELD.encode()])
        assert isinstance(event, DeadLettered)
        return event

    async def replay(self, entry_id: str) -> str:
        """Put a dead letter back on its original stream (after a fix) and remove it."""
        letter = await self.dead_letter(entry_id)
        new_id: Any = await self.redis.xadd(letter.stream, {DATA_FIELD: letter.payload})
        await self.redis.xdel(self.names.dlq, entry_id)
        return new_id.decode() if isinstance(new_id, bytes) else str(new_id)

    async def drop(self, entry_id: str) -> bool:
        return int(await self.redis.xdel(self.names.dlq, entry_id)) == 1

    async def events(
        self, task_id: str, *, after: str = "0", follow: bool = True, block_ms: int = 1000
    ) -> AsyncIterator[tuple[str, AnyEvent]]:
        """The task's log from entry ``after`` on, as (entry id, event). Resume after a
        disconnect by passing the last entry id seen: no gaps, no duplicates. With
        ``follow`` it waits for new events and ends after the task's terminal event."""
        watch = LostTaskWatch(self, task_id)
        await watch.begin()
        async for entry_id, event in self._follow(
            self.names.task_log(task_id), after, follow=follow, block_ms=block_ms, idle=watch
        ):
            yield entry_id, event
            if follow and isinstance(event, TERMINAL):
                return

    async def wait(self, task_id: str) -> TaskCompleted:
        """The task's completion; ``TaskFailedError`` (with the ``TaskFailed`` event)
        when it failed (``Agent.invoke`` raises the original exception instead)."""
        async for _, event in self.events(task_id):
            if isinstance(event, TaskFailed):
                raise TaskFailedError(event)
            if isinstance(event, TaskCompleted):
                return event
        raise RuntimeError("task log ended without a terminal event")  # pragma: no cover

    async def messages(self, task_id: str) -> list[Message]:
        """The task's transcript (a run that ended on its thread reads it there)."""
        raw = await transcript(self.redis, self.names, task_id)
        return [MESSAGE_ADAPTER.validate_json(item) for item in raw]

    async def step_written(self, task_id: str) -> StepWritten:
        """What the current step's ended calls gave so far, in call order (they join the
        transcript and the state when the step ends; ``ThreadValues.written``)."""
        from services.tasks.store import step_written

        return await step_written(self.redis, self.names, task_id)

    async def state(self, task_id: str) -> dict[str, Any]:
        """The task's state keys besides its messages (the middleware's fields and
        ``structured_response``, as JSON)."""
        raw: Any = await self.redis.hget(self.names.task_state(task_id), "extra")
        return dict(json.loads(raw)) if raw else {}

    async def structured_response(self, task_id: str) -> tuple[bool, Any]:
        """Whether the task gave a structured response, and it (as JSON)."""
        state = await self.state(task_id)
        return "structured_response" in state, state.get("structured_response")

    async def todos(self, task_id: str) -> list[dict[str, Any]]:
        return await self.written_todos(task_id) or []

    async def written_todos(self, task_id: str) -> list[dict[str, Any]] | None:
        """The task's todo list, None while nothing wrote one (LangChain's state has
        no ``todos`` key until ``write_todos`` runs)."""
        raw = await self.redis.get(self.names.task_todos(task_id))
        return list(json.loads(raw)) if raw else None

    # -- token streaming (contracts.chunks) --

    async def stream_replies(
        self,
        task_id: str,
        ttl_s: int | None = None,
        *,
        blocks: bool = False,
        subtasks: bool = False,
    ) -> None:
        """Ask for the task's model replies as they are generated, on its chunk stream
        (``chunks``): call before submitting the task (a task nobody asked for is not
        streamed), or submit with ``stream_ttl_s``. ``ttl_s``: how long the request lasts
        unless chunks renew it. ``blocks``: LangChain's content-block protocol events
        instead of chunks (LangGraph's v3 streaming; the model then replies as under
        it, its content as content blocks). ``subtasks``: the agents its tool calls run
        stream too, and are noted on its chunk stream (a stream with subgraphs follows
        them)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            self._ask_streaming(pipe, task_id, ttl_s, blocks=blocks, subtasks=subtasks)
            await pipe.execute()

    def _ask_streaming(
        self,
        pipe: Any,
        task_id: str,
        ttl_s: int | None,
        *,
        blocks: bool = False,
        subtasks: bool = False,
    ) -> None:
        key = self.names.task_streaming(task_id)
        ttl = ttl_s or Settings().stream_ttl_s
        now = time.time()
        request = f"{task_id} {BLOCKS}" if blocks else task_id
        asked = {"asked": BLOCKS if blocks else "1", **({SUBTASKS: "1"} if subtasks else {})}
        pipe.hset(key, mapping=asked)
        pipe.expire(key, ttl)
        pipe.zadd(self.names.stream_requested, {request: now + ttl})
        if now - self._pruned_at >= PRUNE_EVERY_S:  # the set stays small, at no cost per run
            self._pruned_at = now
            pipe.zremrangebyscore(self.names.stream_requested, "-inf", now)
        # the model services learn of it at once, and need not ask Redis on every step
        pipe.publish(self.names.stream_requests, request)

    async def chunks(
        self, task_id: str, *, after: str = "0", follow: bool = True, block_ms: int = 1000
    ) -> AsyncIterator[tuple[str, ChunkBatch]]:
        """The task's chunk stream from entry ``after`` on, as (entry id, batch). Resume
        after a disconnect by passing the last entry id seen: no loss, no duplicate (for
        as long as the stream lives: ``LOOPLINE_STREAM_TTL_S``). With ``follow`` it waits
        for more until it is cancelled or the caller stops."""
        key = self.names.task_chunks(task_id)
        last = after
        while True:
            entries = await read_stream(
                self.redis, key, last, block_ms=block_ms if follow else None
            )
            if not entries and not follow:
                return
            for last, raw in entries:
                batch = chunk_batch(raw, last)
                if batch is not None:
                    yield last, batch

    async def feed(
        self, task_id: str, chunks_after: str, log_after: str, block_ms: int | None = 1000
    ) -> tuple[list[tuple[str, ChunkBatch]], list[tuple[str, AnyEvent]]]:
        """New entries of the task's chunk stream and log, read in one command (one
        snapshot: the chunks of a reply are all there when its ``ModelResponded`` is);
        ``block_ms=None``: what is there now, without waiting."""
        chunks_key, log_key = self.names.task_chunks(task_id), self.names.task_log(task_id)
        reply: Any = await self.redis.xread(
            {chunks_key: chunks_after, log_key: log_after}, block=block_ms
        )
        batches: list[tuple[str, ChunkBatch]] = []
        events: list[tuple[str, AnyEvent]] = []
        data_key = DATA_FIELD.encode()
        for key, entries in reply or []:
            name = key.decode() if isinstance(key, bytes) else key
            for entry_id, fields in entries:
                raw = fields.get(data_key, b"")
                if name == chunks_key:
                    batch = chunk_batch(raw, entry_id.decode())
                    if batch is not None:
                        batches.append((entry_id.decode(), batch))
                else:
                    events.append((entry_id.decode(), parse_event(raw)))
        return batches, events

    async def subscribe(
        self, stream: str, *, from_start: bool = False, follow: bool = True, block_ms: int = 1000
    ) -> AsyncIterator[tuple[str, AnyEvent]]:
        """A public stream (``todos``, ``edits``, ``approvals``, ``dlq``) as (entry id,
        event)."""
        key = {
            "todos": self.names.todos,
            "edits": self.names.edits,
            "dlq": self.names.dlq,
            "approvals": self.names.approvals,
        }[stream]
        last = "0" if from_start else "$"
        if last == "$":
            # Resolve "$" to a concrete id now, so events between calls are not skipped.
            info = await self.redis.xinfo_stream(key) if await self.redis.exists(key) else None
            last = info["last-generated-id"].decode() if info else "0"
        async for item in self._follow(key, last, follow=follow, block_ms=block_ms):
            yield item

    async def _follow(
        self,
        key: str,
        after: str,
        *,
        follow: bool,
        block_ms: int,
        idle: LostTaskWatch | None = None,
    ) -> AsyncIterator[tuple[str, AnyEvent]]:
        """A stream's events after ``after``; with ``follow``, waiting for more forever
        (``idle``: asked while nothing arrives whether the task's state was lost)."""
        last = after
        while True:
            entries = await read_stream(
                self.redis, key, last, block_ms=block_ms if follow else None
            )
            if not entries:
                if not follow:
                    return
                lost = await idle.lost() if idle is not None else None
                if lost is not None:
                    yield last, lost
                    return
                continue
            if idle is not None:
                idle.seen = True
            for last, raw in entries:
                yield last, parse_event(raw)

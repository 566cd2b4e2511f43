"""Reading a thread from outside: its state as LangGraph's ``StateSnapshot`` shows it, its
runs, the state each run left; listing, removing threads and replacing an idle thread's
values (``update_state``). Plain reads of the documented keys (``contracts.streams.Names``:
``thread:{ID}:*``); the services write them while runs go on.

A thread's state is the one its last run left, or, while a run is active, that run's own
state as it stands (the run's task keys): what LangGraph's checkpoints show between
supersteps. Earlier states are the ended runs' task keys, kept for the retention time (a
run's transcript, once it ended, read from the thread's: ``services.tasks.threads``); the
thread's checkpoints, one per superstep, are ``loopline.history``'s.

Where a thread lives is the checkpointer's choice, as in LangGraph (``space_of``): without
one, or with a saver that persists, the deployment's threads (a thread id names the same
thread everywhere); a saver that keeps its threads in its own process memory
(``InMemorySaver``) is a space of its own, so the same thread id under two such savers is
two threads. The space is internal: callers name threads by their own ids, and a reader
maps them to the bus's thread keys (``ThreadSpace.key``).
"""

from __future__ import annotations

import json
import time
import uuid
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis

from contracts.events import (
    ApprovalRequested,
    ModelResponded,
    TaskSubmitted,
    parse_event,
    rewritten,
)
from contracts.messages import MESSAGE_ADAPTER, Message
from contracts.streams import DATA_FIELD, SAVER_SPACE_MARK, Names
from services.tasks.store import StepWritten, step_written
from services.tasks.threads import HANDED, handed_or_own, stage_transcript

PERSISTENT_SAVER_MODULES = (
    "langgraph.checkpoint.postgres",
    "langgraph.checkpoint.sqlite",
    "langgraph.checkpoint.redis",
    "langgraph.checkpoint.mongodb",
    "langgraph.checkpoint.mysql",
)
"""LangGraph savers whose threads outlive the process (by the saver class's module): their
threads are the deployment's, shared by every process that reaches the same store."""


@dataclass(frozen=True)
class ThreadSpace:
    """A namespace of threads on the bus: ``name`` "" is the deployment's."""

    name: str = ""

    def key(self, thread_id: str) -> str:
        """The bus's thread key of the caller's ``thread_id`` (what ``TaskSubmitted``
        carries and the thread's Redis keys are named by)."""
        return f"{self.name}/{thread_id}" if self.name else thread_id

    def thread_id(self, key: str) -> str | None:
        """The caller's thread id of a bus key, None for a key of another space."""
        if not self.name:
            return key
        head, sep, rest = key.partition("/")
        return rest if sep and head == self.name else None


DEPLOYMENT = ThreadSpace()

_SPACES: weakref.WeakKeyDictionary[Any, ThreadSpace] = weakref.WeakKeyDictionary()
"""Each in-process saver's space, for as long as the saver lives."""


def space_of(checkpointer: Any) -> ThreadSpace:
    """Where the threads of an agent with this ``checkpointer`` live: the deployment's
    without one (``None``, or LangGraph's ``True``/``False`` flags) or with a persistent
    saver; an in-process saver (``InMemorySaver``, or any saver loopline does not know
    to persist) is its own space, shared by every agent given the same instance, as
    LangGraph shares a saver's threads between the graphs compiled with it."""
    if checkpointer is None or isinstance(checkpointer, bool):
        return DEPLOYMENT
    if type(checkpointer).__module__.startswith(PERSISTENT_SAVER_MODULES):
        return DEPLOYMENT
    found = _SPACES.get(checkpointer)
    if found is None:
        found = ThreadSpace(f"{SAVER_SPACE_MARK}{uuid.uuid4().hex}")
        _SPACES[checkpointer] = found
    return found


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")


@dataclass
class ThreadValues:
    """One state of a thread: what ``StateSnapshot.values`` holds, and where it came from."""

    thread_id: str
    run_id: str
    """The run whose state this is ("" for a thread with no run yet)."""
    messages: list[Message] = field(default_factory=list)
    """The messages as the run's last step began (LangGraph's checkpoint)."""
    written: StepWritten = field(default_factory=StepWritten)
    """What the current step's ended calls gave so far (tool messages, state updates):
    LangGraph's pending writes, which its state shows (``StateSnapshot.values``) and a
    resume's stream does not start from."""
    todos: list[dict[str, Any]] | None = None
    """None: no todo list was ever written (LangGraph leaves the key out then)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """The middleware's state fields."""
    status: str = ""
    """The run's status (running, completed, failed), "" for none."""
    phase: str = ""
    step: int = 0
    updated: float = 0.0

    @property
    def keys(self) -> dict[str, Any]:
        """The state's keys besides the messages: the middleware's, and the todo list
        once one was written."""
        return {**self.extra, **({"todos": self.todos} if self.todos is not None else {})}

    def through(self, message_id: str | None) -> list[Message]:
        """The messages through the one with ``message_id`` (a run's last input); all of
        them when none has it."""
        ids = [m.id for m in self.messages]
        return self.messages[: ids.index(message_id) + 1] if message_id in ids else self.messages


@dataclass
class ThreadInfo:
    thread_id: str
    active: str
    last_run: str
    runs: dict[str, str]
    """Run (task) id -> queued | active | completed | failed | rejected | rolled_back."""
    updated: float
    created: float


class ThreadReader:
    """The threads of one space (``space``: the deployment's unless given), named by the
    caller's thread ids."""

    def __init__(self, redis: aioredis.Redis, names: Names, space: ThreadSpace = DEPLOYMENT):
        self.redis = redis
        self.names = names
        self.space = space

    async def info(self, thread_id: str) -> ThreadInfo | None:
        names, key = self.names, self.space.key(thread_id)
        state: Any = await self.redis.hgetall(names.thread_state(key))
        if not state:
            return None
        fields = {_text(k): _text(v) for k, v in state.items()}
        runs: Any = await self.redis.hgetall(names.thread_runs(key))
        return ThreadInfo(
            thread_id=thread_id,
            active=fields.get("active", ""),
            last_run=fields.get("last_run", ""),
            runs={_text(k): _text(v) for k, v in runs.items()},
            updated=float(fields.get("updated") or 0),
            created=float(fields.get("created") or 0),
        )

    async def current(self, thread_id: str) -> ThreadValues:
        """The thread's state now: the active run's, else what the last run left."""
        info = await self.info(thread_id)
        if info is None:
            return ThreadValues(thread_id=thread_id, run_id="")
        if info.active and await self.redis.exists(self.names.task_state(info.active)):
            return await self.of_run(thread_id, info.active)
        names, key = self.names, self.space.key(thread_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.lrange(names.thread_messages(key), 0, -1)
        pipe.get(names.thread_todos(key))
        pipe.hget(names.thread_state(key), "extra")
        messages, todos, extra = await pipe.execute()
        return ThreadValues(
            thread_id=thread_id,
            run_id=info.last_run,
            messages=[MESSAGE_ADAPTER.validate_json(m) for m in messages],
            todos=list(json.loads(todos)) if todos else None,
            extra=dict(json.loads(extra)) if extra else {},
            status=info.runs.get(info.last_run, ""),
            updated=info.updated,
        )

    async def of_run(self, thread_id: str, task_id: str) -> ThreadValues:
        """The state a run of the thread has (or left when it ended)."""
        names = self.names
        pipe = self.redis.pipeline(transaction=False)
        pipe.lrange(names.task_messages(task_id), 0, -1)  # before HANDED: ``handed_or_own``
        fields = ("status", "phase", "step", "extra", "pending", "thread", HANDED)
        pipe.hmget(names.task_state(task_id), *fields)
        pipe.get(names.task_todos(task_id))
        pipe.xrevrange(names.task_log(task_id), count=1)
        found = await pipe.execute()
        own, (status, phase, step, extra, pending, key, handed), todos, last = found
        raw = await handed_or_own(self.redis, names, _text(key), handed, own)
        updated = int(_text(last[0][0]).split("-")[0]) / 1000 if last else 0.0
        messages = [MESSAGE_ADAPTER.validate_json(m) for m in raw]
        if _text(phase) == "approval" and pending:
            # the reply the human is asked about waits beside the transcript; LangGraph's
            # checkpoint holds it already (the model node ran)
            reply = parse_event(pending)
            if isinstance(reply, ModelResponded):
                if reply.rewrite is not None:  # its writes changed the messages before it
                    messages = rewritten(reply.rewrite, messages, lambda m: m)
                messages.extend([reply.message, *reply.added])
        # read after the transcript: a step's results move into it at once, so a step
        # that ends between the reads shows them once or not yet, never twice
        written = StepWritten()
        if _text(phase) == "tools":
            written = await step_written(self.redis, names, task_id)
        if written.step != int(_text(step) or 0):  # a later step's: not this state's
            written = StepWritten()
        return ThreadValues(
            thread_id=thread_id,
            run_id=task_id,
            messages=messages,
            written=written,
            todos=list(json.loads(todos)) if todos else None,
            extra=dict(json.loads(extra)) if extra else {},
            status=_text(status),
            phase=_text(phase),
            step=int(_text(step) or 0),
            updated=updated,
        )

    async def run_ids(self, thread_id: str) -> list[str]:
        """The thread's runs in the order they started (its log of runs)."""
        entries: Any = await self.redis.xrange(self.names.thread_log(self.space.key(thread_id)))
        found: list[str] = []
        for _, fields in entries:
            event = parse_event(fields[DATA_FIELD.encode()])
            if isinstance(event, TaskSubmitted) and event.task_id not in found:
                found.append(event.task_id)
        return found

    async def batched_request(self, task_id: str, step: int) -> ApprovalRequested | None:
        """The approval request a run waiting in the approval phase asked."""
        entries: Any = await self.redis.xrevrange(self.names.task_log(task_id), count=50)
        for _, fields in entries:
            event = parse_event(fields[DATA_FIELD.encode()])
            if isinstance(event, ApprovalRequested) and event.step == step:
                return event
        return None

    async def list(self, limit: int = 100) -> list[ThreadInfo]:
        """Threads by last change, newest first (those whose keys still exist); the
        deployment's reader lists every space's (an in-process saver's by its bus key)."""
        last = -1 if self.space.name else limit - 1  # a saver's: filtered from them all
        ids: Any = await self.redis.zrevrange(self.names.threads, 0, last)
        found = []
        for raw in ids:
            thread_id = self.space.thread_id(_text(raw))
            if thread_id is None:  # another space's
                continue
            info = await self.info(thread_id)
            if info is None:  # expired: drop it from the listing too
                await self.redis.zrem(self.names.threads, raw)
                continue
            found.append(info)
            if len(found) >= limit:
                break
        return found

    async def replace(
        self,
        thread_id: str,
        messages: Sequence[Message],
        todos: Sequence[Mapping[str, Any]] | None,
        extra: str,
    ) -> None:
        """Set an idle thread's values (LangGraph's ``update_state``): the messages, the
        todo list (None: none was written), the middleware's keys (``extra``, as the
        services store them). A thread with a run going or waiting for a human is
        refused: that run's state is the thread's, and it is the services'."""
        info = await self.info(thread_id)
        if info is not None and info.active:
            raise ValueError(
                f"thread {thread_id} has a run going or waiting ({info.active}): "
                "update_state applies to a thread between runs"
            )
        names, key, now = self.names, self.space.key(thread_id), time.time()
        async with self.redis.pipeline(transaction=True) as pipe:
            stage_transcript(pipe, names, key, [m.model_dump_json() for m in messages])
            if todos is None:
                pipe.delete(names.thread_todos(key))
            else:
                pipe.set(names.thread_todos(key), json.dumps([dict(t) for t in todos]))
            pipe.hset(names.thread_state(key), mapping={"extra": extra, "updated": now})
            pipe.hsetnx(names.thread_state(key), "active", "")
            pipe.hsetnx(names.thread_state(key), "created", now)
            await pipe.execute()
        # apart: the listing's key hashes elsewhere (one transaction is one slot)
        await self.redis.zadd(names.threads, {key: now})

    async def remove(self, thread_id: str) -> bool:
        """Delete a thread's keys (its runs' task keys expire on their own; the runs that
        handed their transcripts over to the thread's have none left). A thread with an
        active run is refused: cancel the run first."""
        info = await self.info(thread_id)
        if info is None:
            return False
        if info.active:
            raise ValueError(
                f"thread {thread_id} has an active run ({info.active}): cancel it first"
            )
        key = self.space.key(thread_id)
        epoch: Any = await self.redis.hget(self.names.thread_state(key), "epoch")
        kept = [self.names.thread_kept_messages(key, e) for e in range(int(epoch or 0))]
        await self.redis.delete(*self.names.thread_keys(key), *kept)
        await self.redis.zrem(self.names.threads, key)
        return True

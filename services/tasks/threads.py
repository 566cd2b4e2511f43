"""Threads: a conversation's state between its runs, and the one active run it may have.

A thread lives once in Redis under its own hash tag (``Names.thread_keys``): the
transcript, todos and middleware state its last run left, a hash of its runs, its log of
runs, and the runs waiting for it. A run is a task with ``thread_id``: when it starts it
takes the thread (``lua/thread_claim.lua``: the only way in, so a thread has at most one
active run however many loop replicas race) and copies the thread's state into its own
keys (``StartRun``); when it ends, whichever service ended it writes its state back
(``lua/thread_end.lua``) and the next queued run, if any, is started. Events carry the
thread's id, never its state: they stay flat however long the conversation grows.

A thread's two scripts touch only the thread's keys and a task's transitions only the
task's, so both work on a Redis Cluster; the copy between them goes through the caller.

A run that ended on its thread hands its transcript over (``ThreadStore.hand_over``):
its own copy, the thread's transcript as the run found it plus what it added, would keep
a whole conversation per run for the retention time (a thread of N turns would hold N²
messages). The thread's transcript holds it already, so the run keeps only where to
read it (``HANDED``: the thread's epoch and the run's length); the thread appends to its
transcript where it can and keeps an older one a write changed while runs read it
(``lua/thread_common.lua``). ``transcript`` reads a run's, handed over or not.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import redis.asyncio as aioredis

from contracts.events import ModelResponded, parse_event
from contracts.streams import DATA_FIELD, Names
from services.tasks.state import pairs, text
from services.tasks.transition import Args, Register, checked_body, lua_file


@dataclass(frozen=True, slots=True)
class ClaimThread(Args):
    """A run asks for its thread (``lua/thread_claim.lua``)."""

    LUA = "thread_claim"
    task_id: str
    strategy: str
    submitted_event: bytes
    now: float
    again: bool
    """Ask again for a run refused while the active run had ended unrecorded."""


@dataclass(frozen=True, slots=True)
class EndRun(Args):
    """The thread's active run ended (``lua/thread_end.lua``)."""

    LUA = "thread_end"
    task_id: str
    status: str
    messages: list[str]
    todos: str
    extra: str
    ended_event: bytes
    ttl: int
    """Seconds the thread is kept once no run is going (0: until it is deleted)."""
    now: float
    write_back: bool
    """False for a run that never started from the thread: it has no state to give."""
    hand_s: int
    """Seconds the run's keys are kept (the retention) when it hands its transcript over
    to the thread's; 0: it keeps its own (``ThreadRuns.ended`` decides)."""


@dataclass(frozen=True, slots=True)
class HandOver(Args):
    """An ended run's transcript is read in its thread's (``lua/thread_handed.lua``, on
    the task's keys)."""

    LUA = "thread_handed"
    handed: str


@dataclass(frozen=True, slots=True)
class SetTranscript(Args):
    """A thread between runs gets a new transcript (``lua/thread_transcript.lua``): the
    runs that handed theirs over still read theirs."""

    LUA = "thread_transcript"
    messages: list[str]


@dataclass(frozen=True, slots=True)
class DropQueued(Args):
    """A run waiting for the thread is cancelled (``lua/thread_drop.lua``)."""

    LUA = "thread_drop"
    task_id: str


@dataclass(frozen=True, slots=True)
class RollBackRun(Args):
    """The active run is cancelled with ``rollback`` (``lua/thread_rollback.lua``)."""

    LUA = "thread_rollback"
    task_id: str


@cache
def thread_script(args: type[Args]) -> str:
    body, table = checked_body(args)
    common = lua_file("thread_common")
    return f"local arg = {{{table}}}\n{common}\nlocal function run()\n{body}\nend\nreturn run()\n"


@dataclass(frozen=True, slots=True)
class Claim:
    """What asking for the thread gave: ``outcome`` start (the run is the active one;
    the thread's state to start from), queued, stop (queued first; ``active`` is to stop),
    busy (refused: ``active`` runs), known (a redelivery: nothing to do)."""

    outcome: str
    active: str
    messages: list[str] = field(default_factory=list)
    todos: str = ""
    extra: str = ""
    submission: bytes = b""

    @classmethod
    def from_reply(cls, reply: list[Any]) -> Claim:
        found = pairs(reply)
        raw_submission = found.get("submission", b"")
        return cls(
            outcome=text(found["outcome"]),
            active=text(found.get("active", "")),
            messages=[text(m) for m in found.get("messages", [])],
            todos=text(found.get("todos", "")),
            extra=text(found.get("extra", "")),
            submission=raw_submission if isinstance(raw_submission, bytes) else b"",
        )


@dataclass(frozen=True, slots=True)
class Ended:
    """What ending a run did: ``outcome`` ended or stale (not the active run: nothing
    changed), the status it was recorded with, and the run to start next ("" if none)."""

    outcome: str
    status: str
    next: str
    epoch: int | None = None
    """The thread's epoch its transcript is at, once the run's was written to it."""


class ThreadStore:
    """The thread scripts, registered once per process, and the reads beside them."""

    def __init__(self, redis: aioredis.Redis, names: Names, register: Register) -> None:
        self.redis = redis
        self.names = names
        self._claim = register(thread_script(ClaimThread))
        self._end = register(thread_script(EndRun))
        self._drop = register(thread_script(DropQueued))
        self._roll_back = register(thread_script(RollBackRun))
        self._hand_over = register(thread_script(HandOver))

    def keys(self, thread_id: str) -> list[str]:
        return self.names.thread_keys(thread_id)

    async def claim(
        self, thread_id: str, task_id: str, strategy: str, submitted: bytes, *, again: bool = False
    ) -> Claim:
        args = ClaimThread(task_id, strategy, submitted, time.time(), again)
        reply = await self._claim(keys=self.keys(thread_id), args=args.argv())
        await self._touch(thread_id)
        return Claim.from_reply(list(reply))

    async def end(self, thread_id: str, args: EndRun) -> Ended:
        found = pairs(list(await self._end(keys=self.keys(thread_id), args=args.argv())))
        await self._touch(thread_id)
        epoch = text(found.get("epoch", ""))
        return Ended(
            text(found["outcome"]),
            text(found["status"]),
            text(found["next"]),
            int(epoch) if epoch else None,
        )

    async def hand_over(self, task_id: str, epoch: int, length: int) -> None:
        """The ended run's transcript is the first ``length`` messages of its thread's at
        ``epoch`` (``lua/thread_end.lua`` wrote it there): the run keeps that, not its
        copy, nor its token counts (kept for its steps' context edits)."""
        names = self.names
        keys = [names.task_state(task_id), names.task_messages(task_id), names.task_tokens(task_id)]
        await self._hand_over(keys=keys, args=HandOver(f"{epoch}:{length}").argv())

    async def drop_queued(self, thread_id: str, task_id: str) -> bool:
        """Take a waiting run out of the thread's queue; False if it is not waiting."""
        args = DropQueued(task_id)
        return int(await self._drop(keys=self.keys(thread_id), args=args.argv())) == 1

    async def roll_back(self, thread_id: str, task_id: str) -> bool:
        """Mark the thread's active run to be rolled back when it ends; False if it is
        not the active run."""
        args = RollBackRun(task_id)
        return int(await self._roll_back(keys=self.keys(thread_id), args=args.argv())) == 1

    async def _touch(self, thread_id: str) -> None:
        """The listing of threads (``loopline threads list``), by last change."""
        await self.redis.zadd(self.names.threads, {thread_id: time.time()})

    async def run_of(self, task_id: str) -> tuple[str, str]:
        """A task's thread id ("" for a task of its own) and status."""
        found: Any = await self.redis.hmget(self.names.task_state(task_id), "thread", "status")
        return text(found[0] or ""), text(found[1] or "")

    async def ending_of(self, task_id: str) -> EndRunParts | None:
        """What a task that ended leaves for its thread (None: it has not ended)."""
        names = self.names
        pipe = self.redis.pipeline(transaction=False)
        pipe.lrange(names.task_messages(task_id), 0, -1)  # before HANDED: ``handed_or_own``
        pipe.hmget(names.task_state(task_id), "status", "extra", "thread", "pending", HANDED)
        pipe.get(names.task_todos(task_id))
        pipe.xrevrange(names.task_log(task_id), count=1)
        own, (status, extra, thread, pending, handed), todos, last = await pipe.execute()
        status = text(status or "")
        if status in ("", "running"):
            return None
        ended = last[0][1].get(DATA_FIELD.encode(), b"") if last else b""
        messages = await handed_or_own(self.redis, names, text(thread or ""), handed, own)
        return EndRunParts(
            status=status,
            messages=[text(m) for m in messages] + _waiting_reply(pending),
            length=len(messages),
            todos=text(todos or ""),
            extra=text(extra or ""),
            ended_event=ended,
            started=bool(thread),
        )


@dataclass(frozen=True, slots=True)
class EndRunParts:
    status: str
    messages: list[str]
    todos: str
    extra: str
    ended_event: bytes
    started: bool
    """Whether the task started as a run of the thread (its state is the thread's)."""
    length: int
    """The run's own transcript's length (``messages`` may add the reply a human was
    asked about)."""

    def args(self, task_id: str, ttl: int, hand_s: int = 0) -> EndRun:
        return EndRun(
            task_id=task_id,
            status=self.status,
            messages=self.messages,
            todos=self.todos,
            extra=self.extra,
            ended_event=self.ended_event,
            ttl=ttl,
            now=time.time(),
            write_back=self.started,
            hand_s=hand_s if self.started else 0,
        )


def _waiting_reply(pending: Any) -> list[str]:
    """The model's reply a run that ended at a human's interrupt was asked about: it
    waits beside the transcript (``lua/interrupt.lua``, cleared once answered), while
    LangGraph's checkpoint holds it already (the model node ran), so the thread keeps
    it, the unanswered tool calls with it."""
    if not pending:
        return []
    reply = parse_event(pending)
    if not isinstance(reply, ModelResponded):  # a hook before the model asked
        return []
    return [reply.message.model_dump_json()]


def json_list(raw: str) -> list[Any]:
    return list(json.loads(raw)) if raw else []


HANDED = "handed"
"""The task state's field of a run that handed its transcript over to its thread's:
``<epoch>:<length>`` (``ThreadStore.hand_over``)."""


async def transcript(redis: Any, names: Names, task_id: str) -> list[Any]:
    """A task's transcript (each message's JSON, as stored), its own or, for a run that
    handed it over, its thread's first messages; empty once its thread is deleted."""
    pipe = redis.pipeline(transaction=False)
    pipe.lrange(names.task_messages(task_id), 0, -1)
    pipe.hmget(names.task_state(task_id), "thread", HANDED)
    own, (thread, handed) = await pipe.execute()
    return await handed_or_own(redis, names, text(thread or ""), handed, own)


async def handed_or_own(
    redis: Any, names: Names, thread_id: str, handed: Any, own: list[Any]
) -> list[Any]:
    """The transcript of a task whose own list was read, then its state's ``HANDED``
    field, in that order (a hand-over sets the field and drops the list at once: a list
    read before the field was unset is whole; a field set sends the read to the thread)."""
    if not handed or not thread_id:
        return own
    epoch_text, _, length_text = text(handed).partition(":")
    epoch, length = int(epoch_text), int(length_text)
    if not length:
        return []
    # the list before the epoch: a rewrite between the two reads shows as a new epoch
    pipe = redis.pipeline(transaction=False)
    pipe.lrange(names.thread_messages(thread_id), 0, length - 1)
    pipe.hget(names.thread_state(thread_id), "epoch")
    found, now = await pipe.execute()
    if int(now or 0) != epoch:  # changed since: the list as it was is kept apart
        found = await redis.lrange(names.thread_kept_messages(thread_id, epoch), 0, length - 1)
    return list(found) if len(found) == length else []


def stage_transcript(pipe: Any, names: Names, thread_id: str, messages: list[str]) -> None:
    """Stage, in the caller's transaction, a thread's new transcript (``SetTranscript``:
    runs that handed theirs over still read theirs). Sent as EVAL, not EVALSHA: a cluster
    pipeline does not load scripts, and this is written between runs only."""
    keys = (names.thread_state(thread_id), names.thread_messages(thread_id))
    args = SetTranscript(messages).argv()
    pipe.eval(thread_script(SetTranscript), len(keys), *keys, *args)

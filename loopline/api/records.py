"""What the gateway keeps beside the services' keys: a record per thread it created and
per run it started (``Names.api_thread``, ``Names.api_run``), so LangGraph's ids resolve
to loopline's tasks. A run's record expires with the deployment's retention; a thread's
lasts until it is deleted, or, where the operator set ``thread_ttl_s``, expires that long
after its last run, as the services' thread keys do; a thread a client gave a TTL is
listed by when it expires (``Names.api_thread_expiry``) for the sweep to delete.

A run is a task, or, for a ``command.resume``, the rest of a waiting task: LangGraph
answers an interrupt with a new run on the thread, loopline with decisions to the task
that waits. Such a run records where in the task's log and chunk stream it begins and how
many messages the thread had then.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, fields
from typing import Any

import redis.asyncio as aioredis

from contracts.streams import Names


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass
class ThreadRecord:
    thread_id: str
    created_at: float = field(default_factory=time.time)
    metadata: dict[str, Any] = field(default_factory=dict)
    updated_at: float = 0.0
    """When its metadata last changed (0: never since it was created)."""


@dataclass
class RunRecord:
    run_id: str
    task_id: str
    thread_id: str
    """"" for a stateless run (a task of no thread)."""
    assistant_id: str
    created_at: float = field(default_factory=time.time)
    multitask_strategy: str = "reject"
    stream_mode: list[str] = field(default_factory=lambda: ["values"])
    metadata: dict[str, Any] = field(default_factory=dict)
    kwargs: dict[str, Any] = field(default_factory=dict)
    """What the client sent (input, command, config, context), shown back in ``kwargs``."""
    log_after: str = "0"
    """The task's log entry after which this run begins ("0": the task's start)."""
    chunks_after: str = "0"
    base_len: int = -1
    """Messages of the state this run begins from (a resume); -1: the thread's messages
    through this run's inputs, known once the task starts."""
    input_ids: list[str] = field(default_factory=list)
    answered: list[str] = field(default_factory=list)
    """The interrupts (ids) a resume answered."""
    ended: str = ""
    """The status of a run that stopped at an interrupt which a later run answered: the
    task goes on, this run does not."""
    agent_ref: str = ""
    """The registration the run's task runs (``NAME@VERSION``); "" in older records."""
    temporary_thread: str = ""
    """A stateless run's thread id as LangGraph's clients see it (they join and read the
    run under it). LangGraph's server makes a thread it deletes when the run ends;
    loopline runs the task without a thread, so there is none to delete."""

    @property
    def is_resume(self) -> bool:
        return self.base_len >= 0


_JSON_FIELDS = {"stream_mode", "metadata", "kwargs", "input_ids", "answered"}


class Records:
    """One tenant's thread and run records."""

    def __init__(
        self, redis: aioredis.Redis, names: Names, retention_s: int, thread_ttl_s: int | None = None
    ) -> None:
        self.redis = redis
        self.names = names
        self.retention_s = retention_s
        self.thread_ttl_s = thread_ttl_s
        """None: threads are kept until deleted."""

    def _keep_thread(self, pipe: Any, key: str) -> None:
        if self.thread_ttl_s:
            pipe.expire(key, self.thread_ttl_s)

    async def save_thread(self, record: ThreadRecord) -> None:
        key = self.names.api_thread(record.thread_id)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(
                key,
                mapping={
                    "created_at": record.created_at,
                    "updated_at": record.updated_at or record.created_at,
                    "metadata": json.dumps(record.metadata),
                },
            )
            self._keep_thread(pipe, key)
            pipe.zadd(self.names.api_threads, {record.thread_id: record.created_at})
            await pipe.execute()

    async def thread_ids(self) -> list[str]:
        """The threads the gateway created, oldest first."""
        found: Any = await self.redis.zrange(self.names.api_threads, 0, -1)
        return [_text(thread_id) for thread_id in found]

    async def thread(self, thread_id: str) -> ThreadRecord | None:
        found: Any = await self.redis.hgetall(self.names.api_thread(thread_id))
        if not found:
            return None
        fields = {_text(k): _text(v) for k, v in found.items()}
        return ThreadRecord(
            thread_id=thread_id,
            created_at=float(fields.get("created_at") or 0),
            metadata=dict(json.loads(fields.get("metadata") or "{}")),
            updated_at=float(fields.get("updated_at") or 0),
        )

    async def touch_thread(self, thread_id: str) -> None:
        if self.thread_ttl_s:
            await self.redis.expire(self.names.api_thread(thread_id), self.thread_ttl_s)

    async def delete_thread(self, thread_id: str, with_runs: bool = False) -> bool:
        """Forget a thread; whether the gateway had a record of it. ``with_runs``: its
        runs' records and their tasks' keys (transcript, log) too, so an expired
        thread's conversation is gone, not only its index."""
        key, runs = self.names.api_thread(thread_id), self.names.api_thread_runs(thread_id)
        run_keys = await self._run_keys(runs) if with_runs else []
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zrem(self.names.api_threads, thread_id)
            pipe.zrem(self.names.api_thread_expiry, thread_id)
            pipe.delete(key, runs)
            for run_key in run_keys:  # one by one: a run's and a task's keys hash apart
                pipe.delete(run_key)
            done = await pipe.execute()
        return int(done[2]) >= 1

    async def _run_keys(self, runs_key: str) -> list[str]:
        """The keys of the runs listed under ``runs_key``: their records, their tasks'."""
        found: Any = await self.redis.zrange(runs_key, 0, -1)
        keys = []
        for run_id in map(_text, found):
            keys.append(self.names.api_run(run_id))
            task_id: Any = await self.redis.hget(self.names.api_run(run_id), "task_id")
            if task_id:
                keys.extend(self.names.task_keys(_text(task_id)))
        return keys

    async def expire_thread_at(self, thread_id: str, when: float) -> None:
        """The thread is deleted by the first sweep after ``when`` (epoch seconds)."""
        await self.redis.zadd(self.names.api_thread_expiry, {thread_id: when})

    async def expired_threads(self, now: float, limit: int) -> list[str]:
        """Threads past their TTL at ``now``, those due first."""
        key = self.names.api_thread_expiry
        found: Any = await self.redis.zrangebyscore(key, "-inf", now, start=0, num=limit)
        return [_text(thread_id) for thread_id in found]

    async def save_run(self, record: RunRecord) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            self.queue_run(pipe, record)
            await pipe.execute()

    def queue_run(self, pipe: Any, record: RunRecord) -> None:
        """``save_run``'s commands, queued on a pipeline (the run's submission)."""
        key = self.names.api_run(record.run_id)
        mapping: dict[Any, Any] = {
            f.name: json.dumps(v) if f.name in _JSON_FIELDS else v
            for f in fields(record)
            for v in (getattr(record, f.name),)
        }  # not asdict: its deep copy of every list and dict cost more than the rest
        pipe.hset(key, mapping=mapping)
        pipe.expire(key, self.retention_s)
        if record.thread_id:
            runs = self.names.api_thread_runs(record.thread_id)
            pipe.zadd(runs, {record.run_id: record.created_at})
            pipe.expire(runs, self.retention_s)

    async def delete_run(self, record: RunRecord) -> None:
        """Forget a run: its record and its place in its thread's list of runs."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.delete(self.names.api_run(record.run_id))
            if record.thread_id:
                pipe.zrem(self.names.api_thread_runs(record.thread_id), record.run_id)
            await pipe.execute()

    async def run_ids(self, thread_id: str, offset: int, limit: int) -> list[str]:
        """The thread's runs, newest first."""
        key = self.names.api_thread_runs(thread_id)
        found: Any = await self.redis.zrevrange(key, offset, offset + limit - 1)
        return [_text(run_id) for run_id in found]

    async def run(self, run_id: str) -> RunRecord | None:
        found: Any = await self.redis.hgetall(self.names.api_run(run_id))
        if not found:
            return None
        fields: dict[str, Any] = {_text(k): _text(v) for k, v in found.items()}
        for name in _JSON_FIELDS:
            if name in fields:  # a record of an older gateway may lack a newer field
                fields[name] = json.loads(fields[name])
        fields["created_at"] = float(fields["created_at"])
        fields["base_len"] = int(fields["base_len"])
        return RunRecord(**fields)

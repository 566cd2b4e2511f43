"""Runs that start later (``after_seconds``), as LangGraph's server starts them: the run
is recorded at once and shows ``pending`` until it is due, then starts as any run does
(its thread's order, its stream, its webhook).

What starts it is kept in Redis (``Names.api_delayed``, ``api_delayed_runs``), not in a
gateway's memory, so a delayed run survives a gateway's restart and is started by
whichever replica looks first: a replica takes a due run by moving its score a lease
ahead in one script, starts it, then removes it; one that dies in between leaves it to
be taken again when the lease ends (the run's task, if it was submitted, is not
submitted twice).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import Any

from loopline.api.periodic import until_stopped
from loopline.api.records import RunRecord
from loopline.api.tenant import Tenant

log = logging.getLogger("loopline.api.delayed_runs")

POLL_S = 0.25
"""How often a replica looks for due runs (a run starts at most this late)."""
LEASE_MS = 30_000
"""How long a replica that took a due run has to start it before another may."""
BATCH = 100

TAKE = """
local due = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not due or tonumber(due) > tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return 1
"""
"""Take a due run: its score moves a lease ahead, so one replica starts it."""


async def schedule(
    tenant: Tenant, record: RunRecord, request: Any, after_s: float, temporary_thread: str
) -> None:
    """Record the run (pending) and what starts it ``after_s`` seconds from now."""
    names = tenant.names
    due_ms = int((time.time() + after_s) * 1000)
    start = {
        "thread_id": record.thread_id or None,
        "temporary_thread": temporary_thread,
        "request": asdict(request),
    }
    async with tenant.redis.pipeline(transaction=True) as pipe:
        tenant.records.queue_run(pipe, record)
        pipe.hset(names.api_delayed_runs, record.run_id, json.dumps(start))
        pipe.zadd(names.api_delayed, {record.run_id: due_ms})
        await pipe.execute()


Starter = Callable[[Tenant, str, dict[str, Any]], Awaitable[Any]]
"""Starts a run (its id, and what ``schedule`` kept): ``runs.start_delayed``."""


async def forget(tenant: Tenant, run_id: str) -> bool:
    """Take back a delayed run that has not started (its cancel); whether it was one."""
    names = tenant.names
    async with tenant.redis.pipeline(transaction=True) as pipe:
        pipe.zrem(names.api_delayed, run_id)
        pipe.hdel(names.api_delayed_runs, run_id)
        removed, _ = await pipe.execute()
    return bool(removed)


NOT_STARTED = ("interrupted", "error")
"""A delayed run's status when it was cancelled, or could not start, before it ran."""


async def until_started(tenant: Tenant, run_id: str) -> bool:
    """Wait while the run is delayed; whether it started (False: it was cancelled or
    could not start, and no task of it will ever run; its record says so, read after
    the wait, since the caller's copy may be older than the cancel)."""
    while await tenant.redis.zscore(tenant.names.api_delayed, run_id) is not None:
        await asyncio.sleep(POLL_S)
    record = await tenant.records.run(run_id)
    return record is None or record.ended not in NOT_STARTED


RECENT_RUNS = 100
"""The thread's newest runs ``waiting_on`` looks at."""


async def waiting_on(tenant: Tenant, thread_id: str, besides: str = "") -> bool:
    """Whether a delayed run of the thread (other than ``besides``) has not started yet:
    the thread is busy meanwhile, as on LangGraph's server."""
    run_ids = [r for r in await tenant.records.run_ids(thread_id, 0, RECENT_RUNS) if r != besides]
    if not run_ids:
        return False
    scores = await tenant.redis.zmscore(tenant.names.api_delayed, run_ids)
    return any(score is not None for score in scores)


class DelayedRuns:
    """Starts one tenant's delayed runs when they are due, from this replica."""

    def __init__(self, tenant: Tenant, start: Starter) -> None:
        self.tenant = tenant
        self.start = start
        self._take = tenant.redis.register_script(TAKE)

    async def run(self, stopping: asyncio.Event) -> None:
        what = f"delayed runs of {self.tenant.prefix}"
        await until_stopped(stopping, self.start_due, POLL_S, log, what)

    async def start_due(self) -> int:
        """Take and start every due run; how many this replica started."""
        names = self.tenant.names
        now_ms = int(time.time() * 1000)
        due = await self.tenant.redis.zrangebyscore(names.api_delayed, 0, now_ms, 0, BATCH)
        started = 0
        for raw in due:
            run_id = raw.decode() if isinstance(raw, bytes) else str(raw)
            lease: list[str | int] = [run_id, now_ms, now_ms + LEASE_MS]
            if not await self._take(keys=[names.api_delayed], args=lease):
                continue  # another replica took it
            await self._start(run_id)
            started += 1
        return started

    async def _start(self, run_id: str) -> None:
        tenant, names = self.tenant, self.tenant.names
        raw = await tenant.redis.hget(names.api_delayed_runs, run_id)
        submitted = await tenant.redis.exists(names.task_state(run_id))
        if raw is not None and not submitted:  # (a replica that died may have started it)
            try:
                await self.start(tenant, run_id, json.loads(raw))
            except Exception as exc:  # its thread was deleted, its thread is busy, ...
                log.warning("delayed run %s did not start: %s", run_id, exc)
                await self._ended(run_id, NOT_STARTED[1])
        async with tenant.redis.pipeline(transaction=True) as pipe:
            pipe.zrem(names.api_delayed, run_id)
            pipe.hdel(names.api_delayed_runs, run_id)
            await pipe.execute()

    async def _ended(self, run_id: str, status: str) -> None:
        record = await self.tenant.records.run(run_id)
        if record is not None:
            record.ended = status
            await self.tenant.records.save_run(record)


__all__ = ["DelayedRuns", "forget", "schedule", "until_started", "waiting_on"]

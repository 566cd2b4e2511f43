"""Writes the deployment's thread runs to its PostgreSQL record (``thread_saver``): in
every gateway replica, a recorder looks at the runs not yet written
(``Names.api_saver_runs``, queued with each run of a thread); a run whose task has ended
is written, a checkpoint per superstep, by one replica at a time (a lease per run).

A run not started yet, still going or waiting for a human is looked at again later; one
whose records are gone (past the retention) is dropped. A PostgreSQL that does not answer leaves the
run queued for the next look; a run whose supersteps do not fit the agent's graph as
LangGraph schedules it (``SaverStepsError``) is logged and dropped, never half-written
again and again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from loopline.api.periodic import until_stopped
from loopline.api.tenant import Tenant
from loopline.saver_steps import SaverStepsError

log = logging.getLogger("loopline.api.saver_recorder")

POLL_S = 0.25
"""How often a replica looks for runs to write."""
RECHECK_MS = 1_000
"""How long a run still going waits before it is looked at again."""
RETRY_MS = 5_000
"""How long a run whose writing failed (the database) waits for the next try."""
LEASE_MS = 60_000
BATCH = 100
ENDED = ("completed", "failed")
"""Task statuses of a run that has ended (``Client.status``)."""


def queue_run(pipe: Any, tenant: Tenant, task_id: str) -> None:
    """Record, on ``pipe`` (the run's own submission), that the thread's run ``task_id``
    is to be written to the deployment's checkpointer once it ends."""
    pipe.zadd(tenant.names.api_saver_runs, {task_id: int(time.time() * 1000)})


class SaverRecorder:
    """One tenant's runs written to its record, from this replica."""

    def __init__(self, tenant: Tenant, replica: str) -> None:
        assert tenant.thread_saver is not None
        self.tenant = tenant
        self.saver = tenant.thread_saver
        self.replica = replica
        self.names = tenant.names
        self.redis = tenant.redis

    async def run(self, stopping: asyncio.Event) -> None:
        what = f"thread recorder of {self.tenant.prefix}"
        await until_stopped(stopping, self.sweep, POLL_S, log, what)

    async def sweep(self) -> None:
        now_ms = int(time.time() * 1000)
        due = await self.redis.zrangebyscore(
            self.names.api_saver_runs, 0, now_ms, start=0, num=BATCH
        )
        # one at a time: the runs of one thread are written in the order they ran
        for task_id in due:
            await self._look_at(_text(task_id))

    async def _look_at(self, task_id: str) -> None:
        lease = self.names.api_saver_lease(task_id)
        if not await self.redis.set(lease, self.replica, nx=True, px=LEASE_MS):
            return  # another replica has it
        try:
            await self._write_if_ended(task_id)
        finally:
            await self.redis.delete(lease)

    async def _write_if_ended(self, task_id: str) -> None:
        tenant = self.tenant
        record = await tenant.records.run(task_id)
        if record is None or not record.thread_id:
            log.warning("run %s not written to the thread record: no longer known", task_id)
            return await self._done(task_id)
        # a task the loop has not started yet has neither (its state is written then)
        status = await tenant.client.status(task_id)
        spec = await tenant.spec_of_task(task_id)
        if status not in ENDED or spec is None:
            return await self._later(task_id, RECHECK_MS)
        try:
            await self.saver.record_run(record.thread_id, task_id, spec)
        except SaverStepsError:
            log.exception("run %s of thread %s not recorded", task_id, record.thread_id)
        except Exception:
            thread = record.thread_id
            log.exception("run %s of thread %s: recording failed, retried", task_id, thread)
            return await self._later(task_id, RETRY_MS)
        return await self._done(task_id)

    async def _later(self, task_id: str, after_ms: int) -> None:
        later = int(time.time() * 1000) + after_ms
        await self.redis.zadd(self.names.api_saver_runs, {task_id: later}, xx=True)

    async def _done(self, task_id: str) -> None:
        await self.redis.zrem(self.names.api_saver_runs, task_id)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)

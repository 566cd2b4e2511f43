"""Threads past the TTL a client gave them (``threads.create(ttl=...)``,
``threads.update(ttl=...)``) or the operator's default TTL (``loopline.api.thread_ttl``:
LangGraph's ``checkpointer.ttl``) are deleted by a sweep, as on LangGraph's server
(``sweep_interval_minutes``, else ``LOOPLINE_THREAD_SWEEP_S``): every
gateway replica looks that often and deletes what is due, as ``DELETE /threads/{id}``
would, with the runs' records and the thread's crons. A thread whose run waits for a
human goes too, as LangGraph's does: the waiting run is cancelled, and the next sweep
deletes the thread. One with a run going is left for a later sweep (its run is not cut
short). Reading a thread does not renew its TTL:
LangGraph's thread TTL has no ``refresh_on_read`` (that is its store's); a new ``ttl``
in ``threads.update`` sets it again from then.

Several replicas may sweep at once: deleting is idempotent, so the one that comes
second finds nothing left.
"""

from __future__ import annotations

import asyncio
import logging
import time

from loopline.api import thread_ttl
from loopline.api.crons import CronStore
from loopline.api.periodic import until_stopped
from loopline.api.tenant import Tenant
from loopline.conversation import waiting_interrupts

log = logging.getLogger("loopline.api.threads")

CANCEL_WAIT_S = 10.0
"""How long deleting a thread waits for its cancelled run to stop."""


async def set_thread_ttl(
    tenant: Tenant, thread_id: str, minutes: float | None, *, created: bool
) -> None:
    """The thread expires ``minutes`` from now when a ``ttl`` is given; a thread the
    gateway just created without one gets the operator's default TTL, if any (LangGraph
    applies its ``default_ttl`` to the threads it creates)."""
    now = time.time()
    when = now + minutes * 60 if minutes is not None else None
    if when is None and created:
        when = thread_ttl.policy().default_expiry(now)
    if when is not None:
        await tenant.records.expire_thread_at(thread_id, when)


async def remove_thread(tenant: Tenant, thread_id: str, with_runs: bool = False) -> bool:
    """Remove a thread's values and the gateway's record of it; whether it existed
    (``ValueError`` for a thread with an active run). ``with_runs``: the records of its
    runs too. The deployment's PostgreSQL record of the thread goes with it: what is
    deleted or expires is gone from Redis and the record alike."""
    removed = await tenant.threads.remove(thread_id)
    if tenant.thread_saver is not None:
        removed = await tenant.thread_saver.delete(thread_id) or removed
    return await tenant.records.delete_thread(thread_id, with_runs) or removed


async def remove_thread_and_runs(tenant: Tenant, thread_id: str) -> bool:
    """``DELETE /threads/{id}`` as LangGraph's server does it: the thread goes with its
    runs, an active one included. loopline cancels the active run and waits (up to
    ``CANCEL_WAIT_S``) for the loop to let it go before removing; a run that will not stop
    in that time leaves ``ValueError`` (409)."""
    try:
        return await remove_thread(tenant, thread_id)
    except ValueError:
        pass
    deadline = time.monotonic() + CANCEL_WAIT_S
    while True:
        info = await tenant.threads.info(thread_id)
        if info is None or not info.active:
            return await remove_thread(tenant, thread_id)
        if time.monotonic() > deadline:
            raise ValueError(f"thread {thread_id}: its run {info.active} did not stop in time")
        await tenant.client.cancel(info.active, "thread deleted", thread_id=thread_id)
        await asyncio.sleep(0.05)


class ThreadSweeper:
    """One tenant's expired threads, deleted from this replica."""

    def __init__(self, tenant: Tenant) -> None:
        self.tenant = tenant
        operator = thread_ttl.policy()
        self.interval_s = operator.sweep_s(tenant.settings.thread_sweep_s)
        self.batch = operator.sweep_limit

    async def run(self, stopping: asyncio.Event) -> None:
        what = f"thread sweep of {self.tenant.prefix}"
        await until_stopped(stopping, self.sweep, self.interval_s, log, what)

    async def sweep(self) -> int:
        """Delete the threads whose TTL has passed; how many were deleted."""
        deleted = 0
        for thread_id in await self.tenant.records.expired_threads(time.time(), self.batch):
            try:
                await remove_thread(self.tenant, thread_id, with_runs=True)
            except ValueError:  # a run is active: the next sweep tries again
                await self._end_waiting(thread_id)
                continue
            await CronStore(self.tenant.redis, self.tenant.names).delete_for_thread(thread_id)
            deleted += 1
        return deleted

    async def _end_waiting(self, thread_id: str) -> None:
        """Cancel the thread's run if it waits for a human (it would wait for ever);
        a run at work is left to finish."""
        state = await self.tenant.threads.current(thread_id)
        if state is None or not await waiting_interrupts(self.tenant.client, state):
            return
        info = await self.tenant.threads.info(thread_id)
        if info is not None and info.active:
            reason = "thread expired (ttl)"
            await self.tenant.client.cancel(info.active, reason, thread_id=thread_id)

"""Fires crons: in every gateway replica, once a second, the tenant's due crons are
claimed (``CronStore.claim``: one replica wins each tick) and the winner starts the
tick's run as ``POST /threads/{id}/runs`` (or a stateless ``POST /runs``) would, so a
cron's runs are ordinary runs: the same records, streams, thread order and webhooks.

As on LangGraph's server: a tick's run takes the cron's payload (input, config,
context, webhook, ...) with ``multitask_strategy`` ``enqueue`` unless the payload says
otherwise, and metadata of the cron under the payload's; a disabled cron, or one past
its end, does not fire; a run that cannot start (its thread was deleted, the assistant
is gone) is logged and the cron goes on. A cron whose ticks were missed while no
replica ran fires once for them, then follows its schedule from now.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from typing import Any

from loopline.api.crons import Cron, CronStore, from_ms, now_utc, tick_run_id
from loopline.api.runs import Busy, RunRequest, start_run, thread_exists
from loopline.api.tenant import NotFound, Tenant
from loopline.api.wire import BadRequest

log = logging.getLogger("loopline.api.crons")

POLL_S = 1.0
"""How often a replica looks for due crons at least; it wakes for the next due tick it
knows of, so a tick fires within milliseconds, and one of a cron created meanwhile by
another replica at most this late (LangGraph's in-memory server looks every 5 s)."""
MIN_WAIT_S = 0.005

BATCH = 100
"""The most due crons one look claims (the rest are due at the next look)."""

ABANDONED_AFTER_MS = 30_000
"""A claimed tick whose run is not recorded this long after the claim was left by a
replica that died: another replica starts it."""


class CronScheduler:
    """One tenant's crons, fired from this replica."""

    def __init__(self, tenant: Tenant) -> None:
        self.tenant = tenant
        self.store = CronStore(tenant.redis, tenant.names)

    async def run(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            try:
                await self.fire_due()
                await self.recover()
            except Exception:  # a bad cron or a lost connection never stops the loop
                log.exception("cron scheduler of %s", self.tenant.prefix)
            with contextlib.suppress(TimeoutError):  # the next look, or the stop
                await asyncio.wait_for(stopping.wait(), await self._until_next())

    async def _until_next(self) -> float:
        """Seconds to the next due tick, at most ``POLL_S`` (a cron created or changed
        by another replica meanwhile is seen by then)."""
        earliest = await self.store.earliest()
        if earliest is None:
            return POLL_S
        return min(POLL_S, max(MIN_WAIT_S, earliest / 1000 - time.time()))

    async def fire_due(self) -> int:
        """Claim and start every due tick; how many this replica fired."""
        now = now_utc()
        now_ms = int(now.timestamp() * 1000)
        fired = 0
        for cron_id, tick_ms in await self.store.due(now_ms, BATCH):
            cron = await self.store.get(cron_id)
            if cron is None:  # deleted between the two reads: its score goes too
                await self.store.claim(cron_id, tick_ms, None, now_ms)
                await self.store.fired(cron_id, tick_ms)
                continue
            if not await self.store.claim(cron_id, tick_ms, cron.next_ms_after(now), now_ms):
                continue  # another replica fired this tick
            if cron.enabled and not cron.ended_by(from_ms(tick_ms)):
                await self._start(cron, tick_ms)
                fired += 1
            await self.store.fired(cron_id, tick_ms)
        return fired

    async def recover(self) -> None:
        """Start the runs of ticks a dead replica claimed but never started."""
        now_ms = int(time.time() * 1000)
        left = await self.store.abandoned(now_ms - ABANDONED_AFTER_MS, now_ms, BATCH)
        for cron_id, tick_ms in left:
            cron = await self.store.get(cron_id)
            run_id = tick_run_id(cron_id, tick_ms)
            if cron is not None and await self.tenant.records.run(run_id) is None:
                log.warning("cron %s: starting tick %s, left by a replica", cron_id, tick_ms)
                await self._start(cron, tick_ms)
            await self.store.fired(cron_id, tick_ms)

    async def _start(self, cron: Cron, tick_ms: int) -> None:
        run_id = tick_run_id(cron.cron_id, tick_ms)
        thread_id = cron.thread_id
        request = run_request(cron)
        if thread_id is None and cron.on_run_completed == "keep":
            # a new thread per tick, kept (the same id again if this tick is retried)
            thread_id = str(uuid.uuid5(uuid.UUID(run_id), "thread"))
            request.if_not_exists = "create"
        try:
            await start_run(self.tenant, thread_id, request, run_id=run_id)
        except NotFound as exc:
            if cron.thread_id and not await thread_exists(self.tenant, cron.thread_id):
                # its thread was removed without the gateway (the CLI): the cron goes too
                log.warning("cron %s removed: its thread %s is gone", cron.cron_id, thread_id)
                await self.store.delete(cron.cron_id)
            else:
                log.warning("cron %s: its run did not start: %s", cron.cron_id, exc)
        except (BadRequest, Busy) as exc:
            log.warning("cron %s: its run did not start: %s", cron.cron_id, exc)


def run_request(cron: Cron) -> RunRequest:
    """The tick's run, from the cron's payload."""
    payload: dict[str, Any] = cron.payload
    modes = payload.get("stream_mode") or ["values"]
    return RunRequest(
        assistant_id=cron.assistant_id,
        input=payload.get("input"),
        config=dict(payload.get("config") or {}),
        context=payload.get("context") or None,
        stream_mode=[modes] if isinstance(modes, str) else list(modes),
        multitask_strategy=payload.get("multitask_strategy") or "enqueue",
        metadata={**cron.metadata, **(payload.get("metadata") or {})},
        webhook=payload.get("webhook"),
    )

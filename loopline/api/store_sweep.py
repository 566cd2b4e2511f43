"""Expired store items deleted for good, as LangGraph's server sweeps its store
(``store.ttl.sweep_interval_minutes`` in ``LOOPLINE_STORE``). An expired item is never
returned before the sweep either (``services.redis_store``); the sweep frees its memory.
Several replicas may sweep at once: deleting twice deletes once."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from loopline.api.tenant import Tenant

log = logging.getLogger("loopline.api.store")


class StoreSweeper:
    """One tenant's expired store items, deleted from this replica."""

    def __init__(self, tenant: Tenant, interval_s: float) -> None:
        self.tenant = tenant
        self.interval_s = interval_s

    @classmethod
    def of(cls, tenant: Tenant) -> StoreSweeper | None:
        """The tenant's sweeper, or None when its store has no sweep configured."""
        ttl = tenant.settings.store.ttl if tenant.settings.store else None
        if ttl is None or ttl.sweep_interval_minutes is None:
            return None
        return cls(tenant, ttl.sweep_interval_minutes * 60)

    async def run(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            try:
                await self.tenant.store.asweep_ttl()
            except Exception:  # a lost connection never stops the loop
                log.exception("store sweep of %s", self.tenant.prefix)
            with contextlib.suppress(TimeoutError):  # the next sweep, or the stop
                await asyncio.wait_for(stopping.wait(), self.interval_s)

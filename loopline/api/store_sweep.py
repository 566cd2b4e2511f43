"""Expired store items deleted for good, as LangGraph's server sweeps its store
(``store.ttl.sweep_interval_minutes`` in ``LOOPLINE_STORE``). An expired item is never
returned before the sweep either (``services.redis_store``); the sweep frees its memory.
Several replicas may sweep at once: deleting twice deletes once."""

from __future__ import annotations

import asyncio
import logging

from loopline.api.periodic import until_stopped
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
        what = f"store sweep of {self.tenant.prefix}"
        await until_stopped(stopping, self.tenant.store.asweep_ttl, self.interval_s, log, what)

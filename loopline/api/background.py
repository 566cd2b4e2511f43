"""What every gateway replica runs beside its routes: for each tenant it serves, the
cron scheduler, the starter of delayed runs, the webhook sender, the sweeps of expired
threads and store items and, with a PostgreSQL record of the threads, the recorder of
their runs. Any number of
replicas may run them: each tick and each webhook is claimed in Redis by one, and
deleting an expired thread twice deletes it once."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator

import httpx

from loopline.api import thread_ttl, webhooks
from loopline.api.cron_scheduler import CronScheduler
from loopline.api.delayed_runs import DelayedRuns
from loopline.api.gateway import Gateway
from loopline.api.runs import start_delayed
from loopline.api.saver_recorder import SaverRecorder
from loopline.api.store_sweep import StoreSweeper
from loopline.api.thread_sweep import ThreadSweeper
from loopline.api.webhook_delivery import TIMEOUT_S, WebhookSender


def tenant_prefixes(gateway: Gateway) -> list[str]:
    """The prefixes the gateway serves: its keys' tenants, or the default one."""
    tenancy = gateway.tenancy
    return sorted(set(tenancy.keys.values())) if tenancy.keys else [tenancy.default_prefix]


@contextlib.asynccontextmanager
async def running(gateway: Gateway) -> AsyncIterator[None]:
    """The schedulers, senders and sweeps, from the app's start to its stop."""
    webhooks.policy()  # a malformed LOOPLINE_API_WEBHOOKS stops the start, with why
    thread_ttl.policy()  # so does LOOPLINE_API_THREAD_TTL
    replica = f"{socket.gethostname()}:{os.getpid()}"
    # redirects are not followed: the policy checked the URL, not where it points next
    async with httpx.AsyncClient(timeout=TIMEOUT_S, follow_redirects=False) as client:
        tasks = []
        for prefix in tenant_prefixes(gateway):
            tenant = gateway.tenant(prefix)
            tasks.append(asyncio.create_task(CronScheduler(tenant).run(gateway.stopping)))
            delayed = DelayedRuns(tenant, start_delayed)
            tasks.append(asyncio.create_task(delayed.run(gateway.stopping)))
            sender = WebhookSender(tenant, client, replica)
            tasks.append(asyncio.create_task(sender.run(gateway.stopping)))
            tasks.append(asyncio.create_task(ThreadSweeper(tenant).run(gateway.stopping)))
            if tenant.thread_saver is not None:
                recorder = SaverRecorder(tenant, replica)
                tasks.append(asyncio.create_task(recorder.run(gateway.stopping)))
            if store_sweeper := StoreSweeper.of(tenant):
                tasks.append(asyncio.create_task(store_sweeper.run(gateway.stopping)))
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

"""Sends webhooks: in every gateway replica, a sender looks at the runs that have one
(``Names.api_webhooks``); a run that has ended is POSTed to its URL, as LangGraph's
server does, by one replica at a time (a lease per run), apart from the run itself: a
slow or failing receiver never holds a run.

The body is LangGraph's: the run as ``GET .../runs/{id}`` shows it, with ``status``,
``run_started_at``, ``run_ended_at``, ``webhook_sent_at``, the thread's ``values`` at
the end of the run, and ``error`` for a run that failed; the operator's ``headers`` go
with it. ``run_started_at`` is when the run was created (a run that waited for its
thread started later), ``run_ended_at`` the time of its task log's last entry.

A network error, a timeout, a 5xx or a 429 is retried (``ATTEMPTS`` in all, backing
off); then the failure is logged and the webhook dropped, as LangGraph's server drops
it. A replica that dies while sending leaves the lease to expire, and another
sends it: a receiver may, rarely, get a run twice, never zero times while a replica
runs.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any

import httpx

from loopline.api import webhooks
from loopline.api.periodic import until_stopped
from loopline.api.records import RunRecord
from loopline.api.run_routes import run_json
from loopline.api.runs import final_values, run_status, wait_for
from loopline.api.tenant import NotFound, Tenant
from loopline.api.wire import BadRequest, iso, jsonable

log = logging.getLogger("loopline.api.webhooks")

POLL_S = 0.25
"""How often a replica looks for runs with a webhook due."""
RECHECK_MS = 500
"""How long a run still going waits before it is looked at again."""
LEASE_MS = 60_000
"""How long one replica holds a run's webhook: above the longest send (``ATTEMPTS``
tries of ``TIMEOUT_S`` with their back-off)."""
ATTEMPTS = 3
TIMEOUT_S = httpx.Timeout(10.0, connect=5.0)
BATCH = 100
ENDED = ("success", "error", "timeout", "interrupted")


class WebhookSender:
    """One tenant's webhooks, sent from this replica."""

    def __init__(self, tenant: Tenant, client: httpx.AsyncClient, replica: str) -> None:
        self.tenant = tenant
        self.client = client
        self.replica = replica
        self.names = tenant.names
        self.redis = tenant.redis

    async def run(self, stopping: asyncio.Event) -> None:
        what = f"webhook sender of {self.tenant.prefix}"
        await until_stopped(stopping, self.sweep, POLL_S, log, what)

    async def sweep(self) -> None:
        now_ms = int(time.time() * 1000)
        due = await self.redis.zrangebyscore(self.names.api_webhooks, 0, now_ms, start=0, num=BATCH)
        await asyncio.gather(*(self._look_at(_text(run_id)) for run_id in due))

    async def _look_at(self, run_id: str) -> None:
        lease = self.names.api_webhook_lease(run_id)
        if not await self.redis.set(lease, self.replica, nx=True, px=LEASE_MS):
            return  # another replica has it
        try:
            await self._send_if_ended(run_id)
        finally:
            await self.redis.delete(lease)

    async def _send_if_ended(self, run_id: str) -> None:
        url = await self.redis.get(self.names.api_webhook(run_id))
        record = await self.tenant.records.run(run_id)
        if url is None or record is None:
            log.warning("webhook of run %s dropped: the run is no longer known", run_id)
            return await self._done(run_id)
        try:
            status = await run_status(self.tenant, record)
        except NotFound:  # rolled back by a newer run of its thread
            log.info("webhook of run %s dropped: the run was rolled back", run_id)
            return await self._done(run_id)
        if status not in ENDED:
            later = int(time.time() * 1000) + RECHECK_MS
            await self.redis.zadd(self.names.api_webhooks, {run_id: later}, xx=True)
            return None
        await self._send(_text(url), await self._body(record, status))
        return await self._done(run_id)

    async def _done(self, run_id: str) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.zrem(self.names.api_webhooks, run_id)
            pipe.delete(self.names.api_webhook(run_id))
            await pipe.execute()

    async def _body(self, record: RunRecord, status: str) -> dict[str, Any]:
        tenant = self.tenant
        body = await run_json(tenant, record)
        ended_at = await tenant.client.last_entry(record.task_id)
        ended_ms = int(ended_at.partition("-")[0] or 0)
        body["status"] = status
        body["run_started_at"] = iso(record.created_at)
        body["run_ended_at"] = iso(ended_ms / 1000) if ended_ms else None
        values = await wait_for(tenant, record)  # at once: the run has ended
        if "__error__" in values:
            body["error"] = values["__error__"]
            values = await final_values(tenant, record)
        body["values"] = jsonable(values)
        body["webhook_sent_at"] = iso(time.time())
        return body

    async def _send(self, url: str, body: dict[str, Any]) -> None:
        policy = webhooks.policy()
        try:
            await policy.check(url)  # the policy may have changed since the run began
        except BadRequest as exc:
            log.error("webhook %s of run %s refused: %s", url, body["run_id"], exc)
            return
        headers, run_id, sent = dict(policy.headers), body["run_id"], policy.body(body)
        for attempt in range(1, ATTEMPTS + 1):
            try:
                reply = await self.client.post(url, json=sent, headers=headers)
                if reply.status_code < 500 and reply.status_code != 429:
                    if reply.status_code >= 400:
                        log.error("webhook %s of run %s: %s", url, run_id, reply.status_code)
                    return
                failure = f"HTTP {reply.status_code}"
            except httpx.HTTPError as exc:
                failure = f"{type(exc).__name__}: {exc}"
            if attempt < ATTEMPTS:
                await asyncio.sleep(backoff(attempt))
        log.error("webhook %s of run %s failed %d times: %s", url, run_id, ATTEMPTS, failure)


def backoff(attempt: int) -> float:
    """Seconds before the next try: 1, 2, 4, ... with up to a second of jitter."""
    return float(2 ** (attempt - 1)) + random.random()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)

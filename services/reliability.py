"""Nothing lost: what FastStream's stream subscriber does not do.

FastStream leaves an entry pending forever when its handler fails, and entries fetched but
not started at shutdown stay with a consumer that may never come back. Here, per process
and service:

- a ``Reclaimer`` takes over entries idle longer than ``claim_idle_ms`` with XAUTOCLAIM
  and hands each to its stream's ``EntryRunner`` (``services.runner``), the same runner
  that runs the entries the consumers read: the same fates, the same atomic commit of
  what the handler published with the ack, the same heartbeat, and the dead letter of an
  entry delivered more than ``max_deliveries`` times;
- on shutdown, the entries this process fetched but did not finish are marked idle at
  once so another replica reclaims them on its next pass instead of after the idle time;
- consumers that are gone (no pending entries, idle for long, not announced) are deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Any

import redis.asyncio as aioredis

from contracts.streams import GROUPS
from services.runner import EntryRunner

log = logging.getLogger("loopline.reliability")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Reclaimer:
    """Per process and service: takes over idle entries of the service's streams."""

    def __init__(
        self,
        *,
        redis: aioredis.Redis,
        service: str,
        consumer: str,
        runners: Mapping[str, EntryRunner],
        claim_idle_ms: int,
        consumers_key: str,
        interval_s: float | None = None,
    ) -> None:
        self.redis = redis
        self.service = service
        self.group = GROUPS[service]
        self.consumer = consumer
        self.runners = runners
        """Each stream's entry runner, by stream."""
        self.claim_idle_ms = claim_idle_ms
        self.consumers_key = consumers_key
        self.interval_s = interval_s if interval_s is not None else claim_idle_ms / 2000
        self.reclaimed = 0
        self._task: asyncio.Task[None] | None = None
        self._passes = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"reclaim-{self.service}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def _run(self) -> None:
        while True:
            try:
                await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # Redis restarting, say: try again next pass
                log.warning("reclaim pass failed for %s", self.service, exc_info=True)
            await asyncio.sleep(self.interval_s)

    async def run_once(self) -> int:
        """One pass over every stream; returns how many entries were taken over."""
        taken = 0
        for stream, runner in self.runners.items():
            taken += await self._reclaim_stream(stream, runner)
        self._passes += 1
        if self._passes % 20 == 1:
            await self.clean_stale_consumers()
        return taken

    async def _reclaim_stream(self, stream: str, runner: EntryRunner) -> int:
        start = "0-0"
        taken = 0
        while True:
            # One at a time: an entry claimed in a batch would sit idle (no heartbeat) while
            # the ones before it run, and another replica would claim it again.
            reply: Any = await self.redis.xautoclaim(
                stream, self.group, self.consumer, self.claim_idle_ms, start_id=start, count=1
            )
            claimed_at = time.monotonic()
            start, entries = _text(reply[0]), reply[1]
            for entry_id_raw, fields in entries:
                if fields is None:  # deleted while pending
                    await self.redis.xack(stream, self.group, entry_id_raw)
                    continue
                taken += 1
                self.reclaimed += 1
                await self._take_over(runner, _text(entry_id_raw), fields, claimed_at)
            if start == "0-0":
                return taken

    async def _take_over(
        self, runner: EntryRunner, entry_id: str, fields: Any, claimed_at: float
    ) -> None:
        stream = runner.stream
        info: Any = await self.redis.xpending_range(
            stream, self.group, min=entry_id, max=entry_id, count=1
        )
        if not info:  # its owner finished it after all
            return
        deliveries = int(info[0]["times_delivered"])
        log.info("reclaimed %s %s (delivery %d)", stream, entry_id, deliveries)
        await runner.run(entry_id, fields, deliveries, claimed_at)

    async def release(self) -> int:
        """Mark this consumer's unfinished entries idle so others take them at once."""
        released = 0
        for stream in self.runners:
            with contextlib.suppress(aioredis.RedisError):
                pending: Any = await self.redis.xpending_range(
                    stream, self.group, min="-", max="+", count=10_000, consumername=self.consumer
                )
                ids = [p["message_id"] for p in pending]
                if ids:
                    idle = 10 * self.claim_idle_ms + 1
                    await self.redis.xclaim(
                        stream, self.group, self.consumer, 0, ids, idle=idle, justid=True
                    )
                    released += len(ids)
        return released

    async def clean_stale_consumers(self) -> int:
        """Delete consumers with nothing pending that have been idle for long (dead
        processes), and their announcements."""
        announced: Any = await self.redis.hgetall(self.consumers_key)
        stale_after_ms = max(20 * self.claim_idle_ms, 60_000)
        removed = 0
        for stream in self.runners:
            with contextlib.suppress(aioredis.ResponseError):
                consumers: Any = await self.redis.xinfo_consumers(stream, self.group)
                for c in consumers:
                    name = _text(c["name"])
                    if name == self.consumer or int(c["pending"]) > 0:
                        continue
                    if int(c["idle"]) < stale_after_ms:
                        continue
                    await self.redis.xgroup_delconsumer(stream, self.group, name)
                    removed += 1
                    if name.encode() in announced or name in announced:
                        await self.redis.hdel(self.consumers_key, name)
        return removed

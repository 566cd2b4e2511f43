"""Nothing lost, nothing done twice: what FastStream's stream subscriber does not do.

FastStream leaves an entry pending forever when its handler fails, and entries fetched but
not started at shutdown stay with a consumer that may never come back. Here:

- every entry is guarded (``guard_entry``): oversized and malformed events go to the
  dead-letter stream at once; a long handler keeps its claim fresh (a heartbeat resets the
  entry's idle time), so only entries of dead or stuck consumers ever look idle;
- a ``Reclaimer`` per process takes over entries idle longer than ``claim_idle_ms`` with
  XAUTOCLAIM, runs them through the same handler, and dead-letters an entry once it has
  been delivered ``max_deliveries`` times, with its last error;
- on shutdown, the entries this process fetched but did not finish are marked idle at
  once so another replica reclaims them on its next pass instead of after the idle time;
- consumers that are gone (no pending entries, idle for long, not announced) are deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis
from pydantic import ValidationError

from contracts.events import parse_event
from contracts.streams import DATA_FIELD, GROUPS
from services.errors import PermanentError

log = logging.getLogger("loopline.reliability")

EntryHandler = Callable[[Any], Awaitable[None]]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def entry_payload(fields: Any) -> Any:
    """The event a stream entry holds: the ``__data__`` field, else all fields."""
    if isinstance(fields, dict):
        data = fields.get(DATA_FIELD.encode(), fields.get(DATA_FIELD))
        if data is not None:
            return data
        return {_text(k): _text(v) for k, v in fields.items()}
    return fields


def decode_event(payload: Any, max_bytes: int) -> Any:
    """Parse a payload into an event or raise a PermanentError / ValidationError."""
    if isinstance(payload, bytes | str) and len(payload) > max_bytes:
        raise PermanentError(
            f"event of {len(payload)} bytes exceeds the limit of {max_bytes} bytes "
            "(LOOPLINE_MAX_EVENT_BYTES)"
        )
    if isinstance(payload, dict | bytes | str):
        try:
            return parse_event(payload)
        except ValidationError:
            raise
        except ValueError as exc:
            raise PermanentError(f"not a JSON event: {exc}") from exc
    raise PermanentError(f"not a JSON object: {type(payload).__name__}")


class Heartbeat:
    """Keeps an in-flight entry's idle time low while its handler runs, so the reclaimer
    never takes work from a live consumer however long a tool or model call lasts. Costs
    nothing for handlers shorter than a third of the claim idle time."""

    def __init__(
        self,
        redis: aioredis.Redis,
        stream: str,
        group: str,
        consumer: str,
        entry_id: str,
        every_s: float,
    ) -> None:
        self._args = (redis, stream, group, consumer, entry_id)
        self._every = every_s
        self._handle: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> Heartbeat:
        loop = asyncio.get_running_loop()
        self._handle = loop.call_later(self._every, self._begin)
        return self

    def _begin(self) -> None:
        self._task = asyncio.ensure_future(self._beat())

    async def _beat(self) -> None:
        redis, stream, group, consumer, entry_id = self._args
        while True:
            with contextlib.suppress(aioredis.RedisError):
                await redis.xclaim(stream, group, consumer, 0, [entry_id], justid=True)
            await asyncio.sleep(self._every)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        if self._task is not None:
            self._task.cancel()


class Reclaimer:
    """Per process and service: takes over idle entries of the service's streams."""

    def __init__(
        self,
        *,
        redis: aioredis.Redis,
        service: str,
        consumer: str,
        streams: dict[str, EntryHandler],
        claim_idle_ms: int,
        max_deliveries: int,
        errors_key: str,
        consumers_key: str,
        dead_letter: Callable[[str, str, Any, str, int], Awaitable[None]],
        interval_s: float | None = None,
    ) -> None:
        self.redis = redis
        self.service = service
        self.group = GROUPS[service]
        self.consumer = consumer
        self.streams = streams
        self.claim_idle_ms = claim_idle_ms
        self.max_deliveries = max_deliveries
        self.errors_key = errors_key
        self.consumers_key = consumers_key
        self.dead_letter = dead_letter
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
        for stream, handler in self.streams.items():
            taken += await self._reclaim_stream(stream, handler)
        self._passes += 1
        if self._passes % 20 == 1:
            await self.clean_stale_consumers()
        return taken

    async def _reclaim_stream(self, stream: str, handler: EntryHandler) -> int:
        start = "0-0"
        taken = 0
        while True:
            # One at a time: an entry claimed in a batch would sit idle (no heartbeat) while
            # the ones before it run, and another replica would claim it again.
            reply: Any = await self.redis.xautoclaim(
                stream, self.group, self.consumer, self.claim_idle_ms, start_id=start, count=1
            )
            start, entries = _text(reply[0]), reply[1]
            for entry_id_raw, fields in entries:
                if fields is None:  # deleted while pending
                    await self.redis.xack(stream, self.group, entry_id_raw)
                    continue
                taken += 1
                self.reclaimed += 1
                await self._retry(stream, _text(entry_id_raw), fields, handler)
            if start == "0-0":
                return taken

    async def _retry(self, stream: str, entry_id: str, fields: Any, handler: EntryHandler) -> None:
        info: Any = await self.redis.xpending_range(
            stream, self.group, min=entry_id, max=entry_id, count=1
        )
        if not info:  # its owner finished it after all
            return
        deliveries = int(info[0]["times_delivered"])
        error_field = f"{stream}|{entry_id}"
        payload = entry_payload(fields)
        if deliveries > self.max_deliveries:
            last_error = _text(await self.redis.hget(self.errors_key, error_field) or b"unknown")
            await self.dead_letter(
                stream,
                entry_id,
                payload,
                f"gave up after {deliveries - 1} deliveries; last error: {last_error}",
                deliveries - 1,
            )
            await self._finish(stream, entry_id, error_field)
            return
        log.info("reclaimed %s %s (delivery %d)", stream, entry_id, deliveries)
        beat = Heartbeat(
            self.redis, stream, self.group, self.consumer, entry_id, self.claim_idle_ms / 3000
        ).start()
        try:
            await handler(payload)
        except (PermanentError, ValidationError) as exc:
            await self.dead_letter(
                stream, entry_id, payload, f"{type(exc).__name__}: {exc}", deliveries
            )
        except Exception as exc:  # stays pending; the next pass retries it
            await self.redis.hset(self.errors_key, error_field, f"{type(exc).__name__}: {exc}")
            log.warning("retry of %s %s failed: %r", stream, entry_id, exc)
            return
        finally:
            beat.stop()
        await self._finish(stream, entry_id, error_field)

    async def _finish(self, stream: str, entry_id: str, error_field: str) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.xack(stream, self.group, entry_id)
            pipe.hdel(self.errors_key, error_field)
            await pipe.execute()

    async def release(self) -> int:
        """Mark this consumer's unfinished entries idle so others take them at once."""
        released = 0
        for stream in self.streams:
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
        for stream in self.streams:
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

"""Storage bounded by what is still needed: the streams are trimmed.

A work stream (tasks, loop, model, tools, ...) is read by consumer groups; an entry every
group has acknowledged is never read again, so each stream is trimmed (``XTRIM MINID``)
below the oldest entry some group still needs: its oldest pending entry, or the first it
has not been delivered. A stream without a group is left alone (its readers are unknown).
Public streams (todos, edits, approvals, the dead letters) are for outside subscribers,
who may read them at any time: they keep a length (``LOOPLINE_PUBLIC_MAXLEN``) and an age
(``LOOPLINE_PUBLIC_MAX_AGE_S``). Every replica may trim: trimming twice changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis

log = logging.getLogger("loopline")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _after(entry_id: str) -> str:
    """The smallest id after ``entry_id``."""
    ms, _, seq = entry_id.partition("-")
    return f"{ms}-{int(seq or 0) + 1}"


def _older(a: str, b: str) -> str:
    def key(entry_id: str) -> tuple[int, int]:
        ms, _, seq = entry_id.partition("-")
        return int(ms), int(seq or 0)

    return a if key(a) <= key(b) else b


async def needed_from(redis: aioredis.Redis, stream: str) -> str | None:
    """The oldest entry id of ``stream`` that some group has not acknowledged yet; None
    when the stream has no group."""
    try:
        groups: Any = await redis.xinfo_groups(stream)
    except aioredis.ResponseError:  # no such stream
        return None
    oldest: str | None = None
    for group in groups:
        name = _text(group["name"])
        if int(group.get("pending", 0)):
            summary: Any = await redis.xpending(stream, name)
            first = _text(summary["min"])
        else:
            first = _after(_text(group["last-delivered-id"]))
        oldest = first if oldest is None else _older(oldest, first)
    return oldest


async def trim_work_stream(redis: aioredis.Redis, stream: str) -> int:
    """Drop what every group of the stream has acknowledged; returns how many entries."""
    bound = await needed_from(redis, stream)
    if bound is None:
        return 0
    return int(await redis.xtrim(stream, minid=bound, approximate=False))


async def trim_public_stream(
    redis: aioredis.Redis, stream: str, *, maxlen: int, max_age_s: float
) -> int:
    """Keep at most ``maxlen`` entries, none older than ``max_age_s``."""
    removed = int(await redis.xtrim(stream, maxlen=maxlen, approximate=False))
    oldest_ms = int((time.time() - max_age_s) * 1000)
    removed += int(await redis.xtrim(stream, minid=f"{oldest_ms}-0", approximate=False))
    return removed


class StreamTrimmer:
    """Trims the given streams every ``interval_s`` (a service's background job)."""

    def __init__(
        self,
        redis: aioredis.Redis,
        *,
        work: Sequence[str],
        public: Sequence[str] = (),
        interval_s: float,
        public_maxlen: int,
        public_max_age_s: float,
    ) -> None:
        self.redis = redis
        self.work = list(work)
        self.public = list(public)
        self.interval_s = interval_s
        self.public_maxlen = public_maxlen
        self.public_max_age_s = public_max_age_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="stream-trimmer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def trim(self) -> int:
        removed = 0
        for stream in self.work:
            removed += await trim_work_stream(self.redis, stream)
        for stream in self.public:
            removed += await trim_public_stream(
                self.redis, stream, maxlen=self.public_maxlen, max_age_s=self.public_max_age_s
            )
        return removed

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                removed = await self.trim()
            except asyncio.CancelledError:
                raise
            except Exception:  # Redis restarting: trim again next time
                log.warning("trimming streams failed", exc_info=True)
                continue
            if removed:
                log.debug("trimmed %d acknowledged or expired stream entries", removed)

"""The loop's deadline sweeper."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from services.runtime import Runtime

log = logging.getLogger("loopline.loop")


class DeadlineSweeper:
    """Fails tasks past their deadline, even when nothing else happens to them (a model
    call that hangs). Any loop replica may sweep; the fail transition applies once."""

    def __init__(self, rt: Runtime, stop: Callable[[str, str, str], Awaitable[None]]) -> None:
        self.rt = rt
        self.stop_task = stop
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="deadline-sweeper")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def sweep(self) -> int:
        """Stop the tasks past their deadline (each partition's set of deadlines)."""
        swept = 0
        for key in self.rt.names.deadline_sets():
            swept += await self._sweep(key)
        return swept

    async def _sweep(self, key: str) -> int:
        now = time.time()
        due: Any = await self.rt.redis.zrangebyscore(key, "-inf", now, start=0, num=100)
        for raw in due:
            task_id = raw.decode() if isinstance(raw, bytes) else str(raw)
            await self.stop_task(task_id, "deadline exceeded", "deadline")
            await self.rt.redis.zrem(key, task_id)
        return len(due)

    async def _run(self) -> None:
        while True:
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception:  # Redis restarting: sweep again shortly
                log.warning("deadline sweep failed", exc_info=True)
            await asyncio.sleep(0.5)

"""Reading one input stream of one service: XREADGROUP in the service's group, under this
process's consumer name, handing each new entry to the stream's ``EntryRunner``
(``services.runner``), at most ``workers`` at once.

The per-entry path is loopline's own rather than FastStream's subscriber: FastStream's
(dependency injection, body decoding, logging and acknowledgement middlewares, the
concurrent subscriber's queue) costs more CPU per entry than most handlers do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import redis.asyncio as aioredis

from services.fastredis import stream_entries
from services.lending import lending
from services.runner import EntryRunner
from services.runtime import Runtime

log = logging.getLogger("loopline")


class StreamConsumer:
    """Reads one stream of one service and runs each new entry in its own task."""

    def __init__(self, runtime: Runtime, runner: EntryRunner) -> None:
        self.rt = runtime
        self.runner = runner
        self.service = runner.service
        self.stream = runner.stream
        self.group = runner.group
        self.consumer = runner.consumer
        settings = runtime.settings
        self.workers = settings.concurrency(self.service)
        self.batch = settings.read_batch
        self.block_ms = settings.poll_ms
        self._running: set[asyncio.Task[None]] = set()
        self._lent = 0
        """Slots that handlers waiting on runs of the deployment lent back
        (``services.lending``): read that many more entries meanwhile."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._room = asyncio.Event()
        self._read_task: asyncio.Task[None] | None = None
        self._stopping = False
        self._reader = runtime.fast.blocking() if runtime.fast is not None else None

    def start(self) -> None:
        name = f"read {self.service}:{self.stream}"
        self._loop = asyncio.get_running_loop()
        with lending(self):  # the handlers' tasks, made by the read loop, inherit it
            self._read_task = asyncio.create_task(self._read_loop(), name=name)

    def lend(self) -> None:
        """A handler waits on runs of the deployment: its slot is lent back."""
        self._on_loop(1)

    def reclaim(self) -> None:
        self._on_loop(-1)

    def _on_loop(self, change: int) -> None:
        """``_lent`` moves on this consumer's loop (a tool thread may lend)."""
        loop = self._loop
        assert loop is not None
        try:
            here = asyncio.get_running_loop() is loop
        except RuntimeError:
            here = False
        if here:
            self._lend_by(change)
        else:
            loop.call_soon_threadsafe(self._lend_by, change)

    def _lend_by(self, change: int) -> None:
        self._lent += change
        if len(self._running) < self.workers + self._lent:
            self._room.set()

    async def stop_reading(self) -> None:
        """Fetch nothing more: the read loop ends after its current XREADGROUP (it blocks
        ``poll_ms`` at most; what that read returns is handled). A read that does not end
        in time is cancelled; what Redis delivered to it stays pending under this
        consumer, and ``Reclaimer.release`` hands it on."""
        self._stopping = True
        self._room.set()  # a reader waiting for room looks at the flag again
        reader = self._read_task
        if reader is None:
            return
        done, _ = await asyncio.wait([reader], timeout=self.block_ms / 1000 + 2)
        if not done:
            reader.cancel()
            await asyncio.wait([reader], timeout=2)  # never wait on a cancelled read forever

    def in_flight(self) -> list[asyncio.Task[None]]:
        return list(self._running)

    async def stop(self) -> None:
        await self.stop_reading()
        tasks = [task for task in self._running if not task.done()]
        if self._read_task is not None and not self._read_task.done():
            tasks.append(self._read_task)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)
        if self._reader is not None:
            self._reader.close()

    async def _read(self, count: int) -> list[tuple[bytes, Any]]:
        """One XREADGROUP of new entries (blocking up to ``poll_ms``)."""
        if self._reader is not None:  # its own connection: a blocked read holds it
            reply = await self._reader.execute(
                "XREADGROUP", "GROUP", self.group, self.consumer, "COUNT", count,
                "BLOCK", self.block_ms, "STREAMS", self.stream, ">",
            )  # fmt: skip
            return stream_entries(reply)
        streams: Any = {self.stream: ">"}
        found: Any = await self.rt.redis.xreadgroup(
            self.group, self.consumer, streams, count=count, block=self.block_ms
        )
        return [entry for _stream, entries in found or () for entry in entries]

    async def _read_loop(self) -> None:
        backoff = 0.1
        while not self._stopping:
            free = self.workers + self._lent - len(self._running)
            if free <= 0:
                self._room.clear()
                await self._room.wait()
                continue
            try:
                entries = await self._read(min(free, self.batch))
                backoff = 0.1
            except asyncio.CancelledError:
                raise
            except aioredis.ResponseError as exc:
                await self._read_failed(exc, backoff)
                continue
            except Exception as exc:  # Redis restarting, say: read again shortly
                log.warning("reading %s failed: %r; retrying in %.1fs", self.stream, exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            if not entries:
                continue
            run, now = self.runner.run, time.monotonic()
            for entry_id, fields in entries:
                task = asyncio.create_task(run(entry_id, fields, 1, now))
                self._running.add(task)
                task.add_done_callback(self._finished)
            # Let the handlers send their first command before this loop sends its next
            # XREADGROUP: a send costs a syscall, and the handler's is the critical path.
            await asyncio.sleep(0)

    async def _read_failed(self, exc: aioredis.ResponseError, backoff: float) -> None:
        if "NOGROUP" not in str(exc):
            log.error("reading %s failed: %r", self.stream, exc)
            await asyncio.sleep(backoff)
            return
        # The group is gone (Redis flushed, or restarted without persistence).
        log.warning("group %s of %s is gone: creating it again", self.group, self.stream)
        with contextlib.suppress(aioredis.ResponseError):
            await self.rt.redis.xgroup_create(self.stream, self.group, id="0", mkstream=True)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        if len(self._running) < self.workers + self._lent:
            self._room.set()

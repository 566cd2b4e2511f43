"""The FastStream app that runs the stream consumers of some services in one process.

``build_app`` gives each input stream of each service an ``EntryRunner`` and a
``StreamConsumer`` reading in the service's consumer group, pre-created at ``0``
(FastStream would create it at ``$`` and skip events published before the first start),
under a consumer name unique to the process; and each service a ``Reclaimer`` handing the
entries that dead consumers left to the same runners. FastStream runs the app
(lifecycle, signals, ``faststream run``); the per-entry path is loopline's own
(``services.consumer``, ``services.runner``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Sequence

import redis.asyncio as aioredis
from faststream import FastStream

from contracts.streams import GROUPS, Names
from services import telemetry
from services.consumer import StreamConsumer
from services.redisconn import make_broker
from services.reliability import Reclaimer
from services.runner import EntryRunner
from services.runtime import Runtime, ServiceFactory
from services.settings import Settings
from services.tasks.loop import Loop
from services.trimming import StreamTrimmer

log = logging.getLogger("loopline")


def tune_gc(threshold: int) -> None:
    """Tune the garbage collector of a process that runs services and nothing else
    (``loopline serve`` / ``up``; the benchmarks give their in-process LangChain baseline
    the same). Such a process holds many live objects (transcripts, messages, in-flight
    handlers), and Python's default collector (a collection every 700 allocations) walked
    them so often that it took about a third of the model service's CPU under load
    (measured: 7.0 s against 4.4 s of CPU for 2,000 concurrent tasks). What is loaded at
    start lives as long as the process, so it is frozen out of collections, and young
    collections run ``threshold`` / 700 times less often. 0 keeps Python's defaults."""
    if threshold <= 0:
        return
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(threshold, 20, 50)


def consumer_name(service: str) -> str:
    """Unique per process: replicas in one group must never share a name (their pending
    entries would be indistinguishable), also under ``faststream run --workers``."""
    return f"{service}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class PartitionsDiffer(RuntimeError):
    """The deployment's work streams are split into another number of partitions."""


async def agree_on_partitions(redis: aioredis.Redis, names: Names) -> None:
    """Record the deployment's number of partitions on first start, and refuse to start
    with another: a task's partition is its id's hash modulo that number, so processes
    that disagree would look for its keys and events in different places. A deployment
    without partitions records nothing (as before partitions existed)."""
    if names.partitions:
        await redis.set(names.partitions_key, names.partitions, nx=True)
    recorded = int(await redis.get(names.partitions_key) or 0)
    if recorded != names.partitions:
        raise PartitionsDiffer(
            f"the deployment {names.prefix!r} splits its work streams into {recorded} "
            f"partitions (LOOPLINE_PARTITIONS), this process into {names.partitions}: "
            "start it with the deployment's number"
        )


async def ensure_groups(redis: aioredis.Redis, names: Names, services: Sequence[str]) -> None:
    """Create each group at ``0`` so nothing published before the first start is skipped."""
    for service in services:
        for stream in names.inputs_of(service):
            try:
                await redis.xgroup_create(stream, GROUPS[service], id="0", mkstream=True)
            except aioredis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise


async def register_consumers(runtime: Runtime) -> None:
    """Announce this process's consumers once they read: a readiness signal for tests and
    ``status`` (Redis 7.0 lists a group's consumer only after its first delivery)."""
    started = time.time()
    await runtime.redis.hset(
        runtime.names.consumers,
        mapping={
            name: json.dumps(
                {
                    "service": service,
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "started": started,
                }
            )
            for service, name in runtime.consumers.items()
        },
    )


class ConsumerAnnouncer:
    """Announces this process's consumers again whenever their entries are gone from the
    consumers hash (Redis restarted without persistence, or was flushed), so ``status``
    counts the live consumers within seconds of a restart."""

    EVERY_S = 2.0

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="consumer-announcer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        runtime = self.runtime
        while True:
            await asyncio.sleep(self.EVERY_S)
            names = list(runtime.consumers.values())
            try:
                if names and not await runtime.redis.hexists(runtime.names.consumers, names[0]):
                    log.warning("this process's consumers were not listed: announcing again")
                    await register_consumers(runtime)
            except asyncio.CancelledError:
                raise
            except Exception:  # Redis restarting: look again shortly
                log.debug("checking the consumer list failed", exc_info=True)


class ServiceConsumers:
    """The entry runners, stream consumers and reclaimers of the services of one process,
    started and stopped together (and in order: nothing is read once shutdown began, and
    what was read may finish within the graceful timeout)."""

    def __init__(
        self,
        runtime: Runtime,
        services: Sequence[str],
        factory: Callable[[str], ServiceFactory],
    ) -> None:
        self.runtime = runtime
        self.runners: list[EntryRunner] = []
        self.consumers: list[StreamConsumer] = []
        self.reclaimers: list[Reclaimer] = []
        settings = runtime.settings
        for service in services:
            consumer = runtime.consumers.setdefault(service, consumer_name(service))
            handlers = factory(service)(runtime)
            runners = {
                stream: EntryRunner(runtime, service, stream, handler, consumer)
                for stream, handler in handlers.items()
            }
            self.runners += runners.values()
            self.consumers += [StreamConsumer(runtime, runner) for runner in runners.values()]
            self.reclaimers.append(
                Reclaimer(
                    redis=runtime.redis,
                    service=service,
                    consumer=consumer,
                    runners=runners,
                    claim_idle_ms=settings.claim_idle_ms,
                    consumers_key=runtime.names.consumers,
                )
            )

    async def start(self) -> None:
        for runner in self.runners:
            runner.start()
        for consumer in self.consumers:
            consumer.start()
        await register_consumers(self.runtime)
        for reclaimer in self.reclaimers:
            reclaimer.start()
        for task in self.runtime.background:
            task.start()

    async def stop(self) -> None:
        runtime = self.runtime
        for consumer in self.consumers:
            await consumer.stop_reading()
        for task in runtime.background:
            await task.stop()
        for reclaimer in self.reclaimers:
            await reclaimer.stop()
        # In-flight handlers may finish (and commit) for up to the graceful timeout.
        running = [task for consumer in self.consumers for task in consumer.in_flight()]
        if running:
            await asyncio.wait(running, timeout=runtime.settings.graceful_timeout_s)
        for consumer in self.consumers:
            await consumer.stop()
        for runner in self.runners:
            await runner.stop()
        await runtime.redis.hdel(runtime.names.consumers, *runtime.consumers.values())

    async def release(self) -> None:
        """What is still pending here was fetched but not finished: hand it to the other
        replicas now."""
        for reclaimer in self.reclaimers:
            released = await reclaimer.release()
            if released:
                log.info("released %d unfinished %s entries", released, reclaimer.service)


def trimmer(runtime: Runtime, services: Sequence[str]) -> StreamTrimmer:
    """Trims the input streams of these services, and (in the loop's process) the public
    streams (``services.trimming``)."""
    names, settings = runtime.names, runtime.settings
    public = [names.todos, names.edits, names.approvals, names.dlq] if "loop" in services else []
    return StreamTrimmer(
        runtime.redis,
        work=[stream for service in services for stream in names.inputs_of(service)],
        public=public,
        interval_s=settings.trim_interval_s,
        public_maxlen=settings.public_maxlen,
        public_max_age_s=settings.public_max_age_s,
    )


def build_app(
    services: Sequence[str],
    factory: Callable[[str], ServiceFactory],
    *,
    url: str | None = None,
    settings: Settings | None = None,
) -> tuple[FastStream, Runtime]:
    """One FastStream app running the given services on one broker connection;
    ``factory``: a service's handler factory by its name (``services.registry.factory``)."""
    settings = settings or Settings()
    url = url or settings.redis_url
    if not url:
        raise RuntimeError("REDIS_URL is not set")
    telemetry.configure("+".join(services))
    runtime = Runtime(url, settings)
    # FastStream logs every message at INFO; keep that at DEBUG so service logs stay useful.
    broker_log = logging.getLogger("loopline.broker")
    if broker_log.level == logging.NOTSET:
        broker_log.setLevel(logging.WARNING)
    broker = make_broker(url, log_level=logging.DEBUG, logger=broker_log)
    group = ServiceConsumers(runtime, services, factory)
    runtime.on_refused = Loop(runtime).event_refused  # a dead-lettered event ends its task
    runtime.background.append(trimmer(runtime, services))
    runtime.background.append(ConsumerAnnouncer(runtime))
    app = FastStream(broker, logger=log)

    @app.on_startup
    async def _create_groups() -> None:
        await agree_on_partitions(runtime.redis, runtime.names)
        await ensure_groups(runtime.redis, runtime.names, services)

    @app.after_startup
    async def _start() -> None:
        await group.start()

    @app.on_shutdown
    async def _stop() -> None:
        await group.stop()

    @app.after_shutdown
    async def _release_and_close() -> None:
        # In-flight handlers are done (or timed out): hand on what they did not finish.
        await group.release()
        await runtime.close()

    return app, runtime

"""What every service shares: the Redis connection, caches, publishing, dead letters, and
the FastStream app that runs the stream consumers of its services.

A handler is an async function of one parsed event. ``build_app`` gives each of its
streams a ``StreamConsumer`` reading with a consumer group pre-created at ``0`` (FastStream
would create it at ``$`` and skip events published before the first start) and a consumer
name unique to the process. A handler that raises ``PermanentError`` (or a validation
error) sends the entry to the dead-letter stream with the reason and acks it; the consumer
keeps running.

What a handler publishes is sent when it returns, together with the entry's XACK, in one
Lua script: one round trip instead of one per publish plus one for the ack, and the ack
can never be applied without the publishes (on a Redis Cluster: publishes, then the ack).
FastStream runs the app (lifecycle, signals, ``faststream run``); the per-entry path is
this module's own, because FastStream's (dependency injection, body decoding, logging
and acknowledgement middlewares, the concurrent subscriber's queue) cost more CPU per
entry than most handlers: measured with ``benchmarks/``, CPU per agent step fell from
~12.6 to ~7.5 ms and step latency p50 from ~21 to ~17 ms on the same run.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import socket
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import redis.asyncio as aioredis
from faststream import FastStream
from pydantic import ValidationError

from contracts.agent import AgentSpec
from contracts.events import AnyEvent, DeadLettered, Event, dump_event, parse_event
from contracts.messages import MESSAGE_ADAPTER, Message
from contracts.streams import DATA_FIELD, GROUPS, Names
from services import telemetry
from services.entry import COMMIT_SCRIPT, CURRENT, PendingCommit, ScriptCall, commit_parts
from services.errors import PayloadTooLarge, PermanentError, UnknownAgent
from services.fastredis import FastRedis, FastScript, stream_entries
from services.redisconn import async_client, commit_in_steps, is_cluster, make_broker, retrying
from services.reliability import Reclaimer, decode_event, entry_payload
from services.settings import Settings

log = logging.getLogger("loopline")

Handler = Callable[[AnyEvent], Awaitable[None]]


class Background(Protocol):
    """A periodic job a service runs beside its handlers (the loop's deadline sweeper)."""

    def start(self) -> None: ...

    async def stop(self) -> None: ...


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


MAX_CONNECTIONS = 128
"""Redis connections per process. Handlers beyond it wait for a free one (redis-py's
default pool raises past 100, which a burst of model calls in flight reaches)."""


def _single_server_client(url: str) -> aioredis.Redis:
    pool = aioredis.BlockingConnectionPool.from_url(
        url, max_connections=MAX_CONNECTIONS, timeout=None, retry=retrying()
    )
    client = aioredis.Redis(connection_pool=pool)
    client.auto_close_connection_pool = True  # aclose() closes the pool too
    return client


class Runtime:
    """Process-wide resources of the services running in this process."""

    def __init__(self, url: str, settings: Settings) -> None:
        self.url = url
        self.settings = settings
        self.names = Names(settings.prefix)
        self.cluster = is_cluster(url)  # a Redis Cluster: see services.redisconn
        self.redis: aioredis.Redis = (
            async_client(url) if self.cluster else _single_server_client(url)
        )
        # The per-entry commands go through a lean client where the URL allows it.
        self.fast = None if self.cluster else FastRedis.from_url(url)
        self._commit_script = self.register_script(COMMIT_SCRIPT)
        self._agents: dict[str, AgentSpec] = {}
        self.consumers: dict[str, str] = {}  # service -> this process's consumer name
        self.stream_services: dict[str, str] = {}  # input stream -> service consuming it
        self.reclaimers: list[Reclaimer] = []
        self.background: list[Background] = []
        self._transcripts: OrderedDict[str, list[Message]] = OrderedDict()

    async def close(self) -> None:
        if self.fast is not None:
            self.fast.close()
        await self.redis.aclose()

    def register_script(self, lua: str) -> ScriptCall:
        """A Lua script to run on the hot path (``FastScript``, or redis-py's)."""
        if self.fast is not None:
            return FastScript(self.fast, lua)
        return self.redis.register_script(lua)

    async def command(self, *args: str | bytes | int | float) -> Any:
        """One command on the hot path, its raw reply (integers as ints, not bools)."""
        if self.fast is not None:
            return await self.fast.execute(*args)
        return await self.redis.execute_command(*args)  # type: ignore[no-untyped-call]

    def encode(self, event: Event) -> bytes:
        if telemetry.TRACING and event.trace is None:  # the task's trace rides along
            event = event.model_copy(update={"trace": telemetry.traceparent()})
        data = dump_event(event)
        if len(data) > self.settings.max_event_bytes:
            raise PayloadTooLarge(
                f"{event.__class__.__name__} of {len(data)} bytes exceeds the limit of "
                f"{self.settings.max_event_bytes} bytes (LOOPLINE_MAX_EVENT_BYTES)"
            )
        return data

    async def publish(self, stream: str, event: Event) -> None:
        """Publish an event. Inside a consumer's handler it is sent when the handler
        returns, with the entry's ack (encoding, and so the size check, happens now)."""
        data = self.encode(event)
        entry = _open_entry()
        if entry is not None:
            entry.outbox.append((stream, data))
            return
        await self.redis.xadd(stream, {DATA_FIELD: data})

    async def write(self, key: str, field: str, value: str | bytes) -> None:
        """A hash write; inside a consumer's handler it is applied with the entry's ack
        (a tool call's recorded outcome, say), else now."""
        entry = _open_entry()
        if entry is not None:
            entry.writes.append((key, field, value))
            return
        await self.redis.hset(key, field, value)

    def outbox_mark(self) -> tuple[int, int]:
        """Where the current entry's publishes and writes end now (``outbox_rollback``)."""
        entry = CURRENT.get()
        return (len(entry.outbox), len(entry.writes)) if entry is not None else (0, 0)

    def outbox_rollback(self, mark: tuple[int, int]) -> None:
        """Drop what was queued since ``mark`` (an attempt that failed)."""
        entry = CURRENT.get()
        if entry is not None:
            del entry.outbox[mark[0] :]
            del entry.writes[mark[1] :]

    async def publish_many(self, items: Sequence[tuple[str, Event]]) -> None:
        """Several events in one round trip (a step's parallel tool calls)."""
        encoded = [(stream, self.encode(event)) for stream, event in items]
        entry = _open_entry()
        if entry is not None:
            entry.outbox.extend(encoded)
            return
        if len(encoded) == 1:
            await self.redis.xadd(encoded[0][0], {DATA_FIELD: encoded[0][1]})
            return
        async with self.redis.pipeline(transaction=False) as pipe:
            for stream, data in encoded:
                pipe.xadd(stream, {DATA_FIELD: data})
            await pipe.execute()

    async def commit(
        self,
        entry: PendingCommit,
        *,
        ack: bool = True,
        error: tuple[str, str] | None = None,
    ) -> None:
        """Send a handled entry's publishes and writes, then its ack or its error (field,
        text), atomically (one script: all of it or nothing)."""
        outbox, writes = entry.outbox, entry.writes
        if not outbox and not writes and error is None:
            if ack:
                await self.command("XACK", *entry.ack)
            return
        if self.cluster:  # one script cannot span slots: writes, publishes, then the ack
            errors = self.names.errors
            for key, name, value in writes:
                await self.redis.hset(key, name, value)
            await commit_in_steps(
                self.redis,
                outbox,
                ack=entry.ack if ack else None,
                error=error,
                errors_key=errors,
            )
            return
        # One EVALSHA costs about half the client CPU of the same commands in a MULTI/EXEC
        # pipeline (measured: ~150 vs ~250 µs), and is just as atomic.
        keys, args = commit_parts(
            outbox,
            writes,
            ack=entry.ack if ack and error is None else None,
            error=(self.names.errors, *error) if error is not None else None,
        )
        await self._commit_script(keys=keys, args=args)

    async def save_agent(self, spec: AgentSpec) -> str:
        agent_id = spec.agent_id
        if agent_id not in self._agents:
            await self.redis.set(self.names.agent(agent_id), spec.model_dump_json(), nx=True)
            self._agents[agent_id] = spec
        return agent_id

    async def agent(self, agent_id: str) -> AgentSpec:
        """Specs are immutable (content-addressed), so a cached copy never goes stale."""
        spec = self._agents.get(agent_id)
        if spec is None:
            raw = await self.redis.get(self.names.agent(agent_id))
            if raw is None:
                raise UnknownAgent(f"no agent spec stored under id {agent_id!r}")
            spec = AgentSpec.model_validate_json(raw)
            self._agents[agent_id] = spec
        return spec

    async def transcript(
        self, task_id: str, length: int, rev: int = 0, last: Message | None = None
    ) -> list[Message]:
        """The first ``length`` messages; reads from Redis only what this process lacks.
        A rewrite by middleware bumps ``rev``, which starts a fresh cache entry. ``last``:
        the message at ``length - 1`` when the caller has it (``ModelRequested``)."""
        key = f"{task_id}:{rev}"
        if last is not None:
            self.remember(task_id, rev, length - 1, last)
        cached = self._transcripts.get(key)
        if cached is None:
            cached = []
            self._transcripts[key] = cached
            if len(self._transcripts) > self.settings.transcript_cache_tasks:
                self._transcripts.popitem(last=False)
        else:
            self._transcripts.move_to_end(key)
        if len(cached) < length:
            start = len(cached)
            raw = await self.command("LRANGE", self.names.task_messages(task_id), start, length - 1)
            # Another coroutine may have filled the same cache while this one awaited
            # (parallel calls of one step, a redelivery): add only what is still missing.
            fresh = raw[len(cached) - start :]
            cached.extend(MESSAGE_ADAPTER.validate_json(item) for item in fresh)
        return cached[:length]

    def remember(self, task_id: str, rev: int, at: int, message: Message) -> None:
        """The message that stands at ``at`` in the stored transcript, known without
        reading it: kept when the cached transcript ends right before it."""
        cached = self._transcripts.get(f"{task_id}:{rev}")
        if cached is not None and len(cached) == at:
            cached.append(message)

    def forget(self, task_id: str, rev: int = 0) -> None:
        self._transcripts.pop(f"{task_id}:{rev}", None)

    async def dead_letter(
        self, stream: str, entry_id: str, payload: Any, error: str, deliveries: int = 1
    ) -> None:
        data = self.dead_letter_data(stream, entry_id, payload, error, deliveries)
        # No size limit here: an oversized entry is kept whole, so nothing is lost.
        await self.redis.xadd(self.names.dlq, {DATA_FIELD: data})
        log.warning("dead-lettered %s %s: %s", stream, entry_id, error)

    def dead_letter_data(
        self, stream: str, entry_id: str, payload: Any, error: str, deliveries: int = 1
    ) -> bytes:
        """The DeadLettered event for an entry, encoded (no size limit: kept whole)."""
        if isinstance(payload, bytes):
            text = payload.decode("utf-8", "replace")
        else:
            text = payload if isinstance(payload, str) else repr(payload)
        task_id = ""
        with contextlib.suppress(ValidationError, ValueError):
            task_id = str(parse_event(text).task_id)
        event = DeadLettered(
            task_id=task_id,
            stream=stream,
            entry_id=entry_id,
            payload=text,
            error=error,
            deliveries=deliveries,
        )
        return dump_event(event)


class StreamConsumer:
    """Reads one input stream of one service (XREADGROUP in its group, under this process's
    consumer name) and runs the handler on each entry, at most ``workers`` at once.

    Per entry: parse (an oversized, malformed or unknown event goes to the dead-letter
    stream and is acked), run the handler, then send what it published and the ack in one
    atomic script (``Runtime.commit``). A failure other than a permanent one keeps the
    entry pending, with its error kept for the reclaimer, which retries it and
    dead-letters it after N deliveries.
    While a handler runs longer than a third of the claim idle time, a heartbeat (one
    XCLAIM per stream for all such entries) keeps the reclaimers of other processes off it.
    """

    def __init__(self, runtime: Runtime, service: str, stream: str, handler: Handler) -> None:
        self.rt = runtime
        self.service = service
        self.stream = stream
        self.group = GROUPS[service]
        self.consumer = runtime.consumers[service]
        self.handler = handler
        settings = runtime.settings
        self.workers = settings.concurrency(service)
        self.batch = settings.read_batch
        self.block_ms = settings.poll_ms
        self.max_bytes = settings.max_event_bytes
        self.heartbeat_s = settings.claim_idle_ms / 3000
        self._inflight: dict[bytes, tuple[asyncio.Task[None], float]] = {}
        self._room = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self._reader = runtime.fast.blocking() if runtime.fast is not None else None

    def start(self) -> None:
        name = f"{self.service}:{self.stream}"
        self._tasks = [
            asyncio.create_task(self._read_loop(), name=f"read {name}"),
            asyncio.create_task(self._beat_loop(), name=f"heartbeat {name}"),
        ]

    async def stop_reading(self) -> None:
        """Fetch nothing more: the read loop ends after its current XREADGROUP (it blocks
        ``poll_ms`` at most; what that read returns is handled). A read that does not end
        in time is cancelled; what Redis delivered to it stays pending under this
        consumer, and ``Reclaimer.release`` hands it on."""
        self._stopping = True
        self._room.set()  # a reader waiting for room looks at the flag again
        reader = self._tasks[:1]
        if reader and not (await asyncio.wait(reader, timeout=self.block_ms / 1000 + 2))[0]:
            reader[0].cancel()
            await asyncio.wait(reader, timeout=2)  # never wait on a cancelled read forever

    def in_flight(self) -> list[asyncio.Task[None]]:
        return [task for task, _ in self._inflight.values()]

    async def stop(self) -> None:
        await self.stop_reading()
        tasks = [task for task in (*self.in_flight(), *self._tasks) if not task.done()]
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
        redis = self.rt.redis
        backoff = 0.1
        while not self._stopping:
            free = self.workers - len(self._inflight)
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
                if "NOGROUP" not in str(exc):
                    log.error("reading %s failed: %r", self.stream, exc)
                    await asyncio.sleep(backoff)
                    continue
                # The group is gone (Redis flushed, or restarted without persistence).
                log.warning("group %s of %s is gone: creating it again", self.group, self.stream)
                with contextlib.suppress(aioredis.ResponseError):
                    await redis.xgroup_create(self.stream, self.group, id="0", mkstream=True)
                continue
            except Exception as exc:  # Redis restarting, say: read again shortly
                log.warning("reading %s failed: %r; retrying in %.1fs", self.stream, exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            if not entries:
                continue
            now = time.monotonic()
            for entry_id, fields in entries:
                task = asyncio.create_task(self._handle(entry_id, fields))
                self._inflight[entry_id] = (task, now)
                task.add_done_callback(functools.partial(self._finished, entry_id))
            # Let the handlers send their first command before this loop sends its next
            # XREADGROUP: a send costs a syscall, and the handler's is the critical path.
            await asyncio.sleep(0)

    def _finished(self, entry_id: bytes, _task: asyncio.Task[None]) -> None:
        self._inflight.pop(entry_id, None)
        if len(self._inflight) < self.workers:
            self._room.set()

    async def _handle(self, raw_id: bytes, fields: Any) -> None:
        rt = self.rt
        entry_id = _text(raw_id)
        payload = entry_payload(fields)
        entry = PendingCommit(self.stream, self.group, entry_id)
        CURRENT.set(entry)  # this task's own context
        outbox = entry.outbox
        try:
            event = decode_event(payload, self.max_bytes)
            with telemetry.consuming(self.service, self.stream, event):
                await self.handler(event)
        except (PermanentError, ValidationError) as exc:
            if entry.committed:  # a failure after its transition committed it: a bug
                log.error("%s %s failed after its commit: %r", self.stream, entry_id, exc)
                return
            reason = f"{type(exc).__name__}: {exc}"
            outbox.append(
                (rt.names.dlq, rt.dead_letter_data(self.stream, entry_id, payload, reason))
            )
            try:
                await rt.commit(entry)
            except Exception:
                log.exception("dead-lettering %s %s failed", self.stream, entry_id)
                return
            log.warning("dead-lettered %s %s: %s", self.stream, entry_id, reason)
        except Exception as exc:
            log.error("handling %s %s failed: %r", self.stream, entry_id, exc, exc_info=exc)
            if entry.committed:
                return
            error = (f"{self.stream}|{entry_id}", f"{type(exc).__name__}: {exc}")
            with contextlib.suppress(Exception):
                await rt.commit(entry, ack=False, error=error)
        else:
            if entry.committed:  # a fused transition sent it all, with the ack
                return
            try:
                await rt.commit(entry)
            except Exception as exc:  # stays pending: the reclaimer redelivers it
                log.error("committing %s %s failed: %r", self.stream, entry_id, exc)

    async def _beat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            due = time.monotonic() - self.heartbeat_s
            ids: list[Any] = [
                entry_id for entry_id, (_, since) in self._inflight.items() if since <= due
            ]
            if ids:
                with contextlib.suppress(aioredis.RedisError):
                    await self.rt.redis.xclaim(
                        self.stream, self.group, self.consumer, 0, ids, justid=True
                    )


def _open_entry() -> PendingCommit | None:
    entry = CURRENT.get()
    if entry is not None and entry.committed:
        raise RuntimeError("the entry was committed by its transition: nothing can follow")
    return entry


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


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


def _entry_handler(runtime: Runtime, handler: Handler) -> Callable[[Any], Awaitable[None]]:
    """Payload -> event -> handler; what the reclaimer calls."""
    limit = runtime.settings.max_event_bytes

    async def on_entry(body: Any) -> None:
        await handler(decode_event(body, limit))

    return on_entry


ServiceFactory = Callable[[Runtime], dict[str, Handler]]


def build_app(
    services: Sequence[str],
    factory: Callable[[str], ServiceFactory],
    *,
    url: str | None = None,
    settings: Settings | None = None,
) -> tuple[FastStream, Runtime]:
    """One FastStream app running the given services on one broker connection;
    ``factory(service)`` gives each service's handlers (``services.registry.factory``)."""
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
    consumers: list[StreamConsumer] = []
    for service in services:
        runtime.consumers.setdefault(service, consumer_name(service))
        handlers = factory(service)(runtime)
        for stream, handler in handlers.items():
            runtime.stream_services[stream] = service
            consumers.append(StreamConsumer(runtime, service, stream, handler))
        runtime.reclaimers.append(
            Reclaimer(
                redis=runtime.redis,
                service=service,
                consumer=runtime.consumers[service],
                streams={s: _entry_handler(runtime, h) for s, h in handlers.items()},
                claim_idle_ms=settings.claim_idle_ms,
                max_deliveries=settings.max_deliveries,
                errors_key=runtime.names.errors,
                consumers_key=runtime.names.consumers,
                dead_letter=runtime.dead_letter,
            )
        )
    app = FastStream(broker, logger=log)

    @app.on_startup
    async def _create_groups() -> None:
        await ensure_groups(runtime.redis, runtime.names, services)

    @app.after_startup
    async def _register() -> None:
        for consumer in consumers:
            consumer.start()
        await register_consumers(runtime)
        for reclaimer in runtime.reclaimers:
            reclaimer.start()
        for task in runtime.background:
            task.start()

    @app.on_shutdown
    async def _unregister() -> None:
        for consumer in consumers:
            await consumer.stop_reading()
        for task in runtime.background:
            await task.stop()
        for reclaimer in runtime.reclaimers:
            await reclaimer.stop()
        # In-flight handlers may finish (and commit) for up to the graceful timeout.
        running = [task for consumer in consumers for task in consumer.in_flight()]
        if running:
            await asyncio.wait(running, timeout=settings.graceful_timeout_s)
        for consumer in consumers:
            await consumer.stop()
        await runtime.redis.hdel(runtime.names.consumers, *runtime.consumers.values())

    @app.after_shutdown
    async def _release_and_close() -> None:
        # In-flight handlers are done (or timed out); what is still pending here was
        # fetched but not finished: hand it to the other replicas now.
        for reclaimer in runtime.reclaimers:
            released = await reclaimer.release()
            if released:
                log.info("released %d unfinished %s entries", released, reclaimer.service)
        await runtime.close()

    return app, runtime

"""What every service shares: the Redis connection, caches, publishing, dead letters, and
the FastStream app that wires handlers to consumer groups.

A handler is an async function of one parsed event. ``build_app`` subscribes it to its
streams with a consumer group pre-created at ``0`` (FastStream would create it at ``$``
and skip events published before the first start) and a consumer name unique to the
process. A handler that raises ``PermanentError`` (or a validation error) sends the entry
to the dead-letter stream with the reason and acks it; the consumer keeps running.
"""

from __future__ import annotations

import contextlib
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
from faststream import BaseMiddleware, FastStream
from faststream.redis import RedisBroker, StreamSub
from pydantic import ValidationError

from contracts.agent import AgentSpec
from contracts.events import AnyEvent, DeadLettered, Event, dump_event, parse_event
from contracts.messages import MESSAGE_ADAPTER, Message
from contracts.streams import DATA_FIELD, GROUPS, Names
from services.errors import PayloadTooLarge, PermanentError, UnknownAgent
from services.reliability import Heartbeat, Reclaimer, decode_event, entry_payload
from services.settings import Settings
from services.store import TaskStore

log = logging.getLogger("loopline")

Handler = Callable[[AnyEvent], Awaitable[None]]


class Background(Protocol):
    """A periodic job a service runs beside its handlers (the loop's deadline sweeper)."""

    def start(self) -> None: ...

    async def stop(self) -> None: ...


def consumer_name(service: str) -> str:
    """Unique per process: replicas in one group must never share a name (their pending
    entries would be indistinguishable), also under ``faststream run --workers``."""
    return f"{service}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Runtime:
    """Process-wide resources of the services running in this process."""

    def __init__(self, url: str, settings: Settings) -> None:
        self.url = url
        self.settings = settings
        self.names = Names(settings.prefix)
        self.redis: aioredis.Redis = aioredis.Redis.from_url(url)
        self.store = TaskStore(self.redis, self.names)
        self._agents: dict[str, AgentSpec] = {}
        self.consumers: dict[str, str] = {}  # service -> this process's consumer name
        self.stream_services: dict[str, str] = {}  # input stream -> service consuming it
        self.reclaimers: list[Reclaimer] = []
        self.background: list[Background] = []
        self._transcripts: OrderedDict[str, list[Message]] = OrderedDict()

    async def close(self) -> None:
        await self.redis.aclose()

    def encode(self, event: Event) -> bytes:
        data = dump_event(event)
        if len(data) > self.settings.max_event_bytes:
            raise PayloadTooLarge(
                f"{event.__class__.__name__} of {len(data)} bytes exceeds the limit of "
                f"{self.settings.max_event_bytes} bytes (LOOPLINE_MAX_EVENT_BYTES)"
            )
        return data

    async def publish(self, stream: str, event: Event) -> None:
        await self.redis.xadd(stream, {DATA_FIELD: self.encode(event)})

    async def publish_many(self, items: Sequence[tuple[str, Event]]) -> None:
        """Several events in one round trip (a step's parallel tool calls)."""
        if len(items) == 1:
            await self.publish(*items[0])
            return
        async with self.redis.pipeline(transaction=False) as pipe:
            for stream, event in items:
                pipe.xadd(stream, {DATA_FIELD: self.encode(event)})
            await pipe.execute()

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

    async def transcript(self, task_id: str, length: int) -> list[Message]:
        """The first ``length`` messages; reads from Redis only what this process lacks."""
        cached = self._transcripts.get(task_id)
        if cached is None:
            cached = []
            self._transcripts[task_id] = cached
            if len(self._transcripts) > self.settings.transcript_cache_tasks:
                self._transcripts.popitem(last=False)
        else:
            self._transcripts.move_to_end(task_id)
        if len(cached) < length:
            raw = await self.redis.lrange(
                self.names.task_messages(task_id), len(cached), length - 1
            )
            cached.extend(MESSAGE_ADAPTER.validate_json(item) for item in raw)
        return cached[:length]

    def forget(self, task_id: str) -> None:
        self._transcripts.pop(task_id, None)

    async def dead_letter(
        self, stream: str, entry_id: str, payload: Any, error: str, deliveries: int = 1
    ) -> None:
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
        # No size limit here: an oversized entry is kept whole, so nothing is lost.
        await self.redis.xadd(self.names.dlq, {DATA_FIELD: dump_event(event)})
        log.warning("dead-lettered %s %s: %s", stream, entry_id, error)


def _guard_middleware(runtime: Runtime) -> type[BaseMiddleware]:
    settings = runtime.settings
    heartbeat_s = settings.claim_idle_ms / 3000

    class EntryGuard(BaseMiddleware):
        """Per entry: size limit, heartbeat, and each failure's fate. Permanent failures
        go to the DLQ and are acked; others keep the entry pending (with the error kept
        for the reclaimer, which retries it and dead-letters it after N deliveries)."""

        async def consume_scope(self, call_next: Any, msg: Any) -> Any:
            raw = msg.raw_message
            stream = _text(raw.get("channel", b""))
            ids = raw.get("message_ids") or [b""]
            entry_id = _text(ids[0])
            payload = entry_payload(raw.get("data") or {})
            service = runtime.stream_services.get(stream, "")
            try:
                if isinstance(payload, bytes | str) and len(payload) > settings.max_event_bytes:
                    decode_event(payload, settings.max_event_bytes)  # raises the clear error
                beat = Heartbeat(
                    runtime.redis,
                    stream,
                    GROUPS.get(service, ""),
                    runtime.consumers.get(service, ""),
                    entry_id,
                    heartbeat_s,
                ).start()
                try:
                    return await call_next(msg)
                finally:
                    beat.stop()
            except (PermanentError, ValidationError) as exc:
                await runtime.dead_letter(stream, entry_id, payload, f"{type(exc).__name__}: {exc}")
                return None
            except Exception as exc:
                await runtime.redis.hset(
                    runtime.names.errors, f"{stream}|{entry_id}", f"{type(exc).__name__}: {exc}"
                )
                raise

    return EntryGuard


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
    """Payload -> event -> handler; what both FastStream and the reclaimer call."""
    limit = runtime.settings.max_event_bytes

    async def on_entry(body: Any) -> None:
        await handler(decode_event(body, limit))

    return on_entry


def _subscribe(
    broker: RedisBroker, runtime: Runtime, service: str, stream: str, handler: Handler
) -> None:
    settings = runtime.settings
    sub = StreamSub(
        stream,
        group=GROUPS[service],
        consumer=runtime.consumers.setdefault(service, consumer_name(service)),
        max_records=settings.read_batch,
        polling_interval=settings.poll_ms,
    )
    workers = settings.concurrency(service)
    on_entry = _entry_handler(runtime, handler)
    on_entry.__name__ = f"{service}_{stream.rsplit(':', 1)[-1].replace('-', '_')}"
    runtime.stream_services[stream] = service
    if workers > 1:
        broker.subscriber(stream=sub, max_workers=workers)(on_entry)
    else:
        broker.subscriber(stream=sub)(on_entry)


ServiceFactory = Callable[[Runtime], dict[str, Handler]]


def build_app(
    services: Sequence[str],
    *,
    url: str | None = None,
    settings: Settings | None = None,
) -> tuple[FastStream, Runtime]:
    """One FastStream app running the given services on one broker connection."""
    from services import registry

    settings = settings or Settings()
    url = url or settings.redis_url
    if not url:
        raise RuntimeError("REDIS_URL is not set")
    runtime = Runtime(url, settings)
    # FastStream logs every message at INFO; keep that at DEBUG so service logs stay useful.
    broker_log = logging.getLogger("loopline.broker")
    if broker_log.level == logging.NOTSET:
        broker_log.setLevel(logging.WARNING)
    broker = RedisBroker(
        url,
        middlewares=[_guard_middleware(runtime)],
        log_level=logging.DEBUG,
        logger=broker_log,
        graceful_timeout=settings.graceful_timeout_s,
    )
    for service in services:
        handlers = registry.factory(service)(runtime)
        for stream, handler in handlers.items():
            _subscribe(broker, runtime, service, stream, handler)
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
        await register_consumers(runtime)
        for reclaimer in runtime.reclaimers:
            reclaimer.start()
        for task in runtime.background:
            task.start()

    @app.on_shutdown
    async def _unregister() -> None:
        for task in runtime.background:
            await task.stop()
        for reclaimer in runtime.reclaimers:
            await reclaimer.stop()
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

"""What a service's handlers are given: ``Runtime``, the process-wide resources of the
services running in this process, and the handler's way to publish.

A handler is an async function of one parsed event (``Handler``). What it publishes and
writes inside a consumer's handler is not sent at once: it is queued for the entry being
handled (``services.entry``) and committed with the entry's ack when the handler returns
(``services.runner``), so the ack can never be applied without them. ``Runtime`` is a
small façade over parts with one role each: the clients (``services.connection``), the
commit (``services.commit``) and the caches (``services.caches``); the task state machine
above it is ``services.tasks``. The app that runs the consumers is ``services.app``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from contracts.agent import AgentSpec
from contracts.events import AnyEvent, Event, dump_event
from contracts.messages import Message
from contracts.streams import DATA_FIELD, Names
from services import seal, store, telemetry
from services.caches import AgentSpecs, Transcripts
from services.commit import Committer
from services.connection import Connection, ScriptCall
from services.entry import CURRENT, PendingCommit
from services.errors import PayloadTooLarge
from services.settings import Settings

Handler = Callable[[AnyEvent], Awaitable[None]]

ServiceFactory = Callable[["Runtime"], dict[str, Handler]]
"""A service's handlers by input stream, built for a runtime (``services.registry``)."""


RefusedHook = Callable[[str, str, str, str], Awaitable[None]]
"""(task id, event type, stage, reason) of an event a stage dead-lettered."""


class Background(Protocol):
    """A periodic job a service runs beside its handlers (the loop's deadline sweeper)."""

    def start(self) -> None: ...

    async def stop(self) -> None: ...


class Runtime:
    """Process-wide resources of the services running in this process."""

    def __init__(self, url: str, settings: Settings) -> None:
        self.settings = settings
        self.names = Names(settings.prefix, settings.partitions)
        self.connection = Connection(url)
        self.url = url
        self.cluster = self.connection.cluster  # a Redis Cluster: see services.redisconn
        self.redis = self.connection.redis
        # The per-entry commands go through a lean client where the URL allows it.
        self.fast = self.connection.fast
        self.committer = Committer(self.connection, self.names.errors)
        self.agents = AgentSpecs(self.redis, self.names, settings.retention_s)
        self.transcripts = Transcripts(self.connection, self.names, settings.transcript_cache_size)
        self.consumers: dict[str, str] = {}  # service -> this process's consumer name
        store.install(url, settings.prefix, settings.store)  # runtime.store of hooks and tools
        self.background: list[Background] = []
        self.on_refused: RefusedHook | None = None
        """Told when a stage dead-letters an event of a task (``services.runner``), so
        the task ends (the task state machine's ``Loop.event_refused``)."""
        self._sealer: seal.Sealer | None = None

    async def sealer(self) -> seal.Sealer:
        """What seals the tool calls this process issues and checks the ones it runs
        (``services.seal``); its key is read once per process."""
        if self._sealer is None:
            key = seal.configured_key()
            if key is None:
                await self.redis.set(self.names.seal_key, seal.new_key(), nx=True)
                stored = await self.redis.get(self.names.seal_key)
                key = stored if isinstance(stored, bytes) else str(stored).encode()
            self._sealer = seal.Sealer(key)
        return self._sealer

    async def close(self) -> None:
        await self.connection.close()

    def register_script(self, lua: str) -> ScriptCall:
        """A Lua script to run on the hot path (``FastScript``, or redis-py's)."""
        return self.connection.register_script(lua)

    async def command(self, *args: str | bytes | int | float) -> Any:
        """One command on the hot path, its raw reply (integers as ints, not bools)."""
        return await self.connection.command(*args)

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
        clear_error: str | None = None,
    ) -> None:
        """Send a handled entry's publishes and writes, then its ack or its error (field,
        text), atomically (see ``services.commit``)."""
        await self.committer.commit(entry, ack=ack, error=error, clear_error=clear_error)

    async def save_agent(self, spec: AgentSpec) -> str:
        return await self.agents.save(spec)

    async def agent(self, agent_id: str) -> AgentSpec:
        """Specs are immutable (content-addressed), so a cached copy never goes stale."""
        return await self.agents.get(agent_id)

    async def transcript(
        self, task_id: str, length: int, rev: int = 0, known: Sequence[Message] = ()
    ) -> list[Message]:
        """The first ``length`` messages of a task's transcript (``Transcripts.get``)."""
        return await self.transcripts.get(task_id, length, rev, known)

    def remember(self, task_id: str, rev: int, at: int, message: Message) -> None:
        """The message that stands at ``at`` in the stored transcript (``Transcripts``)."""
        self.transcripts.remember(task_id, rev, at, message)

    def forget(self, task_id: str, rev: int = 0) -> None:
        self.transcripts.forget(task_id, rev)


def _open_entry() -> PendingCommit | None:
    entry = CURRENT.get()
    if entry is not None and entry.committed:
        raise RuntimeError("the entry was committed by its transition: nothing can follow")
    return entry

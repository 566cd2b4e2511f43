"""A lean Redis connection for the per-entry hot path: reading entries, committing them.

Every handled entry costs a few Redis commands (its read, its commit script, sometimes a
transcript read or a lease), and redis-py's asyncio client spends more CPU on each than
the command itself: a connection taken from and given back to the pool under a lock and
a timeout, a retry wrapper, observability hooks, response callbacks. Measured on a
2-core machine: ~240 µs of client CPU per GET against ~115 µs here. ``FastRedis`` sends
commands on one connection as they are issued and matches replies in order (RESP
replies come back in the order the commands were sent), parsed by hiredis. Commands
issued in the same event-loop turn leave in one write (one syscall), so many handlers in
flight pipeline without asking for it.

It speaks only what the hot path needs: commands in, RESP replies out, errors raised as
redis-py's ``ResponseError`` (so callers handle both clients alike), and scripts by
EVALSHA with a load on NOSCRIPT. There are no retries: a command whose connection drops
fails with ``ConnectionError``, which leaves the entry pending for the reclaimer (every
handler is idempotent for redelivery), and the next command connects again. A URL it
does not handle (TLS) gets no ``FastRedis``; callers then use redis-py. A cluster gets
one per master, behind ``services.fastcluster.FastCluster``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
from collections.abc import Sequence
from typing import Any, Protocol

import hiredis
from redis.connection import parse_url
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, OutOfMemoryError, ResponseError

Arg = str | bytes | int | float


def _pack(args: tuple[Arg, ...]) -> bytes:
    # hiredis's stub types the argument as a 1-tuple; any tuple of arguments works
    packed: bytes = hiredis.pack_command(args)  # type: ignore[arg-type]
    return packed


def _reply_error(message: str) -> ResponseError:
    if message.startswith("NOSCRIPT"):
        return NoScriptError(message)
    if message.startswith("OOM "):  # maxmemory reached: as redis-py raises it
        return OutOfMemoryError(message)
    return ResponseError(message)


class _Protocol(asyncio.Protocol):
    """One connection: packed commands out, each reply to the oldest waiting future."""

    def __init__(self) -> None:
        self.reader = hiredis.Reader()
        self.waiting: collections.deque[asyncio.Future[Any]] = collections.deque()
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._out: list[bytes] = []
        self._flush_at: asyncio.Handle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while True:
            reply = self.reader.gets()
            if reply is False:
                return
            if not self.waiting:  # nothing asked for it: the stream is out of step
                self._fail(RedisConnectionError("a Redis reply nobody waited for"))
                return
            future = self.waiting.popleft()
            if future.done():  # its caller was cancelled: the reply is dropped
                continue
            if isinstance(reply, hiredis.ReplyError):
                future.set_exception(_reply_error(str(reply)))
            else:
                future.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(RedisConnectionError(f"connection to Redis lost: {exc or 'closed'}"))

    def _fail(self, error: Exception) -> None:
        self.closed = True
        self._out.clear()
        while self.waiting:
            future = self.waiting.popleft()
            if not future.done():
                future.set_exception(error)
        if self.transport is not None:
            self.transport.close()

    def send(self, packed: bytes) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if self.closed or self.transport is None:
            future.set_exception(RedisConnectionError("connection to Redis is closed"))
            return future
        self.waiting.append(future)
        self._out.append(packed)
        if self._flush_at is None:  # everything sent in this turn leaves in one write
            self._flush_at = loop.call_soon(self._flush)
        return future

    def _flush(self) -> None:
        self._flush_at = None
        if self.transport is not None and not self.closed:
            out, self._out = self._out, []
            self.transport.write(b"".join(out) if len(out) > 1 else out[0])


class FastRedis:
    """A connection to one Redis server, (re)opened on demand. ``blocking`` connections
    (one per blocking reader) never carry other commands."""

    def __init__(self, address: dict[str, Any]) -> None:
        self._address = address
        self._protocol: _Protocol | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the one it was opened on
        self._connecting: asyncio.Lock | None = None

    @classmethod
    def from_url(cls, url: str) -> FastRedis | None:
        """None for what redis-py must handle (TLS, unknown schemes, cluster URLs)."""
        scheme = url.partition("://")[0].lower()
        if scheme not in ("redis", "unix"):
            return None
        try:
            address: dict[str, Any] = parse_url(url)  # type: ignore[no-untyped-call]
        except ValueError:
            return None
        return cls(address)

    def blocking(self) -> FastRedis:
        return FastRedis(self._address)

    async def _connect(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # first use, or used from another event loop now
            self.close()
            self._loop, self._connecting = loop, asyncio.Lock()
        assert self._connecting is not None
        async with self._connecting:
            if self._protocol is not None and not self._protocol.closed:
                return self._protocol
            address = self._address
            protocol: _Protocol
            try:
                if "path" in address:
                    _, protocol = await loop.create_unix_connection(_Protocol, address["path"])
                else:
                    _, protocol = await loop.create_connection(
                        _Protocol, address.get("host", "localhost"), address.get("port", 6379)
                    )
            except OSError as exc:
                raise RedisConnectionError(f"cannot connect to Redis: {exc}") from exc
            setup: list[Sequence[Arg]] = []
            if address.get("password"):
                user = address.get("username")
                setup.append(
                    ("AUTH", user, address["password"]) if user else ("AUTH", address["password"])
                )
            if address.get("db"):
                setup.append(("SELECT", address["db"]))
            try:
                for command in setup:
                    await protocol.send(_pack(tuple(command)))
            except BaseException:  # a wrong password, say: the caller sees Redis's error
                if protocol.transport is not None:
                    protocol.transport.close()
                raise
            self._protocol = protocol
            return protocol

    async def execute(self, *args: Arg) -> Any:
        protocol = self._protocol
        if protocol is None or protocol.closed or self._loop is not asyncio.get_running_loop():
            protocol = await self._connect()
        return await protocol.send(_pack(args))

    def close(self) -> None:
        protocol, self._protocol = self._protocol, None
        if protocol is not None and protocol.transport is not None and not protocol.closed:
            protocol.closed = True
            with contextlib.suppress(RuntimeError):  # its event loop is closed already
                protocol.transport.close()


class Lean(Protocol):
    """A lean connection: ``FastRedis`` to one server, ``services.fastcluster.FastCluster``
    to the masters of a cluster."""

    async def execute(self, *args: Arg) -> Any: ...

    def blocking(self) -> Lean: ...

    def close(self) -> None: ...


class FastScript:
    """A Lua script run by EVALSHA on a lean connection, loaded on NOSCRIPT; called like
    redis-py's ``AsyncScript`` (``await script(keys=..., args=...)``)."""

    def __init__(self, redis: Lean, lua: str) -> None:
        self.redis = redis
        self.lua = lua
        self.sha = hashlib.sha1(lua.encode()).hexdigest()

    async def __call__(self, keys: Sequence[Arg] = (), args: Sequence[Arg] = ()) -> Any:
        try:
            return await self.redis.execute("EVALSHA", self.sha, len(keys), *keys, *args)
        except NoScriptError:
            await self.redis.execute("SCRIPT", "LOAD", self.lua)
            return await self.redis.execute("EVALSHA", self.sha, len(keys), *keys, *args)


def stream_entries(reply: Any) -> list[tuple[bytes, dict[bytes, bytes]]]:
    """An XREADGROUP reply of one stream as (entry id, fields) pairs, fields as a dict
    (as redis-py gives them)."""
    if not reply:
        return []
    entries: list[tuple[bytes, dict[bytes, bytes]]] = []
    for _stream, items in reply:
        for entry_id, fields in items:
            flat = fields or []
            entries.append((entry_id, dict(zip(flat[::2], flat[1::2], strict=True))))
    return entries

"""The lean connection of ``services.fastredis`` on a Redis Cluster: one ``FastRedis`` per
master, each command sent to the master that holds its key's slot.

A partitioned deployment (``LOOPLINE_PARTITIONS``) keeps every fused transition on one
slot, so the hot path's commands each name one slot: a script by its first key, an
XREADGROUP by its stream, any other command by its first argument (``key_of``). Without
this the hot path of a cluster went through redis-py's cluster client, which costs the
services several times the CPU per command (see ``services.fastredis``).

The slot map comes from ``CLUSTER SLOTS`` of any node it knows, and is read again when a
node answers ``MOVED`` (the slot has a new owner: the command goes again there) or a
connection fails (a failover: the next command finds the new master). ``ASK`` (a slot in
migration) sends the command once to the importing node, after ``ASKING`` on the same
connection. ``SCRIPT LOAD`` goes to every master (a script may run on any of them). As on
one server there are no retries of a failed connection: the entry stays pending for the
reclaimer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from services.fastredis import Arg, FastRedis
from services.redisconn import ClusterAddress, parse_cluster_url

Node = tuple[str, int]

REDIRECTS = 3
"""Redirections (MOVED, ASK) one command follows before its error is raised."""


def _text(value: Arg) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _bytes(value: Arg) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


EVERY_MASTER = frozenset({"SCRIPT"})
"""Commands sent to every master (a script is loaded where any of its calls may run)."""
KEYLESS = frozenset({"PING", "ASKING"})


def key_of(args: Sequence[Arg]) -> bytes | None:
    """The key that places a command: a script's first key, XREADGROUP's stream, else
    the first argument; None for a command without one (``SCRIPT``, a script of no keys:
    any master runs it)."""
    name = _text(args[0]).upper()
    if name in ("EVALSHA", "EVAL", "FCALL"):
        return _bytes(args[3]) if int(args[2]) > 0 else None
    if name in ("XREADGROUP", "XREAD"):
        words = [_text(a).upper() for a in args]
        return _bytes(args[words.index("STREAMS") + 1])
    if name in EVERY_MASTER or name in KEYLESS:
        return None
    return _bytes(args[1])


def _redirect(error: ResponseError) -> tuple[str, Node] | None:
    """("MOVED" | "ASK", the node) of a redirection error, None for any other error."""
    parts = str(error).split()
    if len(parts) != 3 or parts[0] not in ("MOVED", "ASK"):
        return None
    host, _, port = parts[2].rpartition(":")
    return parts[0], (host, int(port))


class FastCluster:
    """The lean connection to every master of one cluster, opened as commands need them.
    ``blocking`` connections (one set per blocking reader) never carry other commands."""

    def __init__(self, address: ClusterAddress) -> None:
        self._address = address
        self._nodes: dict[Node, FastRedis] = {}
        self._slots: list[Node] = []
        self._refreshing: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def from_url(cls, url: str) -> FastCluster | None:
        """None for what redis-py must handle (TLS)."""
        address = parse_cluster_url(url)
        return None if address.ssl else cls(address)

    def blocking(self) -> FastCluster:
        return FastCluster(self._address)

    def _client(self, node: Node) -> FastRedis:
        client = self._nodes.get(node)
        if client is None:
            host, port = node
            address: dict[str, Any] = {"host": host, "port": port}
            if self._address.password:
                address["password"] = self._address.password
                address["username"] = self._address.username
            client = self._nodes[node] = FastRedis(address)
        return client

    async def _refresh(self) -> None:
        """Read the slot map from the first node that answers (known masters, then the
        URL's seeds)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop, self._refreshing = loop, asyncio.Lock()
        assert self._refreshing is not None
        stale = self._slots
        async with self._refreshing:
            if self._slots is not stale:  # another command read it meanwhile
                return
            last: Exception | None = None
            for node in dict.fromkeys([*self._nodes, *self._address.nodes]):
                try:
                    reply = await self._client(node).execute("CLUSTER", "SLOTS")
                except (RedisConnectionError, ResponseError) as exc:
                    last = exc
                    continue
                self._slots = self._slot_map(reply, node)
                return
            raise RedisConnectionError(f"no node of the cluster answers: {last}")

    @staticmethod
    def _slot_map(reply: Any, asked: Node) -> list[Node]:
        slots: list[Node] = [asked] * REDIS_CLUSTER_HASH_SLOTS
        for start, end, master, *_replicas in reply:
            host = _text(master[0]) or asked[0]  # "" (or "?"): the node that answered
            node = (asked[0] if host == "?" else host, int(master[1]))
            slots[int(start) : int(end) + 1] = [node] * (int(end) - int(start) + 1)
        return slots

    async def _owner(self, key: bytes | None) -> Node:
        """The master of the key's slot (of slot 0 for a command without a key)."""
        if not self._slots:
            await self._refresh()
        return self._slots[0 if key is None else key_slot(key)]

    async def execute(self, *args: Arg) -> Any:
        if _text(args[0]).upper() in EVERY_MASTER:
            return await self._everywhere(*args)
        node = await self._owner(key_of(args))
        for _ in range(REDIRECTS):
            try:
                return await self._client(node).execute(*args)
            except RedisConnectionError:
                self._slots = []  # a failover, perhaps: read the map again next time
                raise
            except ResponseError as exc:
                redirect = _redirect(exc)
                if redirect is None:
                    raise
                kind, node = redirect
                if kind == "MOVED":
                    self._slots = []
                    await self._refresh()
                    continue
                # ASKING and the command leave together, in order, on one connection
                client = self._client(node)
                _, reply = await asyncio.gather(client.execute("ASKING"), client.execute(*args))
                return reply
        return await self._client(node).execute(*args)  # its error, if it redirects again

    async def _everywhere(self, *args: Arg) -> Any:
        """A command without a key (``SCRIPT LOAD``) on every master; the first reply."""
        if not self._slots:
            await self._refresh()
        masters = list(dict.fromkeys(self._slots))
        replies = await asyncio.gather(*(self._client(node).execute(*args) for node in masters))
        return replies[0]

    def close(self) -> None:
        for client in self._nodes.values():
            client.close()

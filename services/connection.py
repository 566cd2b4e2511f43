"""The Redis clients of one process: redis-py's for everything, and the lean connection
for the per-entry commands where the URL allows it (see ``services.fastredis``; on a
Redis Cluster, ``services.fastcluster``: a lean connection per master, each command sent
to its key's master). A TLS URL gets redis-py's clients only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from services.fastcluster import FastCluster
from services.fastredis import FastRedis, FastScript, Lean
from services.redisconn import async_client, is_cluster, retrying

ScriptCall = Callable[..., Awaitable[Any]]
"""A registered script: ``await script(keys=[...], args=[...])``."""

MAX_CONNECTIONS = 128
"""Redis connections per process. Handlers beyond it wait for a free one (redis-py's
default pool raises past 100, which a burst of model calls in flight reaches)."""


def single_server_client(url: str) -> aioredis.Redis:
    """redis-py's client of one server, with a pool that makes callers wait past
    ``MAX_CONNECTIONS`` instead of failing them, and retries across a Redis restart."""
    pool = aioredis.BlockingConnectionPool.from_url(
        url, max_connections=MAX_CONNECTIONS, timeout=None, retry=retrying()
    )
    client = aioredis.Redis(connection_pool=pool)
    client.auto_close_connection_pool = True  # aclose() closes the pool too
    return client


class Connection:
    """The clients of one Redis deployment, and how the hot path reaches it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.cluster = is_cluster(url)
        self.redis: aioredis.Redis = (
            async_client(url) if self.cluster else single_server_client(url)
        )
        self.fast: Lean | None = (
            FastCluster.from_url(url) if self.cluster else FastRedis.from_url(url)
        )

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

    async def command_retrying(self, *args: str | bytes | int | float) -> Any:
        """``command`` for a write no redelivery repeats: when the lean connection drops
        (it has no retries), the command goes again on redis-py's client, which retries
        across a reconnect."""
        try:
            return await self.command(*args)
        except RedisConnectionError:
            return await self.redis.execute_command(*args)  # type: ignore[no-untyped-call]

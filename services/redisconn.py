"""Which Redis a URL names: one server, or a Redis Cluster.

A Redis Cluster is named by the scheme ``redis+cluster://`` (``rediss+cluster://`` with
TLS) and one or more seed nodes; the client discovers the rest::

    REDIS_URL=redis+cluster://[user:password@]host:port[,host:port...]

or by a plain ``redis://`` URL of any node together with ``LOOPLINE_REDIS_CLUSTER=1``, for
deployments where other tools read ``REDIS_URL`` too and know only the plain schemes.

Everything loopline does works on a cluster: the multi-key scripts of a task take only
that task's keys (one hash slot: its hash tag), every stream read names one stream, and
pipelines over several keys are non-transactional, which redis-py's cluster pipeline
splits by node. With partitioned work streams (``LOOPLINE_PARTITIONS``) a task's keys,
the streams it is published to and its deadline share its partition's slot, so a handled
entry's commit (its publishes, writes and ack) and a transition fused with it stay one
script on a cluster, exactly as on one server. A commit whose keys span slots (no
partitions; an entry from the one ``tasks`` stream; a public stream such as ``edits``;
an error recorded in the errors hash) becomes steps on a cluster: the publishes, then
the ack. A crash between them redelivers the entry, and the handlers are idempotent for
redelivery, so that path is at-least-once where one script is exactly-once per
delivery.

Both clients are typed as ``redis.asyncio.Redis`` / ``redis.Redis``: the commands loopline
uses have the same signatures on ``RedisCluster``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import unquote

import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import ClusterNode, RedisCluster

from services.secrets import redact_url

CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
CLUSTER_FLAG = "LOOPLINE_REDIS_CLUSTER"
CLUSTER_MAX_CONNECTIONS = 4096
"""Connections per node of a process's async cluster client (``async_client``)."""


def is_cluster(url: str) -> bool:
    """Whether ``url`` names a Redis Cluster (its scheme, or ``LOOPLINE_REDIS_CLUSTER``)."""
    scheme = url.partition("://")[0].lower()
    if scheme in CLUSTER_SCHEMES:
        return True
    return os.environ.get(CLUSTER_FLAG, "").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class ClusterAddress:
    nodes: tuple[tuple[str, int], ...]
    username: str | None
    password: str | None
    ssl: bool

    def options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"username": self.username, "password": self.password}
        if self.ssl:
            options["ssl"] = True
        return options


def parse_cluster_url(url: str) -> ClusterAddress:
    """Seed nodes and credentials of a cluster URL (any of the schemes above)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(f"not a Redis URL: {redact_url(url)!r}")
    ssl = scheme.lower().startswith("rediss")
    netloc = rest.split("/", 1)[0].split("?", 1)[0]
    creds, _, hosts = netloc.rpartition("@")
    user, _, password = creds.partition(":")
    nodes = []
    for item in hosts.split(","):
        item = item.strip()
        if not item:
            continue
        if item.startswith("["):  # [IPv6]:port
            host, _, port = item[1:].partition("]")
            port = port.lstrip(":")
        else:
            host, _, port = item.partition(":")
        nodes.append((host or "localhost", int(port or 6379)))
    if not nodes:
        raise ValueError(f"no cluster node in {redact_url(url)!r}")
    return ClusterAddress(tuple(nodes), unquote(user) or None, unquote(password) or None, ssl)


def node_url(url: str) -> str:
    """A plain URL of the first seed node (for a client of one node, such as a broker)."""
    if not is_cluster(url):
        return url
    address = parse_cluster_url(url)
    host, port = address.nodes[0]
    creds = url.partition("://")[2].split("/", 1)[0].rpartition("@")[0]
    scheme = "rediss" if address.ssl else "redis"
    return f"{scheme}://{creds + '@' if creds else ''}{host}:{port}"


def retrying() -> Any:
    """Retries for a command whose connection broke (a Redis restart): redis-py gives
    clients built from a URL none, so every stale pooled connection would fail once."""
    from redis.asyncio.retry import Retry
    from redis.backoff import ExponentialWithJitterBackoff

    return Retry(ExponentialWithJitterBackoff(base=0.01, cap=1.0), 10)


def async_client(url: str, **kwargs: Any) -> aioredis.Redis:
    """``redis.asyncio.Redis`` for a server, ``RedisCluster`` for a cluster."""
    if not is_cluster(url):
        kwargs.setdefault("retry", retrying())
        return aioredis.Redis.from_url(url, **kwargs)
    address = parse_cluster_url(url)
    # redis-py's async cluster client opens at most 100 connections per node and fails a
    # command beyond them at once (MaxConnectionsError) instead of waiting: a model
    # service with 256 calls in flight and a blocked read per partition passes that on
    # one node, and every failed commit waits for the reclaimer. Connections are opened
    # only as commands run concurrently, so a high cap costs nothing until needed.
    kwargs.setdefault("max_connections", CLUSTER_MAX_CONNECTIONS)
    nodes = [AsyncClusterNode(host, port) for host, port in address.nodes]
    client = AsyncRedisCluster(startup_nodes=nodes, **address.options(), **kwargs)
    return cast(aioredis.Redis, client)


def sync_client(url: str, **kwargs: Any) -> redis.Redis:
    """``redis.Redis`` for a server, ``redis.RedisCluster`` for a cluster."""
    if not is_cluster(url):
        return redis.Redis.from_url(url, **kwargs)
    address = parse_cluster_url(url)
    node = cast(Any, ClusterNode)  # untyped in redis-py
    nodes = [node(host, port) for host, port in address.nodes]
    return cast(redis.Redis, RedisCluster(startup_nodes=nodes, **address.options(), **kwargs))


def make_broker(url: str, **kwargs: Any) -> Any:
    """FastStream's broker for the URL: ``RedisClusterBroker`` (seeded with the first node;
    it discovers the others) for a cluster, ``RedisBroker`` otherwise."""
    from faststream.redis import RedisBroker, RedisClusterBroker

    if is_cluster(url):
        return RedisClusterBroker(node_url(url), **kwargs)
    return RedisBroker(url, **kwargs)


async def commit_in_steps(
    client: aioredis.Redis,
    outbox: list[tuple[str, bytes]],
    *,
    ack: tuple[str, str, str] | None,
    error: tuple[str, str] | None,
    errors_key: str,
) -> None:
    """A handled entry's publishes, then its ack or error, on a cluster (where MULTI/EXEC
    cannot span slots). A failed publish raises before the ack: the entry stays pending
    and is redelivered, so nothing is lost; what was published may be published again."""
    from contracts.streams import DATA_FIELD  # here: the health check imports this module

    if outbox:
        async with client.pipeline(transaction=False) as pipe:
            for stream, data in outbox:
                pipe.xadd(stream, {DATA_FIELD: data})
            await pipe.execute()
    if ack is not None:
        await client.xack(*ack)
    if error is not None:
        await client.hset(errors_key, *error)


def healthy(url: str | None = None, timeout_s: float = 3.0) -> bool:
    """The container health check: this process reaches the deployment's Redis (a server
    or a cluster). True without a URL (an embedded server: nothing to reach)."""
    url = url if url is not None else os.environ.get("REDIS_URL")
    if not url:
        return True
    try:  # a cluster client connects as it is made
        client = sync_client(url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s)
    except Exception:
        return False
    try:
        return bool(client.ping())
    except Exception:
        return False
    finally:
        client.close()

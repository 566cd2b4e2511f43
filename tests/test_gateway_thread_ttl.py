"""A thread's TTL as LangGraph's server takes it (``threads.create(ttl=...)``,
``threads.update(ttl=...)``: minutes from then, strategy ``delete``), through the real
``langgraph_sdk`` client against ``loopline serve api`` with the services as processes
(the fixtures of ``test_http_gateway``), the sweep every quarter second
(``LOOPLINE_THREAD_SWEEP_S``).

A thread past its TTL is gone from the gateway (404) and from Redis: its thread keys, the
gateway's records of it and of its runs, its runs' task keys; so is one that waits for
a human (its waiting run is cancelled). A thread without a TTL stays; reading a thread
does not renew its TTL (LangGraph's thread TTL has no ``refresh_on_read``). ``langgraph
dev`` takes a ``ttl`` and ignores it (its in-memory runtime does not sweep), so what it
answers is only its schema's verdict on a bad ``ttl``: 422, as here.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from langgraph_sdk import get_client
from langgraph_sdk.errors import NotFoundError

from contracts.streams import Names
from loopline.testing.processes import GatewayProcess, ServiceProcesses
from tests import test_http_gateway as shared
from tests.test_http_gateway import ANSWER, hello

scripted = shared.scripted
deployment = shared.deployment

SWEEP_S = 0.25
GONE_WITHIN_S = 30.0
"""How long a thread one second past its TTL may take to go: a sweep every quarter
second, on a machine that may be loaded."""

REFERENCE_BAD_TTL_STATUS = 422
"""``langgraph dev`` (langgraph-api 0.16.7) on a ``ttl`` its schema refuses: a strategy
not in ``delete`` / ``keep_latest``, a ``ttl`` that is not a number."""


@pytest.fixture(scope="module")
def gateway(deployment: ServiceProcesses) -> Iterator[GatewayProcess]:
    env = {"LOOPLINE_THREAD_SWEEP_S": str(SWEEP_S)}
    with GatewayProcess(deployment.redis_url, deployment.prefix, env=env) as api:
        yield api


@pytest.fixture
async def sdk(gateway: GatewayProcess) -> AsyncIterator[Any]:
    client = get_client(url=gateway.url, api_key=None)
    yield client
    await client.http.client.aclose()


@pytest.fixture
async def redis(deployment: ServiceProcesses) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(deployment.redis_url)
    yield client
    await client.aclose()


async def _keys_of(redis: aioredis.Redis, prefix: str, thread_id: str) -> list[str]:
    """Every key of the deployment that names the thread."""
    return [k.decode() async for k in redis.scan_iter(match=f"{prefix}:*{thread_id}*")]


async def _task_keys(redis: aioredis.Redis, names: Names, run_id: str) -> list[str]:
    task_id: Any = await redis.hget(names.api_run(run_id), "task_id")
    assert isinstance(task_id, bytes)
    task_id = task_id.decode()
    return [k for k in names.task_keys(task_id) if await redis.exists(k)]


async def _gone(sdk: Any, thread_id: str) -> float:
    """Read the thread until it answers 404 (every read would renew a TTL renewed on
    read); the seconds it took."""
    began = time.monotonic()
    while time.monotonic() - began < GONE_WITHIN_S:
        try:
            await sdk.threads.get(thread_id)
        except NotFoundError:
            return time.monotonic() - began
        await asyncio.sleep(0.1)
    raise AssertionError(f"thread {thread_id} still there {GONE_WITHIN_S}s after its TTL")


async def test_a_thread_with_a_ttl_is_gone_from_the_gateway_and_redis(
    sdk: Any, redis: aioredis.Redis, deployment: ServiceProcesses
) -> None:
    names = Names(deployment.prefix)
    kept = await sdk.threads.create()
    brief = await sdk.threads.create(ttl=1 / 60)  # one second, in LangGraph's minutes
    brief_id = brief["thread_id"]
    ran = await sdk.runs.wait(brief_id, "agent", input=hello())
    assert [m["content"] for m in ran["messages"]] == ["hello", ANSWER]
    await sdk.runs.wait(kept["thread_id"], "agent", input=hello())
    (run,) = await sdk.runs.list(brief_id)
    assert await _keys_of(redis, deployment.prefix, brief_id)  # it was in Redis
    task_keys = await _task_keys(redis, names, run["run_id"])
    assert task_keys

    await _gone(sdk, brief_id)
    assert await _keys_of(redis, deployment.prefix, brief_id) == []
    assert not await redis.exists(names.api_run(run["run_id"]), *task_keys)
    with pytest.raises(NotFoundError):
        await sdk.threads.get_state(brief_id)
    assert brief_id not in [t["thread_id"] for t in await sdk.threads.search(limit=1000)]

    stays = await sdk.threads.get_state(kept["thread_id"])  # many sweeps later
    assert [m["content"] for m in stays["values"]["messages"]] == ["hello", ANSWER]


async def test_an_update_sets_the_ttl_from_then(sdk: Any) -> None:
    later = await sdk.threads.create(ttl=10, metadata={"n": 1})  # ten minutes
    thread_id = later["thread_id"]
    await asyncio.sleep(SWEEP_S * 4)  # sweeps ran: not yet due
    assert (await sdk.threads.get(thread_id))["metadata"]["n"] == 1
    await sdk.threads.update(thread_id, metadata={"n": 2}, ttl={"ttl": 0.5 / 60})
    await _gone(sdk, thread_id)


async def test_a_ttl_langgraph_refuses_or_loopline_does_not_implement_is_refused(
    sdk: Any,
) -> None:
    for bad in ({"ttl": "soon"}, {"ttl": 1, "strategy": "forever"}):
        with pytest.raises(httpx.HTTPStatusError) as refused:
            await sdk.threads.create(ttl=bad)
        assert refused.value.response.status_code == REFERENCE_BAD_TTL_STATUS
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await sdk.threads.create(ttl={"ttl": 1, "strategy": "keep_latest"})
    assert refused.value.response.status_code == 422
    assert "'keep_latest' is not supported (supported: 'delete')" in refused.value.response.text
    thread = await sdk.threads.create()
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await sdk.threads.update(thread["thread_id"], metadata={}, ttl={"ttl": True})
    assert refused.value.response.status_code == REFERENCE_BAD_TTL_STATUS


async def test_a_thread_waiting_for_a_human_expires_too(
    sdk: Any, redis: aioredis.Redis, deployment: ServiceProcesses
) -> None:
    waiting = await sdk.threads.create(ttl=1 / 60)
    thread_id = waiting["thread_id"]
    await sdk.runs.wait(thread_id, "gated", input=hello("gated"))
    assert (await sdk.threads.get(thread_id))["status"] == "interrupted"
    await _gone(sdk, thread_id)
    assert await _keys_of(redis, deployment.prefix, thread_id) == []


DEFAULT_TTL_MIN = 2 / 60
"""The operator's ``default_ttl`` in the gateway below: two seconds."""


@pytest.fixture(scope="module")
def defaulted(deployment: ServiceProcesses) -> Iterator[GatewayProcess]:
    """A gateway whose operator set LangGraph's ``checkpointer.ttl`` (a default TTL, the
    sweep's interval), and no ``LOOPLINE_THREAD_SWEEP_S``: the sweep runs as the setting
    says or not before the default five minutes."""
    setting = {
        "strategy": "delete",
        "default_ttl": DEFAULT_TTL_MIN,
        "sweep_interval_minutes": SWEEP_S / 60,
    }
    env = {"LOOPLINE_API_THREAD_TTL": json.dumps(setting)}
    with GatewayProcess(deployment.redis_url, deployment.prefix, env=env) as api:
        yield api


async def test_the_operators_default_ttl_applies_to_the_threads_the_gateway_creates(
    defaulted: GatewayProcess, redis: aioredis.Redis, deployment: ServiceProcesses
) -> None:
    """Threads created without a ``ttl`` (``threads.create``, a run that creates its
    thread) expire after ``default_ttl``, not before; one created with a ``ttl`` keeps
    its own."""
    sdk = get_client(url=defaulted.url, api_key=None)
    try:
        began = time.monotonic()
        plain = (await sdk.threads.create())["thread_id"]
        by_run = f"by-run-{time.time_ns()}"
        await sdk.runs.wait(by_run, "agent", input=hello(), if_not_exists="create")
        longer = (await sdk.threads.create(ttl=10))["thread_id"]
        await _gone(sdk, plain)
        assert time.monotonic() - began >= DEFAULT_TTL_MIN * 60  # not before its TTL
        await _gone(sdk, by_run)
        assert await _keys_of(redis, deployment.prefix, by_run) == []
        assert (await sdk.threads.get(longer))["thread_id"] == longer  # its own ten minutes
    finally:
        await sdk.http.client.aclose()

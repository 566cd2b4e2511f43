"""Trimming on a real Redis: a work stream keeps exactly what some group still needs; a
public stream keeps its length and age."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis.asyncio as aioredis

from services.trimming import trim_public_stream, trim_work_stream

pytestmark = pytest.mark.fast


async def ids(redis: aioredis.Redis, stream: str) -> list[bytes]:
    return [entry_id for entry_id, _ in await redis.xrange(stream)]


async def test_a_work_stream_keeps_what_a_group_has_not_acknowledged(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    stream = f"{prefix}:work"
    added = [await redis_client.xadd(stream, {"n": i}) for i in range(10)]
    await redis_client.xgroup_create(stream, "fast", id="0")
    await redis_client.xgroup_create(stream, "slow", id="0")
    read: Any = await redis_client.xreadgroup("fast", "c", {stream: ">"}, count=10)
    await redis_client.xack(stream, "fast", *[entry_id for entry_id, _ in read[0][1]])
    # the slow group got 6, acknowledged the first 4: entry 4 is pending, 6.. undelivered
    read = await redis_client.xreadgroup("slow", "c", {stream: ">"}, count=6)
    await redis_client.xack(stream, "slow", *[entry_id for entry_id, _ in read[0][1][:4]])

    assert await trim_work_stream(redis_client, stream) == 4
    assert await ids(redis_client, stream) == added[4:]

    await redis_client.xack(stream, "slow", *added[4:6])
    assert await trim_work_stream(redis_client, stream) == 2
    assert await ids(redis_client, stream) == added[6:]  # never delivered to slow


async def test_a_fully_acknowledged_stream_is_emptied_and_one_without_groups_kept(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    stream, loose = f"{prefix}:done", f"{prefix}:loose"
    for i in range(3):
        await redis_client.xadd(stream, {"n": i})
        await redis_client.xadd(loose, {"n": i})
    await redis_client.xgroup_create(stream, "g", id="0")
    read: Any = await redis_client.xreadgroup("g", "c", {stream: ">"})
    await redis_client.xack(stream, "g", *[entry_id for entry_id, _ in read[0][1]])

    assert await trim_work_stream(redis_client, stream) == 3
    assert await redis_client.xlen(stream) == 0
    assert await trim_work_stream(redis_client, loose) == 0
    assert await redis_client.xlen(loose) == 3
    assert await trim_work_stream(redis_client, f"{prefix}:missing") == 0


async def test_a_public_stream_keeps_its_length_and_age(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    stream = f"{prefix}:public"
    old_ms = int((time.time() - 3600) * 1000)
    for i in range(3):
        await redis_client.xadd(stream, {"n": i}, id=f"{old_ms}-{i}")
    for i in range(5):
        await redis_client.xadd(stream, {"n": i})

    assert await trim_public_stream(redis_client, stream, maxlen=4, max_age_s=600) == 4
    assert await redis_client.xlen(stream) == 4
    assert await trim_public_stream(redis_client, stream, maxlen=10, max_age_s=600) == 0

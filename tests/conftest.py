from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as aioredis

from tests.support import RedisProvider, unique_prefix


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    provider = RedisProvider().start()
    yield provider.url
    provider.stop()


@pytest.fixture
def prefix() -> str:
    """Each test's own stream and key prefix: tests never see each other's data."""
    return unique_prefix()


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as aioredis

from tests.support import RedisProvider, unique_prefix

# The tests are operator and producer of what they run: their own tools may be imported,
# tasks may carry specs, the scripted model runs; in this process and in every service
# process a test starts (they inherit the environment). The security tests start their
# services with these turned off.
os.environ.setdefault("LOOPLINE_ALLOWED_MODULES", "tests,benchmarks")
os.environ.setdefault("LOOPLINE_ALLOW_INLINE_AGENTS", "true")
os.environ.setdefault("LOOPLINE_ALLOW_FAKE_MODEL", "true")


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

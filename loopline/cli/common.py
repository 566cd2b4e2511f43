"""What every command shares: the one-line user error, settings, reaching Redis, the
deployment a command acts on, and the agent a task runs."""

from __future__ import annotations

import os
import sys
from typing import NoReturn

from contracts.agent import AgentSpec
from services.settings import Settings


class UsageError(Exception):
    """Something the user can fix; printed as one line."""


def fail(message: str) -> NoReturn:
    one_line = " ".join(message.split())  # a user error is one line, never a dump
    print(f"loopline: error: {one_line}", file=sys.stderr)
    raise SystemExit(2)


def settings() -> Settings:
    return Settings()


async def check_redis(url: str) -> None:
    """Fail with one line (what to do) when Redis does not answer at ``url``."""
    import redis.asyncio as aioredis
    from redis.exceptions import RedisClusterException

    from services.redisconn import async_client

    client = async_client(url, socket_connect_timeout=3)
    try:
        await client.ping()
    except (aioredis.ConnectionError, aioredis.TimeoutError, RedisClusterException, OSError) as exc:
        raise UsageError(
            f"cannot reach Redis at {url} ({exc}); start it, fix REDIS_URL, "
            "or unset REDIS_URL to use the embedded server"
        ) from exc
    finally:
        await client.aclose()


def resolve_url(current: Settings) -> tuple[str, bool]:
    """The Redis URL to use and whether it is the embedded server (started if so)."""
    from loopline.agent import resolve_url as resolve

    return resolve(current.redis_url)


def deployment() -> tuple[str, str]:
    """URL and prefix of the deployment a command acts on: it needs ``REDIS_URL``."""
    current = settings()
    if not current.redis_url:
        raise UsageError("this command needs REDIS_URL: the deployment to act on")
    return current.redis_url, current.prefix


def load_agent(path: str | None) -> tuple[AgentSpec, int | None]:
    """The agent file's spec and step limit, else the default agent on ``LOOPLINE_MODEL``."""
    from loopline.agentfile import agent_from_dict, load_agent_file

    if path:
        return load_agent_file(path)
    return agent_from_dict({"model": os.environ.get("LOOPLINE_MODEL", "gpt-4o-mini")})

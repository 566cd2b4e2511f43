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
    from services.secrets import redact

    one_line = redact(" ".join(message.split()))  # one line, never a dump, no secret
    print(f"loopline: error: {one_line}", file=sys.stderr)
    raise SystemExit(2)


def settings() -> Settings:
    return Settings()


async def check_redis(url: str, wait_s: float = 0.0) -> None:
    """Fail with one line (what to do) when Redis does not answer at ``url``; with
    ``wait_s``, keep asking (with backoff, each attempt logged) for that long first."""
    import asyncio
    import logging
    import time

    import redis.asyncio as aioredis
    from redis.exceptions import RedisClusterException

    from services.redisconn import async_client
    from services.secrets import redact_url

    unreachable = (aioredis.ConnectionError, aioredis.TimeoutError, RedisClusterException, OSError)
    deadline = time.monotonic() + wait_s
    delay = 0.2
    while True:
        # no retries of its own: this loop retries, and logs each attempt
        try:
            client = async_client(url, socket_connect_timeout=3, retry=None)
        except ValueError as exc:  # not a URL redis-py can read: no point retrying
            raise UsageError(
                f"REDIS_URL {redact_url(url)!r} is not a Redis URL ({exc}); give "
                "redis://HOST:PORT[/DB] (rediss:// with TLS, redis+cluster:// for a "
                "cluster), or unset it to use the embedded server"
            ) from exc
        try:
            await client.ping()
            return
        except unreachable as exc:
            if time.monotonic() + delay > deadline:
                raise UsageError(
                    f"cannot reach Redis at {redact_url(url)} ({exc}); start it, fix "
                    "REDIS_URL, or unset REDIS_URL to use the embedded server"
                ) from exc
            logging.getLogger("loopline").warning(
                "waiting for Redis at %s (%s); retrying in %.1fs", redact_url(url), exc, delay
            )
        finally:
            await client.aclose()
        await asyncio.sleep(delay)
        delay = min(delay * 2, 5.0)


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
    """The agent file's spec and step limit, else the default agent on ``LOOPLINE_MODEL``.
    On the embedded default this process runs the agent: its tools are imported and its
    middleware built here. With ``REDIS_URL`` the file is read as data: the deployment's
    services import and check what they run (this client needs neither the tools nor a
    model endpoint)."""
    from loopline.agentfile import agent_from_dict, load_agent_file

    here = not settings().redis_url
    if here:  # the embedded default: this process runs what it names
        from loopline.embedded import trust_this_process

        trust_this_process()
        if "" not in sys.path and os.getcwd() not in sys.path:
            # tools beside the agent file import as with `python -m`: the console
            # script's own folder is on the path, the user's is not
            sys.path.insert(0, os.getcwd())
    if path:
        return load_agent_file(path, import_code=here)
    model = os.environ.get("LOOPLINE_MODEL", "gpt-4o-mini")
    return agent_from_dict({"model": model}, import_code=here)

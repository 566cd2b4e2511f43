"""A tool call held until the test or benchmark releases it
(``loopline.testing.held_tool:wait_for_release``): the recovery benchmark kills the tools
process running it and times how long another replica takes to run it again.

Its side effects are recorded in Redis, outside the tools process, so the caller can tell
which process ran a call and how often, even when that process was killed:

- ``CHAOS_COUNTER_URL``: the Redis they go to (default: ``REDIS_URL``);
- ``CHAOS_COUNTER_KEY``: the hash counting runs per ``call_key``.

A tool cannot see its tool call id, so the scripted model puts a unique ``call_key`` in
the arguments of every call.
"""

from __future__ import annotations

import os
import time

import redis

from services.spec.toolbox import idempotent

_URL = os.environ.get("CHAOS_COUNTER_URL") or os.environ.get("REDIS_URL") or "redis://127.0.0.1"
_KEY = os.environ.get("CHAOS_COUNTER_KEY", "chaos:counter")

# Sync tools run in worker threads; redis-py's client (its connection pool) is thread-safe.
_redis = redis.Redis.from_url(_URL)


def started_key(counter_key: str) -> str:
    """Hash: call_key -> pid of the process that started ``wait_for_release``."""
    return f"{counter_key}:started"


def release_key(counter_key: str, call_key: str) -> str:
    """String: set it to let ``wait_for_release`` for this call return."""
    return f"{counter_key}:release:{call_key}"


@idempotent
def wait_for_release(call_key: str, timeout_s: float = 120.0) -> str:
    """Record which process runs this call, then wait until the test releases it."""
    _redis.hset(started_key(_KEY), call_key, str(os.getpid()))
    _redis.hincrby(_KEY, call_key, 1)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _redis.exists(release_key(_KEY, call_key)):
            return f"released {call_key}"
        time.sleep(0.01)
    raise TimeoutError(f"{call_key} was not released within {timeout_s} s")

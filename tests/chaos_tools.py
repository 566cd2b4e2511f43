"""Tools for the chaos tests and the recovery benchmark (``tests.chaos_tools:NAME``).

Their side effects are recorded in Redis, outside the tools process, so a test can tell
how often a call really ran even when the process running it was killed:

- ``CHAOS_COUNTER_URL``: the Redis the side effects go to (default: ``REDIS_URL``);
- ``CHAOS_COUNTER_KEY``: the hash counting runs per ``call_key``;
- ``CHAOS_TOOL_DELAY_S``: seconds ``add_counted`` sleeps before and after its side
  effect, a window in which a kill leaves the call's outcome unknown (default 0).

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
_DELAY_S = float(os.environ.get("CHAOS_TOOL_DELAY_S", "0") or 0)

# Sync tools run in worker threads; redis-py's client (its connection pool) is thread-safe.
_redis = redis.Redis.from_url(_URL)


def started_key(counter_key: str) -> str:
    """Hash: call_key -> pid of the process that started ``wait_for_release``."""
    return f"{counter_key}:started"


def release_key(counter_key: str, call_key: str) -> str:
    """String: set it to let ``wait_for_release`` for this call return."""
    return f"{counter_key}:release:{call_key}"


def add_counted(a: int, b: int, call_key: str) -> int:
    """Add two integers (and count the call, outside this process)."""
    if _DELAY_S:
        time.sleep(_DELAY_S)
    _redis.hincrby(_KEY, call_key, 1)
    if _DELAY_S:
        time.sleep(_DELAY_S)
    return a + b


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

"""Tools for the chaos tests (``tests.chaos_tools:NAME``).

Their side effects are recorded in Redis, outside the tools process, so a test can tell
how often a call really ran even when the process running it was killed:

- ``CHAOS_COUNTER_URL``: the Redis the side effects go to (default: ``REDIS_URL``);
- ``CHAOS_COUNTER_KEY``: the hash counting runs per ``call_key``;
- ``CHAOS_TOOL_DELAY_S``: seconds ``add_counted`` sleeps before and after its side
  effect, a window in which a kill leaves the call's outcome unknown (default 0).

A tool cannot see its tool call id, so the scripted model puts a unique ``call_key`` in
the arguments of every call. The tool call held until released, which the recovery
benchmark uses, is ``loopline.testing.held_tool:wait_for_release``.
"""

from __future__ import annotations

import os
import time

from services.redisconn import sync_client

_URL = os.environ.get("CHAOS_COUNTER_URL") or os.environ.get("REDIS_URL") or "redis://127.0.0.1"
_KEY = os.environ.get("CHAOS_COUNTER_KEY", "chaos:counter")
_DELAY_S = float(os.environ.get("CHAOS_TOOL_DELAY_S", "0") or 0)

# Sync tools run in worker threads; redis-py's client (its connection pool) is thread-safe.
_redis = sync_client(_URL)


def add_counted(a: int, b: int, call_key: str) -> int:
    """Add two integers (and count the call, outside this process)."""
    if _DELAY_S:
        time.sleep(_DELAY_S)
    _redis.hincrby(_KEY, call_key, 1)
    if _DELAY_S:
        time.sleep(_DELAY_S)
    return a + b

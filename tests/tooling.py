"""Tools the end-to-end tests name by import path (``tests.tooling:NAME``), so that the
tools service processes import them as a user's deployment would."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

from langchain_core.tools import StructuredTool, tool

from services.spec.toolbox import idempotent


def add(a: int, b: int, note: str = "") -> int:
    """Add two integers (a note may ride along)."""
    return a + b


def fail_always(reason: str) -> str:
    """A tool that always raises, to show how errors reach the model."""
    raise RuntimeError(f"cannot do it: {reason}")


@tool
def slow_echo(text: str, seconds: float, record: str) -> str:
    """Echo text after a delay, recording when it ran (to prove calls overlap)."""
    start = time.time()
    time.sleep(seconds)
    with Path(record).open("a") as fh:
        fh.write(
            json.dumps({"text": text, "start": start, "end": time.time(), "pid": os.getpid()})
            + "\n"
        )
    return text


def big_output(n: int) -> str:
    """Return a large block of text (to grow the conversation)."""
    return "x" * n


def _mark(record: str, tag: str, what: str) -> None:
    with Path(record).open("a") as fh:
        fh.write(
            json.dumps({"tag": tag, "what": what, "pid": os.getpid(), "t": time.time()}) + "\n"
        )


def slow_effect(tag: str, seconds: float, record: str) -> str:
    """Record a start, wait, record an end: a tool with a visible side effect."""
    _mark(record, tag, "start")
    time.sleep(seconds)
    _mark(record, tag, "end")
    return f"effect {tag} done"


@idempotent
def slow_idempotent(tag: str, seconds: float, record: str) -> str:
    """Like slow_effect, but safe to run again."""
    _mark(record, tag, "start")
    time.sleep(seconds)
    _mark(record, tag, "end")
    return f"idempotent {tag} done"


def flaky(key: str, failures: int) -> str:
    """Fail the first ``failures`` calls for ``key`` (counted in Redis), then succeed."""
    import redis

    client = redis.Redis.from_url(os.environ.get("RECORD_REDIS_URL", "redis://127.0.0.1:6379"))
    attempt = int(client.incr(f"flaky:{key}"))
    client.close()
    if attempt <= failures:
        raise RuntimeError(f"attempt {attempt} failed")
    return f"succeeded on attempt {attempt}"


def hang(seconds: float) -> str:
    """Hang in a thread for a long time (a tool that never answers in time)."""
    time.sleep(seconds)
    return "woke up"


async def hang_async(seconds: float) -> str:
    """Hang in the event loop's task for a long time, cancellably."""
    await asyncio.sleep(seconds)
    return "woke up"


def exit_now(code: int) -> str:
    """Raise SystemExit, as a careless script would."""
    raise SystemExit(code)


async def interrupt_async(code: int) -> str:
    """Raise KeyboardInterrupt from an async tool."""
    raise KeyboardInterrupt(code)


def quote_the_key() -> str:
    """Fail with the process's API key in the error (as a misbehaving library would)."""
    raise RuntimeError(f"cannot call the service with key {os.environ.get('OPENAI_API_KEY')}")


def leak_redis_url() -> str:
    """Fail with the service's Redis URL (and so its password) in the error, as a
    careless tool might."""
    raise RuntimeError(f"cannot reach {os.environ['REDIS_URL']}")


class QuotaExceeded(Exception):
    """A user's exception whose constructor takes more than a message (a client rebuilds
    it without running its constructor)."""

    def __init__(self, used: int, limit: int) -> None:
        super().__init__(f"quota exceeded: {used} of {limit}")
        self.used, self.limit = used, limit


def explode(x: int) -> str:
    """A tool that raises ValueError (LangChain's agent lets it propagate)."""
    raise ValueError(f"bad x={x}")


def spend(amount: int) -> str:
    """A tool that raises the user's own exception class."""
    raise QuotaExceeded(amount, 10)


def _variant_sync(text: str) -> str:
    return f"the sync variant got {text}"


async def _variant_async(text: str) -> str:
    return f"the async variant got {text}"


both_variants = StructuredTool.from_function(
    func=_variant_sync,
    coroutine=_variant_async,
    name="both_variants",
    description="A tool with a sync and an async variant: its answer says which ran.",
)

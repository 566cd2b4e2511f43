"""Test-only helpers. Where Redis comes from, services as real OS processes, unique
prefixes and the twin scripted servers are ``loopline.testing``'s (shipped, used by the
benchmarks too); they are imported here so tests keep one place to import from."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loopline.testing.harness import services_on, twin_servers, unique_prefix
from loopline.testing.processes import ServiceProcesses
from loopline.testing.redis_provider import RedisProvider

__all__ = [
    "REPO_ROOT",
    "RedisProvider",
    "ServiceProcesses",
    "issue_calls",
    "run_cli",
    "services_on",
    "twin_servers",
    "unique_prefix",
    "wait_for",
    "wait_until_acked",
]

REPO_ROOT = Path(__file__).resolve().parents[1]


async def wait_for(predicate: Any, timeout: float = 10.0, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        await asyncio.sleep(interval)
    raise TimeoutError("condition not met in time")


def wait_until_acked(r: Any, names: Any, services: Sequence[str], timeout: float = 10.0) -> None:
    """Wait until no entry is pending in any group of these services: a dead letter is
    written just before its entry is acked, so pending counts settle a moment later."""
    from contracts.streams import GROUPS

    deadline = time.monotonic() + timeout
    while True:
        pending = {
            stream: r.xpending(stream, GROUPS[service])["pending"]
            for service in services
            for stream in names.inputs_of(service)
        }
        if not any(pending.values()):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"entries still pending: {pending}")
        time.sleep(0.05)


def run_cli(
    procs: ServiceProcesses, *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``loopline ARGS`` as a user runs it against the deployment of ``procs``."""
    env = {**os.environ, "REDIS_URL": procs.redis_url, "LOOPLINE_PREFIX": procs.prefix}
    return subprocess.run(
        [sys.executable, "-m", "loopline", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO_ROOT,
    )


async def issue_calls(
    redis: Any,
    names: Any,
    task_id: str,
    agent_id: str,
    call_ids: Sequence[str],
    step: int = 1,
    digests: dict[str, str] | None = None,
) -> None:
    """A running task in the tools phase of ``step`` waiting for ``call_ids`` (with the
    calls' ``digests``, if given), as the loop's transitions leave it: the tools service
    runs only calls a state issued."""
    await redis.hset(
        names.task_state(task_id),
        mapping={
            "status": "running",
            "step": step,
            "phase": "tools",
            "agent": agent_id,
            "expected": json.dumps(list(call_ids)),
            "max_steps": 5,
            "issued": json.dumps(digests or {}) if digests else "",
        },
    )

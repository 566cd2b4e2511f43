"""A benchmark measurement whose tasks did not all complete reports that, and no time.

Tasks refused at once (their tools' module outside ``LOOPLINE_ALLOWED_MODULES``) end
fast: a time measured over them would flatter the deployment. The helper every timed
loopline measurement of the benchmarks goes through (``benchmarks.loopline_side.
run_timed``) is run here against the loop, model and tools services in this process,
with such a deployment.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis.asyncio as aioredis

from benchmarks import loopline_side as ll
from benchmarks import report
from benchmarks.stack import fake_agent
from contracts.streams import Names
from loopline.embedded import ServiceThread
from services.settings import Settings

pytestmark = pytest.mark.fast


@pytest.fixture
def refusing_services(
    redis_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Names]:
    """The services of a deployment whose allow-list leaves out the benchmark's tools."""
    monkeypatch.setenv("LOOPLINE_ALLOWED_MODULES", "tests")
    services = ServiceThread(
        redis_url, Settings(prefix=prefix), services=("loop", "model", "tools")
    ).start()
    try:
        yield Names(prefix)
    finally:
        services.stop()


async def test_refused_tasks_report_no_time(
    refusing_services: Names, redis_client: aioredis.Redis
) -> None:
    n = 6
    out = await ll.run_timed(
        redis_client, refusing_services, fake_agent(3), n, max_steps=4, timeout=30
    )
    assert "loopline_s" not in out
    assert "loopline_p50_task_s" not in out
    assert out["completed"] == 0
    assert out["failed"] == n
    assert "benchmarks.tools" in out["first_failure"]
    assert "LOOPLINE_ALLOWED_MODULES" in out["first_failure"]
    assert out["error"].startswith(f"0 of {n} tasks completed, {n} failed (first: ")

    # the concurrency table shows the counts where the time would be, and fails the target
    row = report._concurrency_row({"n": n, "steps": 3, "ideal_s": 3.0, **out})
    assert row[1] == f"no time: 0 of {n} completed, {n} failed"
    assert "not met" in row[-1]
    line = report._concurrency_line({"n": n, "ideal_s": 3.0, **out})
    assert "no time: 0 of 6 completed" in line


async def test_completed_tasks_report_their_time(
    redis_url: str, prefix: str, redis_client: aioredis.Redis
) -> None:
    """The same helper, every task completed: a time, and the counts beside it."""
    services = ServiceThread(
        redis_url, Settings(prefix=prefix), services=("loop", "model", "tools")
    ).start()
    try:
        out = await ll.run_timed(
            redis_client, Names(prefix), fake_agent(2), 3, max_steps=3, timeout=30
        )
    finally:
        services.stop()
    assert out["completed"] == 3
    assert out["failed"] == 0
    assert out["loopline_s"] > 0
    assert "error" not in out

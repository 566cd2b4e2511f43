"""Driving a loopline deployment from the benchmarks: submit many tasks in one round trip,
wait for them, read their logs. Plain Redis commands on the documented wire format."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from contracts.agent import AgentSpec
from contracts.events import TaskSubmitted
from contracts.messages import HumanMessage
from contracts.streams import DATA_FIELD, Names


async def submit_many(
    redis: aioredis.Redis,
    names: Names,
    spec: AgentSpec,
    n: int,
    *,
    max_steps: int,
    prompt: str = "task",
) -> tuple[list[str], float]:
    """Submit ``n`` tasks (pipelined); returns their ids and the time.time() before."""
    events = [
        TaskSubmitted(
            agent=spec, messages=[HumanMessage(content=f"{prompt} {i}")], max_steps=max_steps
        )
        for i in range(n)
    ]
    payloads = [(names.work("tasks", e.task_id), e.model_dump_json()) for e in events]
    started = time.time()
    for i in range(0, n, 500):
        async with redis.pipeline(transaction=False) as pipe:
            for stream, data in payloads[i : i + 500]:
                pipe.xadd(stream, {DATA_FIELD: data})
            await pipe.execute()
    return [e.task_id for e in events], started


async def wait_done(
    redis: aioredis.Redis,
    names: Names,
    task_ids: list[str],
    *,
    timeout: float,
    interval: float = 0.2,
) -> dict[str, str]:
    """Poll the tasks' status until none is running; returns task id -> status."""
    pending = list(task_ids)
    status: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while pending:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(pending)} of {len(task_ids)} tasks still running")
        still: list[str] = []
        for i in range(0, len(pending), 1000):
            chunk = pending[i : i + 1000]
            async with redis.pipeline(transaction=False) as pipe:
                for tid in chunk:
                    pipe.hget(names.task_state(tid), "status")
                values = await pipe.execute()
            for tid, value in zip(chunk, values, strict=True):
                text = value.decode() if isinstance(value, bytes) else (value or "")
                if text in ("completed", "failed"):
                    status[tid] = text
                else:
                    still.append(tid)
        pending = still
        if pending:
            await asyncio.sleep(interval)
    return status


async def log_events(redis: aioredis.Redis, names: Names, task_id: str) -> list[dict[str, Any]]:
    """The task's log as JSON objects, each with ``_bytes`` (its size on the wire)."""
    out: list[dict[str, Any]] = []
    last = "-"
    while True:
        entries: Any = await redis.xrange(names.task_log(task_id), min=last, count=1000)
        if last != "-":
            entries = entries[1:]
        if not entries:
            return out
        for entry_id, fields in entries:
            raw = fields[DATA_FIELD.encode()]
            event = json.loads(raw)
            event["_bytes"] = len(raw)
            out.append(event)
            last = entry_id.decode()


async def finish_times(redis: aioredis.Redis, names: Names, task_ids: list[str]) -> list[float]:
    """``at`` of each task's terminal event (its last log entry)."""
    times: list[float] = []
    for i in range(0, len(task_ids), 1000):
        async with redis.pipeline(transaction=False) as pipe:
            for tid in task_ids[i : i + 1000]:
                pipe.xrevrange(names.task_log(tid), count=1)
            replies = await pipe.execute()
        for reply in replies:
            event = json.loads(reply[0][1][DATA_FIELD.encode()])
            times.append(float(event["at"]))
    return times


async def stream_events(redis: aioredis.Redis, stream: str) -> list[dict[str, Any]]:
    """Every entry of a work stream as JSON objects with ``_bytes``."""
    out: list[dict[str, Any]] = []
    last = "-"
    while True:
        entries: Any = await redis.xrange(stream, min=last, count=2000)
        if last != "-":
            entries = entries[1:]
        if not entries:
            return out
        for entry_id, fields in entries:
            raw = fields.get(DATA_FIELD.encode(), b"{}")
            event = json.loads(raw)
            event["_bytes"] = len(raw)
            out.append(event)
            last = entry_id.decode()


@dataclass(frozen=True)
class Outcome:
    """How the tasks of one measurement ended: a time is only worth reporting when every
    one of them completed (tasks refused at once finish fast, and would flatter it)."""

    total: int
    completed: int
    failed: int
    first_failure: str
    """The reason of the first failed task's ``TaskFailed`` ("" when none failed)."""

    @property
    def all_completed(self) -> bool:
        return self.completed == self.total

    def describe(self) -> str:
        text = f"{self.completed} of {self.total} tasks completed, {self.failed} failed"
        return text + (f" (first: {self.first_failure})" if self.first_failure else "")


async def outcome(redis: aioredis.Redis, names: Names, status: dict[str, str]) -> Outcome:
    """Count the tasks' ends (``wait_done``'s statuses) and read why the first failed one
    failed, from its log's last event."""
    failed = [tid for tid, s in status.items() if s != "completed"]
    reason = ""
    if failed:
        last: Any = await redis.xrevrange(names.task_log(failed[0]), count=1)
        if last:
            event = json.loads(last[0][1][DATA_FIELD.encode()])
            reason = str(event.get("reason") or event.get("type", ""))
        else:
            reason = "its log is empty"
    return Outcome(len(status), len(status) - len(failed), len(failed), reason)


async def run_timed(
    redis: aioredis.Redis,
    names: Names,
    spec: AgentSpec,
    n: int,
    *,
    max_steps: int,
    prompt: str = "task",
    timeout: float,
    interval: float = 0.2,
) -> dict[str, Any]:
    """Submit ``n`` tasks at once and wait for them. Every task completed: the counts,
    ``loopline_s`` (last end - submission) and ``loopline_p50_task_s``. Otherwise the
    counts and an ``error`` (how many failed, the first reason, or what still ran at the
    timeout), and no time at all."""
    ids, started = await submit_many(redis, names, spec, n, max_steps=max_steps, prompt=prompt)
    try:
        status = await wait_done(redis, names, ids, timeout=timeout, interval=interval)
    except TimeoutError as exc:
        return {"completed": None, "failed": None, "error": f"did not finish: {exc}"}
    ended = await outcome(redis, names, status)
    out: dict[str, Any] = {"completed": ended.completed, "failed": ended.failed}
    if not ended.all_completed:
        out["error"] = ended.describe()
        out["first_failure"] = ended.first_failure
        return out
    ends = await finish_times(redis, names, ids)
    out["loopline_s"] = max(ends) - started
    out["loopline_p50_task_s"] = statistics.median(e - started for e in ends)
    return out

"""Driving a loopline deployment from the benchmarks: submit many tasks in one round trip,
wait for them, read their logs. Plain Redis commands on the documented wire format."""

from __future__ import annotations

import asyncio
import json
import time
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
    payloads = [e.model_dump_json() for e in events]
    started = time.time()
    for i in range(0, n, 500):
        async with redis.pipeline(transaction=False) as pipe:
            for data in payloads[i : i + 500]:
                pipe.xadd(names.tasks, {DATA_FIELD: data})
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

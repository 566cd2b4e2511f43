"""The floor: one raw Redis Streams hop, XADD → XREADGROUP → XACK, between two processes.

Process A publishes an entry (XADD) on stream ``ping``; process B, blocked in XREADGROUP
on ``ping``, receives it, acknowledges it and publishes the reply on ``pong`` (XACK and
XADD in one pipelined round trip); A, blocked in XREADGROUP on ``pong``, receives it and
acknowledges it. One round trip is two hops; a hop's latency is half of it. Both sides use
``redis.asyncio`` (what the services use) and a ~300-byte JSON payload (the size of a
ContextRequested / ToolRequested event).

``python -m benchmarks.rawhop echo URL PREFIX`` is side B.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from typing import Any

import redis.asyncio as aioredis

from loopline import lifetime

PAYLOAD = json.dumps(
    {
        "version": 1,
        "task_id": "0" * 32,
        "at": 0.0,
        "type": "ContextRequested",
        "step": 1,
        "agent_id": "0" * 16,
        "transcript_len": 3,
        "pad": "x" * 150,
    }
).encode()


async def _group(r: aioredis.Redis, stream: str) -> None:
    try:
        await r.xgroup_create(stream, "g", id="0", mkstream=True)
    except aioredis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


async def echo(url: str, prefix: str) -> None:
    r = aioredis.Redis.from_url(url)
    ping, pong = f"{prefix}:ping", f"{prefix}:pong"
    await _group(r, ping)
    await r.set(f"{prefix}:echo-ready", 1)
    while True:
        reply: Any = await r.xreadgroup("g", "b", {ping: ">"}, count=1, block=1000)
        if not reply:
            continue
        entry_id, fields = reply[0][1][0]
        if fields.get(b"stop"):
            await r.xack(ping, "g", entry_id)
            break
        async with r.pipeline(transaction=False) as pipe:
            pipe.xack(ping, "g", entry_id)
            pipe.xadd(pong, {"__data__": fields[b"__data__"]})
            await pipe.execute()
    await r.aclose()


async def measure(url: str, prefix: str, round_trips: int) -> list[float]:
    """Per-hop latencies in seconds (each round trip / 2)."""
    proc = lifetime.spawn([sys.executable, "-m", "benchmarks.rawhop", "echo", url, prefix])
    r = aioredis.Redis.from_url(url)
    ping, pong = f"{prefix}:ping", f"{prefix}:pong"
    try:
        await _group(r, pong)
        for _ in range(200):
            if await r.get(f"{prefix}:echo-ready"):
                break
            await asyncio.sleep(0.05)
        hops: list[float] = []
        for i in range(round_trips + 20):
            started = time.perf_counter()
            await r.xadd(ping, {"__data__": PAYLOAD})
            reply: Any = await r.xreadgroup("g", "a", {pong: ">"}, count=1, block=5000)
            await r.xack(pong, "g", reply[0][1][0][0])
            if i >= 20:  # warm-up
                hops.append((time.perf_counter() - started) / 2)
        await r.xadd(ping, {"stop": 1})
        return hops
    finally:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        await r.delete(ping, pong, f"{prefix}:echo-ready")
        await r.aclose()


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "echo":
        asyncio.run(echo(sys.argv[2], sys.argv[3]))
    else:
        raise SystemExit("usage: python -m benchmarks.rawhop echo URL PREFIX")

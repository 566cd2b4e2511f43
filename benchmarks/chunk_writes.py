"""What one chunk batch costs the model service to write: ``ChunkPublisher``'s write of a
batch of two text chunks to a task's chunk stream, one after another, wall and CPU time
per batch. ``python -m benchmarks.chunk_writes [--batches N]`` (``REDIS_URL``, default
the local server).

A streamed reply of a fast model is about one batch per token (a batch per
``LOOPLINE_STREAM_BATCH_MS`` at most), so this is the model service's own cost per
streamed token, beside LangChain's cost of producing the chunk.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid

from langchain_core.messages import AIMessageChunk

from services.model.streaming import ChunkPublisher
from services.runtime import Runtime
from services.settings import Settings


async def per_batch(url: str, batches: int) -> tuple[float, float]:
    """(wall µs, CPU µs) per batch, after a warm-up of a tenth as many."""
    settings = Settings(prefix=f"chunk-writes-{uuid.uuid4().hex[:8]}", stream_batch_ms=0)
    rt = Runtime(url, settings)
    attempt: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    attempt.set_result(1)
    publisher = ChunkPublisher(
        rt.connection, rt.names, settings, task_id="t", step=1, attempt=attempt, model={}
    )
    chunk = AIMessageChunk(content="token ")
    try:
        for _ in range(batches // 10):
            await _one(publisher, chunk)
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(batches):
            await _one(publisher, chunk)
        return (
            (time.perf_counter() - wall) / batches * 1e6,
            (time.process_time() - cpu) / batches * 1e6,
        )
    finally:
        await rt.redis.delete(rt.names.task_chunks("t"), rt.names.task_streaming("t"))
        await rt.close()


async def _one(publisher: ChunkPublisher, chunk: AIMessageChunk) -> None:
    """Two chunks buffered, the batch written (what the publisher's timer does)."""
    publisher.add(chunk)
    publisher.add(chunk)
    await publisher.cut()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=3000)
    args = parser.parse_args()
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")
    wall, cpu = asyncio.run(per_batch(url, args.batches))
    print(f"one chunk batch written: {wall:.0f} µs wall, {cpu:.0f} µs CPU ({args.batches} batches)")


if __name__ == "__main__":
    main()

"""Token streaming for the tasks whose client asked for it (``Names.task_streaming``).

The model is called with ``astream`` and every chunk goes to the task's chunk stream as
it arrives, batched per ``LOOPLINE_STREAM_BATCH_MS``: one ``XADD`` per batch, not per
token. The chunks also merge into the whole reply, which travels on ``ModelResponded``
as before. Tasks nobody watches are called with ``ainvoke``, unchanged.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import redis.asyncio as aioredis
from langchain_core.messages import AIMessageChunk, BaseMessage, message_chunk_to_message

from contracts.chunks import ChunkBatch
from contracts.streams import DATA_FIELD, Names
from services.connection import Connection
from services.settings import Settings


async def wanted(connection: Connection, names: Names, task_id: str) -> bool:
    """Whether a client asked to see this task's replies as they are generated: the one
    command streaming adds to a step nobody watches (on the hot path's lean client)."""
    return bool(await connection.command("EXISTS", names.task_streaming(task_id)))


def model_metadata(runnable: Any) -> dict[str, Any]:
    """What LangChain adds to the metadata of each streamed chunk from the chat model:
    its LangSmith parameters and ``lc_versions`` (``ls_integration`` the client adds)."""
    model = runnable
    while hasattr(model, "bound"):  # bind_tools wraps the model in RunnableBindings
        model = model.bound
    found: dict[str, Any] = {}
    get_params = getattr(model, "_get_ls_params", None)
    if callable(get_params):
        found.update(get_params())
    found.pop("ls_integration", None)
    versions = (getattr(model, "metadata", None) or {}).get("lc_versions")
    if versions:
        found["lc_versions"] = dict(versions)
    return found


class ChunkPublisher:
    """One attempt's chunks to the task's chunk stream, in order, batched in time."""

    def __init__(
        self,
        redis: aioredis.Redis,
        names: Names,
        settings: Settings,
        *,
        task_id: str,
        step: int,
        attempt: int,
        model: dict[str, Any],
    ) -> None:
        self.redis = redis
        self.key = names.task_chunks(task_id)
        self.meta_key = names.task_streaming(task_id)
        self.batch_s = settings.stream_batch_ms / 1000
        self.maxlen = settings.stream_maxlen
        self.ttl_s = settings.stream_ttl_s
        self.task_id = task_id
        self.step = step
        self.attempt = attempt
        self.model = model
        self.first = True
        self.buffer: list[dict[str, Any]] = []
        self._timer: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()  # FIFO: batches reach the stream in the order cut

    def add(self, chunk: AIMessageChunk) -> None:
        self.buffer.append(chunk.model_dump(exclude_defaults=True))
        if self._timer is None:
            self._timer = asyncio.create_task(self._flush_later())

    async def _flush_later(self) -> None:
        await asyncio.sleep(self.batch_s)
        self._timer = None
        await self._write(None)

    async def close(self, end: str) -> None:
        """Write what is left with the attempt's end (``done`` or ``failed``)."""
        if self._timer is not None:
            self._timer.cancel()  # still asleep: its chunks are in the buffer
            self._timer = None
        await self._write(end)

    async def _write(self, end: str | None) -> None:
        async with self._lock:
            if not self.buffer and end is None:
                return
            batch = ChunkBatch(
                task_id=self.task_id,
                step=self.step,
                attempt=self.attempt,
                chunks=self.buffer,
                reset=self.first and self.attempt > 1,
                end=end,
                model=self.model if self.first else {},
            )
            self.buffer = []
            self.first = False
            data = json.dumps(batch.model_dump(exclude_defaults=True), default=str)
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.xadd(self.key, {DATA_FIELD: data}, maxlen=self.maxlen, approximate=True)
                pipe.expire(self.key, self.ttl_s)
                pipe.expire(self.meta_key, self.ttl_s)
                await pipe.execute()


async def next_attempt(redis: aioredis.Redis, names: Names, task_id: str, step: int) -> int:
    """The attempt number of a new model call for this step (counted in Redis, so a
    redelivery to another replica counts on)."""
    return int(await redis.hincrby(names.task_streaming(task_id), f"step:{step}", 1))


async def merge_stream(chunks: AsyncIterator[BaseMessage], publisher: ChunkPublisher) -> Any:
    """Publish each chunk and return the whole reply (the chunks merged, as LangChain's
    ``invoke`` on a streaming model returns it). A failure ends the attempt as failed."""
    merged: AIMessageChunk | None = None
    try:
        async for chunk in chunks:
            if not isinstance(chunk, AIMessageChunk):
                continue
            publisher.add(chunk)
            merged = chunk if merged is None else merged + chunk
    except BaseException:
        await asyncio.shield(publisher.close("failed"))
        raise
    await publisher.close("done")
    if merged is None:
        raise ValueError("the model streamed no message")
    return message_chunk_to_message(merged)


async def streamed_call(
    runnable: Any,
    prompt: Any,
    redis: aioredis.Redis,
    names: Names,
    settings: Settings,
    *,
    task_id: str,
    step: int,
) -> Any:
    """One model call of a streamed task: ``runnable.astream(prompt)``, published."""
    attempt = await next_attempt(redis, names, task_id, step)
    publisher = ChunkPublisher(
        redis,
        names,
        settings,
        task_id=task_id,
        step=step,
        attempt=attempt,
        model=model_metadata(runnable),
    )
    return await merge_stream(runnable.astream(prompt), publisher)

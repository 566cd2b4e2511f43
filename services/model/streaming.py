"""Token streaming for the tasks whose client asked for it (``Names.task_streaming``).

The model is called as LangChain's model node calls it under LangGraph's ``messages``
stream mode: ``ainvoke`` with a streaming callback handler (``ChunkRelay``), so the chat
model streams exactly when LangChain's would, and every chunk goes to the task's chunk
stream as it arrives, batched per ``LOOPLINE_STREAM_BATCH_MS``: one ``XADD`` per batch,
not per token, on the lean connection (``services.fastredis``) where there is one; the
stream's and the request's time to live are renewed with the first batch, the last, and
at least every quarter of ``LOOPLINE_STREAM_TTL_S`` between them, not with every batch.
The whole reply travels on ``ModelResponded`` as before. A chat model that does not
stream (it implements ``_generate`` alone, or streaming is disabled) is invoked, and its
reply goes to the chunk stream as one whole message (``"type": "ai"``), which LangGraph's
``messages`` mode yields as it is. Tasks nobody watches are called with ``ainvoke``
alone, unchanged.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, TypeVar
from uuid import UUID

import redis.asyncio as aioredis
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, AIMessageChunk
from langchain_core.outputs import ChatGenerationChunk, GenerationChunk
from langchain_core.tracers._streaming import (
    _StreamingCallbackHandler,
    _V2StreamingCallbackHandler,
)

from contracts.chunks import BLOCKS, ChunkBatch
from contracts.streams import DATA_FIELD, Names
from services.connection import Connection
from services.runtime import Runtime
from services.settings import Settings
from services.subscription import ChannelListener

log = logging.getLogger("loopline.model")

T = TypeVar("T")


async def asked_for(connection: Connection, names: Names, task_id: str) -> str | None:
    """What a client asked of the task's replies as they are generated: ``"1"``
    (chunks), ``BLOCKS``, or nothing (asked Redis: what ``StreamRequests`` falls back to
    while it may have missed a request)."""
    found: Any = await connection.command("HGET", names.task_streaming(task_id), "asked")
    if found is None:
        return None
    return found.decode() if isinstance(found, bytes) else str(found)


PRUNE_AT = 10_000
"""Requests remembered before the expired ones are dropped."""


class StreamRequests(ChannelListener):
    """Which tasks' replies a client asked to see, known without a Redis command per
    model call: clients announce a request on ``Names.stream_requests`` (pub/sub) when
    they make it, before submitting the task, and every model service remembers it for
    ``LOOPLINE_STREAM_TTL_S``; a service that (re)subscribes loads the requests made
    meanwhile from ``Names.stream_requested``. While it is not listening a request may
    have been missed: a task not heard of is asked in Redis (``wanted``)."""

    def __init__(self, rt: Runtime) -> None:
        super().__init__(rt.redis, rt.names.stream_requests, enabled=not rt.cluster)
        self.rt = rt
        self.ttl_s = rt.settings.stream_ttl_s
        self.asked: dict[str, float] = {}  # task id -> when the request lapses (monotonic)
        self.in_blocks: set[str] = set()
        """Tasks whose client asked for content-block events (``BLOCKS``)."""

    async def wanted(self, task_id: str) -> bool:
        now = time.monotonic()
        lapses = self.asked.get(task_id)
        if lapses is not None and lapses > now:
            return True
        if lapses is not None or not self.listening:
            # lapsed here, yet streaming (the chunk writes renew the request in Redis,
            # not in every replica), or possibly missed: Redis knows
            self.asked.pop(task_id, None)
            found = await asked_for(self.rt.connection, self.rt.names, task_id)
            if found:
                self.heard(task_id if found != BLOCKS else f"{task_id} {BLOCKS}")
            return bool(found)
        return False

    def blocks(self, task_id: str) -> bool:
        """Whether the task's client asked for content-block events (LangGraph's v3
        streaming) rather than chunks (``wanted`` first)."""
        return task_id in self.in_blocks

    def heard(self, data: str) -> None:
        """A request: ``task_id``, or ``task_id blocks`` (``Client.stream_replies``)."""
        task_id, _, kind = data.partition(" ")
        if kind == BLOCKS:
            self.in_blocks.add(task_id)
        now = time.monotonic()
        self.asked[task_id] = max(self.asked.get(task_id, 0.0), now + self.ttl_s)
        if len(self.asked) > PRUNE_AT:
            self.asked = {t: at for t, at in self.asked.items() if at > now}
            self.in_blocks &= set(self.asked)

    async def caught_up(self) -> None:
        """The requests made before this subscription heard them (from the sorted set);
        from here on pub/sub tells every new one."""
        now = time.time()
        found: Any = await self.rt.redis.zrangebyscore(
            self.rt.names.stream_requested, now, "+inf", withscores=True
        )
        offset = time.monotonic() - now
        for member, lapses in found:
            name = member.decode() if isinstance(member, bytes) else str(member)
            task_id, _, kind = name.partition(" ")
            if kind == BLOCKS:
                self.in_blocks.add(task_id)
            self.asked[task_id] = max(self.asked.get(task_id, 0.0), float(lapses) + offset)


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
        connection: Connection,
        names: Names,
        settings: Settings,
        *,
        task_id: str,
        step: int,
        attempt: asyncio.Future[int],
        model: dict[str, Any],
    ) -> None:
        """``attempt``: the attempt's number, counted in Redis while the model is called
        (needed by the first batch only, so the count is no round trip before the call)."""
        self.connection = connection
        self.key = names.task_chunks(task_id)
        self.meta_key = names.task_streaming(task_id)
        self.batch_s = settings.stream_batch_ms / 1000
        self.maxlen = settings.stream_maxlen
        self.ttl_s = settings.stream_ttl_s
        self.renew_every_s = self.ttl_s / 4
        """The keys' time to live is renewed with a batch this long after the last renewal
        (and with the first and the last batch): not a command more per batch."""
        self.task_id = task_id
        self.step = step
        self._attempt = attempt
        self.model = model
        self.first = True
        self.shown = False  # whether a batch with text (or a tool call) was cut
        self._cut_at = float("-inf")  # when the last batch was cut (monotonic)
        self._renewed_at = float("-inf")  # when the keys' time to live was renewed
        self.buffer: list[dict[str, Any]] = []
        self._timer: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()  # FIFO: batches reach the stream in the order cut

    def add_event(self, event: dict[str, Any]) -> None:
        """Buffer one of LangChain's content-block protocol events of the call (a client
        of LangGraph's v3 streaming asked for them): batched as chunks are."""
        self.buffer.append(dict(event))
        if self._timer is None:
            delay = max(0.0, self._cut_at + self.batch_s - time.monotonic()) if self.shown else 0.0
            self.shown = self.shown or event.get("event") == "content-block-delta"
            self._timer = asyncio.create_task(self._flush_later(delay))

    def add(self, chunk: AIMessage) -> None:
        """Buffer a chunk. It goes out at once when no batch was cut in the last
        ``LOOPLINE_STREAM_BATCH_MS`` (and always until the first text or tool call has
        gone out), else with the chunks that follow until that time is up: the stream
        gets one entry per window at most, and a model slower than that is relayed
        without delay, so batching adds nothing to the time to the first token nor to
        the time between tokens. A whole ``AIMessage`` (a model that does not stream)
        keeps its type on the stream."""
        dumped = chunk.model_dump(exclude_defaults=True)
        if not isinstance(chunk, AIMessageChunk):
            dumped["type"] = chunk.type
        self.buffer.append(dumped)
        if self._timer is None:
            delay = max(0.0, self._cut_at + self.batch_s - time.monotonic()) if self.shown else 0.0
            calls: Any = chunk.tool_calls  # a chunk's come as tool_call_chunks
            if isinstance(chunk, AIMessageChunk):
                calls = chunk.tool_call_chunks
            self.shown = self.shown or bool(chunk.content or calls)
            self._timer = asyncio.create_task(self._flush_later(delay))

    async def cut(self) -> None:
        """Wait until the batch the buffered chunks are in has been written."""
        if self._timer is not None:
            await asyncio.shield(self._timer)

    async def _flush_later(self, delay: float) -> None:
        if delay > 0:  # no sleep(0) before a batch due now: one loop turn sooner
            await asyncio.sleep(delay)
        self._timer = None
        self._cut_at = time.monotonic()
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
            attempt = await self._attempt
            batch = ChunkBatch(
                task_id=self.task_id,
                step=self.step,
                attempt=attempt,
                chunks=self.buffer,
                reset=self.first and attempt > 1,
                end=end,
                model=self.model if self.first else {},
            )
            self.buffer = []
            self.first = False
            data = json.dumps(batch.model_dump(exclude_defaults=True), default=str)
            send = self.connection.command_retrying  # no redelivery writes a batch again
            await send("XADD", self.key, "MAXLEN", "~", self.maxlen, "*", DATA_FIELD, data)
            now = time.monotonic()
            if end is not None or now - self._renewed_at >= self.renew_every_s:
                self._renewed_at = now  # after the XADD: an EXPIRE needs the stream to exist
                await asyncio.gather(
                    send("EXPIRE", self.key, self.ttl_s), send("EXPIRE", self.meta_key, self.ttl_s)
                )


async def next_attempt(redis: aioredis.Redis, names: Names, task_id: str, step: int) -> int:
    """The attempt number of a new model call for this step (counted in Redis, so a
    redelivery to another replica counts on)."""
    return int(await redis.hincrby(names.task_streaming(task_id), f"step:{step}", 1))


class ChunkRelay(BaseCallbackHandler, _StreamingCallbackHandler[Any]):
    """The chat model's chunks to the publisher, as LangGraph's ``messages`` mode gets
    them: a streaming callback handler on the model call, so LangChain's chat model
    decides whether to stream exactly as under LangChain's create_agent
    (``BaseChatModel._should_stream``: a model that implements only ``_generate``, or
    with streaming disabled, is invoked; one whose stream yields nothing raises
    LangChain's error)."""

    run_inline = True  # called in the event loop, in order, with no executor hop
    raise_error = True  # a chunk that cannot be published fails the call

    def __init__(self, publisher: ChunkPublisher) -> None:
        self.publisher = publisher
        self.relayed = False

    def on_llm_new_token(
        self,
        token: str | list[str | dict[str, Any]],
        *,
        chunk: GenerationChunk | ChatGenerationChunk | None = None,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        if isinstance(chunk, ChatGenerationChunk) and isinstance(chunk.message, AIMessageChunk):
            self.publisher.add(chunk.message)
            self.relayed = True

    def tap_output_aiter(self, run_id: UUID, output: AsyncIterator[T]) -> AsyncIterator[T]:
        return output

    def tap_output_iter(self, run_id: UUID, output: Iterator[T]) -> Iterator[T]:
        return output


class BlockRelay(ChunkRelay, _V2StreamingCallbackHandler):
    """The chat model's content-block protocol events to the publisher, as LangGraph's
    v3 streaming gets them (``StreamMessagesHandlerV2``): declaring itself a v2
    handler routes the model's ``ainvoke`` through LangChain's event generator, so the
    events and the reply they assemble (its content as v1 content blocks) are
    LangChain's own under ``stream_events(version="v3")``."""

    def on_llm_new_token(self, token: Any, **kwargs: Any) -> None:
        """No v1 chunks on a v2 call, as LangGraph's v2 handler takes none."""

    def on_stream_event(self, event: Any, **kwargs: Any) -> None:
        self.publisher.add_event(event)
        self.relayed = True


async def relayed_call(
    runnable: Any, prompt: Any, publisher: ChunkPublisher, *, blocks: bool = False
) -> Any:
    """``runnable.ainvoke(prompt)`` with its chunks published (``blocks``: its
    content-block events, ``BlockRelay``); a reply that was not streamed goes out
    whole, as LangGraph's ``messages`` mode yields it once the model ends. A failure
    ends the attempt as failed."""
    relay = BlockRelay(publisher) if blocks else ChunkRelay(publisher)
    try:
        reply = await runnable.ainvoke(prompt, {"callbacks": [relay]})
        if not relay.relayed and isinstance(reply, AIMessage):
            publisher.add(reply)
    except BaseException:
        await asyncio.shield(publisher.close("failed"))
        raise
    await publisher.close("done")
    return reply


async def streamed_call(
    runnable: Any,
    prompt: Any,
    connection: Connection,
    names: Names,
    settings: Settings,
    *,
    task_id: str,
    step: int,
    blocks: bool = False,
) -> Any:
    """One model call of a streamed task, its chunks (or content-block events)
    published (``relayed_call``)."""
    attempt = asyncio.ensure_future(next_attempt(connection.redis, names, task_id, step))
    publisher = ChunkPublisher(
        connection,
        names,
        settings,
        task_id=task_id,
        step=step,
        attempt=attempt,
        model=model_metadata(runnable),
    )
    return await relayed_call(runnable, prompt, publisher, blocks=blocks)

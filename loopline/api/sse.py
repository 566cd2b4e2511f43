"""A run's stream as LangGraph's server sends it, in Server-Sent Events frames
(``event: <name>``, ``data: <json>``, ``id: <position>``), as ``langgraph_sdk`` reads
them: ``metadata`` (``run_id``) first, then the items of the modes asked for
(``values``, ``updates``, ``messages`` for ``messages-tuple``; ``messages/metadata``,
``messages/partial``, ``messages/complete`` for ``messages``; and whatever else the
stream-mode layer yields, e.g. ``custom``; ``events``, ``debug``, ``checkpoints`` and
``tasks`` from ``run_modes``), ``error`` if the run failed, ``end``.

Every item's frames carry its position (``events.Cursor``) as their id; a client that
reconnects with ``Last-Event-ID`` gets every later item once and no second ``metadata``.
While a run is quiet (a long tool call), a comment line goes out every few seconds, so
proxies that close idle connections keep the stream open (SSE readers skip comments).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

from langchain_core.messages import AIMessageChunk, BaseMessage, message_chunk_to_message

from loopline.api import delayed_runs
from loopline.api.events import Cursor, Failed, run_items
from loopline.api.records import RunRecord
from loopline.api.run_errors import run_error
from loopline.api.run_modes import SERVER_MODES, ServerModes
from loopline.api.runs import loopline_modes, was_stopped
from loopline.api.tenant import Tenant
from loopline.api.wire import dumps
from loopline.stream_modes import Item

log = logging.getLogger("loopline.api.sse")

Frame = tuple[str, Any]
HEARTBEAT = b": heartbeat\n\n"
HEARTBEAT_S = 15.0


def frame(event: str, data: Any, event_id: str | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id else ""
    return f"{head}event: {event}\ndata: {dumps(data)}\n\n".encode()


class FrameWriter:
    """The frames of one item. Stateful (``messages/partial`` carries the reply so far),
    so it sees every item of the run, also those a reconnect skips."""

    def __init__(self, tenant: Tenant, record: RunRecord, requested: list[str]) -> None:
        self.requested = set(requested)
        self.server = (
            ServerModes(tenant, record, requested) if self.requested & set(SERVER_MODES) else None
        )
        self.run_fields = {
            "thread_id": record.thread_id or None,
            "run_id": record.run_id,
            "assistant_id": record.assistant_id,
            "graph_id": record.assistant_id.partition("@")[0],
        }
        self.described: set[str] = set()
        self.partial: dict[str, AIMessageChunk] = {}

    async def prepare(self) -> None:
        if self.server is not None:
            await self.server.prepare()

    async def frames(self, item: Item) -> list[Frame]:
        """The item's frames, in the modes asked for (a server mode's after the item's
        own, as LangGraph's server sends a superstep's checkpoint after its values)."""
        out = self._own(item)
        if self.server is not None:
            out.extend(await self.server.frames(item))
        return out

    async def closing(self) -> list[Frame]:
        return await self.server.closing() if self.server is not None else []

    def _own(self, item: Item) -> list[Frame]:
        mode, data = item
        if mode == "messages":
            message, metadata = data
            meta = {**metadata, **self.run_fields}
            out: list[Frame] = []
            if "messages-tuple" in self.requested:
                out.append(("messages", [message, meta]))
            if "messages" in self.requested:
                out.extend(self._messages_as_partials(message, meta))
            return out
        return [(mode, data)] if mode in self.requested else []

    def _messages_as_partials(self, message: BaseMessage, meta: dict[str, Any]) -> list[Frame]:
        """LangGraph's older ``messages`` shape: a message's metadata once, then the
        reply so far on every chunk, or the whole message once (a tool's)."""
        key = str(message.id)
        out: list[Frame] = []
        if key not in self.described:
            self.described.add(key)
            out.append(("messages/metadata", {key: {"metadata": meta}}))
        if isinstance(message, AIMessageChunk):
            if meta.get("loopline_reset"):  # a retried model call: what came before is void
                self.partial.pop(key, None)
            so_far = self.partial.get(key)
            so_far = message if so_far is None else so_far + message
            self.partial[key] = so_far
            out.append(("messages/partial", [message_chunk_to_message(so_far)]))
        else:
            out.append(("messages/complete", [message]))
        return out


async def run_frames(
    tenant: Tenant, record: RunRecord, requested: list[str], last_event_id: str | None
) -> AsyncIterator[bytes]:
    """The run's SSE frames from its start, or after ``last_event_id``."""
    cursor = Cursor.decode(last_event_id) if last_event_id else Cursor()
    if not last_event_id:
        yield frame("metadata", {"run_id": record.run_id, "attempt": 1})
    if not await delayed_runs.until_started(tenant, record.run_id):
        yield frame("end", None)  # a delayed run cancelled before it started: nothing ran
        return
    writer = FrameWriter(tenant, record, requested)
    await writer.prepare()
    failed = False
    async for source, position, item in run_items(tenant, record, loopline_modes(requested)):
        frames = [] if isinstance(item, Failed) else await writer.frames(item)
        if cursor.seen(source, position):
            continue
        cursor = cursor.after(source, position)
        if isinstance(item, Failed):
            failed = True
            if not await was_stopped(tenant, record.task_id):
                yield frame("error", _error(item), cursor.encode())
            continue
        for event, data in frames:
            yield frame(event, data, cursor.encode())
    if not failed:  # (a reconnect after the last item gets these again)
        for event, data in await writer.closing():
            yield frame(event, data, cursor.encode())
    yield frame("end", None)


def _error(failed: Failed) -> dict[str, str]:
    return run_error(failed.event)  # a refusal: LangGraph's run errs with the node's exception


async def with_heartbeats(
    frames: AsyncIterator[bytes],
    every_s: float = HEARTBEAT_S,
    stopping: asyncio.Event | None = None,
) -> AsyncIterator[bytes]:
    """``frames``, and a comment line whenever none came for ``every_s`` seconds; it ends
    (without ``end``: the run goes on) once ``stopping`` is set, so a client resumes it
    elsewhere with ``Last-Event-ID``."""
    pending = asyncio.ensure_future(anext(frames))
    stop = asyncio.ensure_future(stopping.wait()) if stopping is not None else None
    watched = {pending} if stop is None else {pending, stop}
    try:
        while True:
            done, _ = await asyncio.wait(
                watched, timeout=every_s, return_when=asyncio.FIRST_COMPLETED
            )
            if pending not in done:
                if stop is not None and stop in done:
                    return
                yield HEARTBEAT
                continue
            try:
                chunk = pending.result()
            except StopAsyncIteration:
                return
            except Exception as exc:  # told to the client, not dropped
                # as LangGraph's server: an error frame and the end, not a dropped
                # connection (which the SDKs would reconnect to, failing again for ever)
                log.exception("streaming a run's frames")
                yield frame("error", {"error": type(exc).__name__, "message": str(exc)})
                return
            yield chunk
            pending = asyncio.ensure_future(anext(frames))
            watched = {pending} if stop is None else {pending, stop}
    finally:
        pending.cancel()
        if stop is not None:
            stop.cancel()

"""LangGraph's ``custom`` stream mode in whichever service runs the code: what hooks write
with ``get_stream_writer()`` (or ``runtime.stream_writer``) and tools with
``ToolRuntime.stream_writer`` goes to the task's chunk stream (``Names.task_chunks``) as
``ChunkBatch``es with ``custom`` items, when a client asked to stream the task.

A ``CustomWriter`` is made for one stage of one step (the hooks of the loop, a model
call, a tool call); it keeps what is written and writes it out in batches, and its
``flush`` is awaited before the stage reports its outcome, so a client that sees the
outcome on the task's log has the items written before it. Nothing is read or written
in Redis unless something is written: a stage that writes nothing costs no command.
Writers may be called from worker threads (sync tools and hooks run in threads).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any, Literal

from contracts.chunks import ChunkBatch, CustomStage, Subtask
from contracts.streams import DATA_FIELD
from services.runtime import Runtime

Kind = Literal["custom", "deltas", "subtasks"]
"""What a written item is (``ChunkBatch.kind``)."""

_current: ContextVar[CustomWriter | None] = ContextVar("loopline_custom_writer", default=None)


class CustomWriter:
    """One stage's writes to the custom stream (see the module's docstring)."""

    def __init__(
        self, rt: Runtime, task_id: str, step: int, stage: CustomStage, call_id: str | None = None
    ) -> None:
        self.rt = rt
        self.task_id = task_id
        self.step = max(step, 1)
        self.stage = stage
        self.call_id = call_id
        self.buffer: list[tuple[Kind, Any]] = []
        """What was written, in order, each with its kind (``ChunkBatch.kind``)."""
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()  # batches reach the stream in the order cut
        self._streamed: bool | None = None  # whether a client asked (read once, lazily)

    def __call__(self, chunk: Any) -> None:
        """LangGraph's ``StreamWriter``: takes any JSON-able value."""
        self._take("custom", chunk)

    def delta(self, delta: Any) -> None:
        """A tool's partial output (``ToolRuntime.emit_output_delta``): LangGraph's
        ``tools`` stream mode carries it as the call's ``tool-output-delta``."""
        self._take("deltas", delta)

    def subtask(self, link: Subtask) -> None:
        """An agent the tool call runs (a sub-agent), streamed as this task is: its
        items go under the call's namespace on a stream with subgraphs."""
        self._take("subtasks", link.model_dump(exclude_defaults=True))

    def _take(self, kind: Kind, chunk: Any) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._add(kind, chunk)
        else:  # a worker thread: the event loop adds it, in the order written
            self._loop.call_soon_threadsafe(self._add, kind, chunk)

    def _add(self, kind: Kind, chunk: Any) -> None:
        self.buffer.append((kind, chunk))
        if self._timer is None:
            self._timer = self._loop.create_task(self._flush_later())

    async def _flush_later(self) -> None:
        await asyncio.sleep(self.rt.settings.stream_batch_ms / 1000)
        self._timer = None
        await self._write()

    async def flush(self) -> None:
        """Write what is left (awaited before the stage reports its outcome)."""
        await asyncio.sleep(0)  # items a worker thread handed over just before it returned
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        await self._write()

    async def _write(self) -> None:
        async with self._lock:
            if not self.buffer:
                return
            items, self.buffer = self.buffer, []
            names = self.rt.names
            if self._streamed is None:
                found = await self.rt.redis.exists(names.task_streaming(self.task_id))
                self._streamed = bool(found)
            if not self._streamed:
                return  # nobody streams this task: LangGraph drops the writes too
            settings = self.rt.settings
            key = names.task_chunks(self.task_id)
            async with self.rt.redis.pipeline(transaction=False) as pipe:
                for kind, run in _runs(items):  # one batch per kind, in the order written
                    batch = ChunkBatch(
                        task_id=self.task_id,
                        step=self.step,
                        attempt=1,
                        custom=run,
                        stage=self.stage,
                        call_id=self.call_id,
                        kind=kind,
                    )
                    data = json.dumps(batch.model_dump(exclude_defaults=True), default=str)
                    fields: dict[Any, Any] = {DATA_FIELD: data}
                    pipe.xadd(key, fields, maxlen=settings.stream_maxlen, approximate=True)
                pipe.expire(key, settings.stream_ttl_s)
                await pipe.execute()


def _runs(items: list[tuple[Kind, Any]]) -> list[tuple[Kind, list[Any]]]:
    """``items`` cut into runs of one kind, in order."""
    runs: list[tuple[Kind, list[Any]]] = []
    for kind, item in items:
        if runs and runs[-1][0] == kind:
            runs[-1][1].append(item)
        else:
            runs.append((kind, [item]))
    return runs


def current() -> CustomWriter | None:
    """The writer of the stage running in this context, if any."""
    return _current.get()


@contextlib.contextmanager
def writing(writer: CustomWriter | None, context: Any = None) -> Iterator[None]:
    """Run a stage with ``writer`` as its custom stream: what ``runtime.stream_writer``
    gives (``services.hooks.lg_runtime``) and what LangGraph's ``get_stream_writer()``
    finds in the runnable config, as inside a LangGraph node (with the run's
    ``context``, for ``get_runtime()``)."""
    from langchain_core.runnables.config import var_child_runnable_config
    from langgraph._internal._constants import CONFIG_KEY_RUNTIME
    from langgraph.pregel._tools import _tool_call_writer
    from langgraph.runtime import Runtime as LgRuntime

    from services import store

    token = _current.set(writer)
    # a tool call's ``emit_output_delta`` reads LangGraph's writer of the running call
    delta_token = _tool_call_writer.set(writer.delta if writer and writer.call_id else None)
    config_token = None
    if writer is not None:
        runtime = LgRuntime(context=context, store=store.shared(), stream_writer=writer)
        config_token = var_child_runnable_config.set(
            {"configurable": {CONFIG_KEY_RUNTIME: runtime}}
        )
    try:
        yield
    finally:
        if config_token is not None:
            var_child_runnable_config.reset(config_token)
        _tool_call_writer.reset(delta_token)
        _current.reset(token)

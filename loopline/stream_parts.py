"""LangGraph's ``tools`` stream mode, ``stream(..., version="v2")`` parts, and what the v3
run stream (``stream_events(version="v3")``) is fed, from a task's stream-mode items.

LangGraph 1.2's v3 streaming is a ``StreamMux`` of transformers (its own values, messages,
lifecycle and subgraph transformers; ``create_agent``'s ``ToolCallTransformer`` and
``SubagentTransformer``; a middleware's, such as PII redaction) fed by the graph's
``stream(..., subgraphs=True, version="v2")``. The agent runs LangGraph's own v3 entry
(``Pregel._pregel_stream_v3``) on its ``stream``, so the run object, its projections and
the transformers are LangGraph's; this module gives that ``stream`` what LangGraph's
gives:

- ``tools`` items (``ToolLifecycle``): ``tool-started`` when a call of the reply starts
  reporting (its first partial output or its result), ``tool-output-delta`` for what
  ``ToolRuntime.emit_output_delta`` wrote (carried on the task's chunk stream),
  ``tool-finished`` with its tool message, and ``tool-error`` for the calls still running
  when the run fails (LangGraph's ``on_tool_error`` comes before the run raises);
- v2 parts (``parts_of``): ``{"type", "ns", "data"}`` dicts, ``values`` with their
  interrupts apart; under the v3 flag (``CONFIG_KEY_STREAM_MESSAGES_V2``) a model call's
  chunks become LangChain's content-block protocol events (``chunks_to_events``, each with
  the call's ``run_id`` in its metadata, as ``StreamMessagesHandlerV2`` emits them) and
  tool messages leave the ``messages`` mode (they are the ``tools`` mode's).

A model call's protocol events are made once its chunks are all in (the next item of the
stream shows it ended): LangChain's converter reads a whole chunk iterator, and the chunk
stream gives a call's chunks in batches, not one pull at a time. The events, their
content and their order are the converter's.

Every item is the agent's own (namespace ``()``): a sub-agent's run inside a tool is a
task of its own, whose items are not part of its parent's stream here, so LangGraph's
``tasks`` mode (which the v3 mux reads only to discover subgraphs) has none.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

from langchain_core.messages import AIMessage, AIMessageChunk, ToolMessage

from loopline.stream_modes import INTERRUPT, TOOLS_NODE, Item

Part = dict[str, Any]

LIFECYCLE_MODES = ("messages", "updates")
"""What the ``tools`` mode's lifecycle is read from: the model's reply (its calls) and
the tools' messages."""

INTERNAL_ONLY = ("tasks",)
"""Modes the v3 mux asks for that the agent has no items of (see the module's
docstring)."""


class ToolLifecycle:
    """LangGraph's ``tools`` lifecycle items from the reply's calls and their results."""

    def __init__(self) -> None:
        self.calls: dict[str, dict[str, Any]] = {}  # the last reply's calls by id
        self.running: list[str] = []  # started, not ended, in start order

    def take(self, mode: str, data: Any) -> list[Item]:
        if mode == "updates" and isinstance(data, dict) and "model" in data:
            reply = (data["model"] or {}).get("messages") or []
            if reply and isinstance(reply[-1], AIMessage):
                self.calls = {str(c["id"]): dict(c) for c in reply[-1].tool_calls}
            return []
        if mode == "tools":
            return [*self._started(str(data["tool_call_id"])), ("tools", data)]
        if mode == "messages" and _tool_result(data):
            message = data[0]
            call_id = message.tool_call_id
            out = self._started(call_id)
            if call_id in self.running:
                self.running.remove(call_id)
            finished = {"event": "tool-finished", "tool_call_id": call_id, "output": message}
            return [*out, ("tools", finished)]
        return []

    def failed(self, error: BaseException) -> list[Item]:
        """The run failed: the reply's calls that had not ended failed with it."""
        out: list[Item] = []
        for call_id in list(self.calls):
            out.extend(self._started(call_id))
        for call_id in self.running:
            payload = {"event": "tool-error", "tool_call_id": call_id, "message": str(error)}
            out.append(("tools", payload))
        self.running = []
        return out

    def _started(self, call_id: str) -> list[Item]:
        call = self.calls.pop(call_id, None)
        if call is None:
            return []
        self.running.append(call_id)
        payload = {
            "event": "tool-started",
            "tool_call_id": call_id,
            "tool_name": call["name"],
            "input": call["args"],
        }
        return [("tools", payload)]


def _tool_result(data: Any) -> bool:
    message, meta = data
    return isinstance(message, ToolMessage) and meta.get("langgraph_node") == TOOLS_NODE


def internal_modes(modes: Sequence[str]) -> list[str]:
    """The modes to read for ``modes``: the ``tools`` lifecycle needs the model's reply
    and the tools' messages."""
    wanted = [m for m in modes if m not in INTERNAL_ONLY]
    if "tools" in wanted:
        wanted += [m for m in LIFECYCLE_MODES if m not in wanted]
    return wanted


async def with_tools(items: AsyncIterator[Item], modes: Sequence[str]) -> AsyncIterator[Item]:
    """The items of ``modes``, with the ``tools`` lifecycle when asked (``items`` read in
    ``internal_modes(modes)``)."""
    if "tools" not in modes:
        async for item in items:
            yield item
        return
    lifecycle = ToolLifecycle()
    try:
        async for mode, data in items:
            for extra in lifecycle.take(mode, data):
                yield extra
            if mode in modes and mode != "tools":
                yield mode, data
    except Exception as exc:
        for extra in lifecycle.failed(exc):
            yield extra
        raise


class MessageEvents:
    """A model call's chunks as LangChain's content-block protocol events (the v3
    ``messages`` mode), made once the call's chunks are all in."""

    def __init__(self) -> None:
        self.chunks: list[AIMessageChunk] = []
        self.meta: dict[str, Any] = {}

    def take(self, message: Any, meta: dict[str, Any]) -> list[Any]:
        """The ``messages`` data to yield for one item (earlier calls' events first)."""
        if isinstance(message, AIMessageChunk):
            out = [] if _same_call(self.meta, meta) else self.flush()
            if meta.get("loopline_reset"):  # a retried attempt: the earlier one was not it
                self.chunks = []
            self.chunks.append(message)
            self.meta = meta
            return out
        out = self.flush()
        if isinstance(message, ToolMessage):  # the ``tools`` mode's, not a chat message
            return out
        return [*out, (message, meta)]

    def flush(self) -> list[Any]:
        if not self.chunks:
            return []
        from langchain_core.language_models._compat_bridge import chunks_to_events
        from langchain_core.outputs import ChatGenerationChunk

        chunks, self.chunks = self.chunks, []
        meta = {**_without_loopline(self.meta), "run_id": _run_id(self.meta)}
        generations = iter([ChatGenerationChunk(message=c) for c in chunks])
        return [(event, meta) for event in chunks_to_events(generations)]


def _same_call(before: dict[str, Any], meta: dict[str, Any]) -> bool:
    keys = ("langgraph_checkpoint_ns", "loopline_attempt")
    return bool(before) and all(before.get(k) == meta.get(k) for k in keys)


def _without_loopline(meta: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in meta.items() if not k.startswith("loopline_")}


def _run_id(meta: dict[str, Any]) -> str:
    """A model call's run id, stable for its node's task and attempt."""
    place = f"{meta.get('langgraph_checkpoint_ns')}:{meta.get('loopline_attempt', 1)}"
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"loopline:chat:{place}"))


async def parts_of(items: AsyncIterator[Item], *, messages_v2: bool) -> AsyncIterator[Part]:
    """LangGraph's ``stream(..., version="v2")`` parts of the agent's items;
    ``messages_v2``: the v3 flag's ``messages`` (see the module's docstring)."""
    events = MessageEvents() if messages_v2 else None
    async for mode, data in items:
        if events is not None:
            if mode == "messages":
                for shown in events.take(*data):
                    yield {"type": "messages", "ns": (), "data": shown}
                continue
            for shown in events.flush():
                yield {"type": "messages", "ns": (), "data": shown}
        yield _part(mode, data)
    if events is not None:
        for shown in events.flush():
            yield {"type": "messages", "ns": (), "data": shown}


def _part(mode: str, data: Any) -> Part:
    if mode == "values" and isinstance(data, dict):
        values = dict(data)
        interrupts = values.pop(INTERRUPT, ())
        return {"type": mode, "ns": (), "data": values, "interrupts": interrupts}
    return {"type": mode, "ns": (), "data": data}

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
  interrupts apart; under the v3 flag (``CONFIG_KEY_STREAM_MESSAGES_V2``) the model
  service calls the model as LangGraph's v3 streaming does (a v2 streaming handler:
  ``services.model.streaming.BlockRelay``), so the ``messages`` mode carries LangChain's
  own content-block protocol events, each with the call's ``run_id`` in its metadata as
  ``StreamMessagesHandlerV2`` emits them, and the reply is the one they assemble; tool
  messages leave the ``messages`` mode (they are the ``tools`` mode's).

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


def v3_messages(message: Any, meta: dict[str, Any]) -> list[Any]:
    """The v3 ``messages`` data of one item, as ``StreamMessagesHandlerV2`` emits it: a
    content-block event with its model call's ``run_id``, a whole message a node added
    as it is; no v1 chunks (the v2 handler takes none) and no tool messages (they are
    the ``tools`` mode's)."""
    if isinstance(message, dict):
        return [(message, {**_without_loopline(meta), "run_id": _run_id(meta)})]
    if isinstance(message, AIMessageChunk | ToolMessage):
        return []
    return [(message, meta)]


def _without_loopline(meta: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in meta.items() if not k.startswith("loopline_")}


def _run_id(meta: dict[str, Any]) -> str:
    """A model call's run id, stable for its node's task and attempt."""
    place = f"{meta.get('langgraph_checkpoint_ns')}:{meta.get('loopline_attempt', 1)}"
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"loopline:chat:{place}"))


async def parts_of(items: AsyncIterator[Item], *, messages_v2: bool) -> AsyncIterator[Part]:
    """LangGraph's ``stream(..., version="v2")`` parts of the agent's items;
    ``messages_v2``: the v3 flag's ``messages`` (``v3_messages``)."""
    async for mode, data in items:
        if mode == "messages" and messages_v2:
            for shown in v3_messages(*data):
                yield {"type": "messages", "ns": (), "data": shown}
            continue
        yield _part(mode, data)


def _part(mode: str, data: Any) -> Part:
    if mode == "values" and isinstance(data, dict):
        values = dict(data)
        interrupts = values.pop(INTERRUPT, ())
        return {"type": mode, "ns": (), "data": values, "interrupts": interrupts}
    return {"type": mode, "ns": (), "data": data}

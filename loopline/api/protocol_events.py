"""One run's items as the events of LangGraph's thread-centric streaming protocol (the
one ``langgraph_sdk``'s ``client.threads.stream()`` speaks), as langgraph-api 0.16 sends
them on ``POST /threads/{id}/stream/events``: each event an envelope
``{"type": "event", "event_id", "seq", "method", "params": {"namespace", "timestamp",
"data"}}``, its ``method`` one of the channels a client subscribes to.

- ``lifecycle``: ``{"event": "running", "graph_name"}`` when the run starts, then
  ``completed``, ``interrupted`` (a human is asked, or the run was stopped) or ``failed``
  (with the run's error message);
- ``values`` and ``updates`` (the node in ``params.node``): the state, its messages in
  the protocol's shape, without ``__interrupt__``; an interrupt is an
  ``input.requested`` event (channel ``input``) with its id;
- ``messages``: a model's reply as LangChain's content-block events (``message-start``,
  ``content-block-*``, ``message-finish``), made by ``langchain_core``'s own converter
  from the reply's chunks as they come (``ReplyEvents``);
- ``tools`` (``tool-started``, ``tool-output-delta``, ``tool-finished``, ``tool-error``):
  as ``loopline.stream_parts`` derives LangGraph's ``tools`` mode from the run's items,
  and a call's result mirrored on ``messages`` as a ``tool`` message under the call's
  namespace;
- ``custom``: ``{"payload": <the item>}``.

No I/O. The envelope's ``seq`` is the connection's (``thread_protocol``), and the
``event_id`` names the item's place in the run's logs, so the same item has the same id
on every connection (the SDK drops an id it has seen).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models._compat_bridge import achunks_to_events, message_to_events
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGenerationChunk

from loopline.api.wire import jsonable
from loopline.stream_modes import INTERRUPT, Item
from loopline.stream_parts import Lifecycle

Event = dict[str, Any]

CHANNELS = frozenset(
    {
        "values",
        "updates",
        "checkpoints",
        "messages",
        "tools",
        "custom",
        "lifecycle",
        "input",
        "tasks",
    }
)
"""The channels langgraph-api accepts (``checkpoints`` and ``tasks`` carry nothing here,
as langgraph dev sends nothing on them for a ``create_agent`` run); ``custom:<name>``
too."""

BAD_CHANNELS = (
    "Allowed: values, updates, messages, tools, custom, lifecycle, input, tasks, or any "
    "`custom:<name>`."
)


def unsupported_channels(channels: Iterable[Any]) -> list[str]:
    """The entries of a subscription's ``channels`` that name no channel."""
    return [
        repr(c) if not isinstance(c, str) else c
        for c in channels
        if not isinstance(c, str) or not (c in CHANNELS or c.startswith("custom:"))
    ]


@dataclass(frozen=True)
class Subscription:
    """What one ``stream/events`` connection asked for: its channels, and where: the
    namespaces an event's namespace must start with (none: all), at most ``depth``
    segments deeper. loopline's runs have no subgraphs: an event is at the root ``[]``
    but a tool's result mirrored on ``messages``, under ``tools:<call id>``."""

    channels: frozenset[str]
    namespaces: tuple[tuple[str, ...], ...] | None = None
    depth: int | None = None

    def wants(self, event: Event) -> bool:
        method = str(event["method"])
        channel = "input" if method == "input.requested" else method
        if channel not in self.channels:
            return False
        if self.namespaces is None:
            return True
        at = tuple(event["params"]["namespace"])
        return any(
            at[: len(ns)] == ns and (self.depth is None or len(at) - len(ns) <= self.depth)
            for ns in self.namespaces
        )


@dataclass
class RunEvents:
    """The protocol events of one run, item by item (stateful: a streaming reply's
    converter, the calls going for ``tools``, the interrupts announced)."""

    run_id: str
    graph_name: str
    reply: ReplyEvents | None = None
    asked: set[str] = field(default_factory=set)
    ended: bool = False
    calls: Lifecycle = field(default_factory=lambda: Lifecycle((), {}))

    def started(self) -> list[Event]:
        return [self._lifecycle("running")]

    async def item(self, place: str, item: Item) -> list[Event]:
        """The events of one item, ``place`` naming where in the run it comes from."""
        mode, data = item
        derived = self._derived(place, self.calls.take(mode, data))
        if mode == "messages":  # a node's task starts before its reply streams
            return derived + await self._message(place, data[0])
        out = await self._flush()
        if mode in ("values", "updates"):
            out += self._state(place, mode, jsonable(data))
        elif mode == "custom":
            out.append(envelope(f"{self.run_id}:{place}", mode, {"payload": jsonable(data)}))
        return out + derived

    async def failed(self, error: dict[str, str]) -> list[Event]:
        out = await self._flush()
        out += self._derived("failed", self.calls.failed(RuntimeError(error["message"])))
        return [*out, self._lifecycle("failed", error=error["message"])]

    def _derived(self, place: str, items: list[Item]) -> list[Event]:
        """The ``tools`` events (a call started, its partial output, its end or error)
        loopline's stream-mode layer derives from the run's items, as LangGraph's
        ``tools`` stream mode gives them. Its ``tasks`` items are left out: langgraph
        dev sends nothing on the ``tasks`` channel for a ``create_agent`` run."""
        out = []
        for k, (mode, data) in enumerate(items):
            if mode != "tools":
                continue
            tool_event = jsonable(data)
            out.append(envelope(f"{self.run_id}:{place}:d{k}", mode, tool_event))
            out += self._tool_message(f"{self.run_id}:{place}:d{k}", tool_event)
        return out

    @staticmethod
    def _tool_message(event_id: str, tool_event: dict[str, Any]) -> list[Event]:
        """A call's result also on ``messages``, as langgraph-api mirrors it: a ``tool``
        message under the call's namespace ``tools:<call id>`` (so the root's
        ``messages`` does not see it)."""
        output = tool_event.get("output")
        if tool_event.get("event") != "tool-finished" or not isinstance(output, dict):
            return []
        call_id = str(tool_event.get("tool_call_id"))
        content = output.get("content")
        text = content if isinstance(content, str) else json.dumps(content)
        block = {"type": "text", "text": text}
        start = {
            "event": "message-start",
            "role": "tool",
            "id": output.get("id") or f"tool-{call_id}",
        }
        made = [
            {**start, "tool_call_id": call_id},
            {"event": "content-block-start", "index": 0, "content": {"type": "text", "text": ""}},
            {"event": "content-block-delta", "index": 0, "content": block},
            {"event": "content-block-finish", "index": 0, "content": block},
            {"event": "message-finish", "metadata": {}},
        ]
        namespace = (f"tools:{call_id}",)
        return [
            envelope(f"{event_id}.m{k}", "messages", data, namespace=namespace)
            for k, data in enumerate(made)
        ]

    async def finished(self, status: str) -> list[Event]:
        """The run's end: ``completed`` or ``interrupted`` (once: an interrupt already
        announced it)."""
        out = await self._flush()
        if not self.ended:
            out.append(self._lifecycle(status))
        return out

    # -- the channels -----------------------------------------------------------------

    async def _message(self, place: str, message: BaseMessage) -> list[Event]:
        if isinstance(message, AIMessageChunk):
            changed = self.reply is not None and self.reply.message_id != message.id
            out = await self._flush() if changed else []
            if self.reply is None:
                self.reply = ReplyEvents(str(message.id))
            self.reply.place = place
            made = await self.reply.chunk(message)
            return out + self._numbered(place, "messages", made)
        out = await self._flush()
        if isinstance(message, AIMessage):  # whole (a hook's, a cached reply)
            out += self._numbered(place, "messages", message_to_events(message))
        return out  # a tool's message: the protocol's ``tools`` and state carry it

    async def _flush(self) -> list[Event]:
        """The end of the reply streaming (the next item is not one of its chunks)."""
        if self.reply is None:
            return []
        reply, self.reply = self.reply, None
        return self._numbered(f"{reply.place}.end", "messages", await reply.finish())

    def close(self) -> None:
        """The stream is left: a reply being converted is dropped."""
        if self.reply is not None:
            self.reply.close()

    def _state(self, place: str, mode: str, data: Any) -> list[Event]:
        """A ``values`` or ``updates`` event as langgraph-api makes it: an update's node
        in ``params.node`` and its values as the data; an interrupt is announced on
        ``input`` (an update of ``__interrupt__`` only there); nothing for no state."""
        node: str | None = None
        shown = data
        if mode == "updates" and isinstance(data, dict) and len(data) == 1:
            ((node, shown),) = data.items()
            shown = shown if isinstance(shown, dict) else {"value": shown}
        out = []
        cleaned = protocol_state(shown)
        if node != INTERRUPT and cleaned not in ({}, None):
            out.append(envelope(f"{self.run_id}:{place}", mode, cleaned, node=node))
        fresh = [i for i in _interrupts(data) if str(i.get("id")) not in self.asked]
        for interrupt in fresh:
            interrupt_id = str(interrupt.get("id"))
            self.asked.add(interrupt_id)
            request = {
                "interrupt_id": interrupt_id,
                "payload": interrupt.get("value"),
                "value": interrupt.get("value"),  # what langgraph_sdk reads
            }
            out.append(
                envelope(f"synth:{self.run_id}:input||{interrupt_id}", "input.requested", request)
            )
        if fresh and not self.ended:  # the run stopped for a human: announced at once
            out.append(self._lifecycle("interrupted"))
        return out

    def _numbered(self, place: str, method: str, datas: Iterable[Any]) -> list[Event]:
        return [
            envelope(f"{self.run_id}:{place}" + (f".{k}" if k else ""), method, jsonable(data))
            for k, data in enumerate(datas)
        ]

    def _lifecycle(self, status: str, error: str | None = None) -> Event:
        self.ended = self.ended or status != "running"
        data: dict[str, Any] = {"event": status, "graph_name": self.graph_name}
        if error is not None:
            data["error"] = error
        return envelope(f"synth:{self.run_id}:lc||{status}", "lifecycle", data)


class ReplyEvents:
    """A streaming reply's events as ``langchain_core``'s ``achunks_to_events`` makes them
    from its chunks, chunk by chunk: the converter pulls the chunks from an async
    iterator, which gives it each chunk as it comes and tells when it asks for the next
    one (then it has made every event of the chunk before)."""

    def __init__(self, message_id: str) -> None:
        self.message_id = message_id
        self.place = ""
        self._chunks: asyncio.Queue[AIMessageChunk | None] = asyncio.Queue()
        self._made: list[Any] = []
        self._asked = 0
        self._asking = asyncio.Event()
        self._converting = asyncio.ensure_future(self._convert())

    async def chunk(self, chunk: AIMessageChunk) -> list[Any]:
        return await self._give(chunk)

    async def finish(self) -> list[Any]:
        """The events that close the reply (its blocks' and its own ``*-finish``)."""
        return await self._give(None)

    def close(self) -> None:
        """Stop converting (the stream is left before the reply ended)."""
        self._converting.cancel()

    async def _give(self, chunk: AIMessageChunk | None) -> list[Any]:
        asked = self._asked
        await self._chunks.put(chunk)
        while self._asked <= asked and not self._converting.done():
            self._asking.clear()
            await self._asking.wait()
        made, self._made = self._made, []
        return made

    async def _source(self) -> AsyncIterator[ChatGenerationChunk]:
        while True:
            self._asked += 1
            self._asking.set()
            chunk = await self._chunks.get()
            if chunk is None:
                return
            yield ChatGenerationChunk(message=chunk)

    async def _convert(self) -> None:
        try:
            async for made in achunks_to_events(self._source(), message_id=self.message_id):
                self._made.append(made)
        finally:
            self._asking.set()


def envelope(
    event_id: str,
    method: str,
    data: Any,
    *,
    namespace: tuple[str, ...] = (),
    node: str | None = None,
) -> Event:
    params: dict[str, Any] = {
        "namespace": list(namespace),
        "timestamp": int(time.time() * 1000),
        "data": data,
    }
    if node is not None:
        params["node"] = node
    return {"type": "event", "event_id": event_id, "method": method, "params": params}


def _interrupts(data: Any) -> list[dict[str, Any]]:
    """The interrupts a ``values`` item or an ``__interrupt__`` update carries."""
    if isinstance(data, dict) and isinstance(data.get(INTERRUPT), list):
        return [i for i in data[INTERRUPT] if isinstance(i, dict)]
    return []


# -- the protocol's shape of state ----------------------------------------------------------

MESSAGE_TYPES = {"ai", "human", "system", "tool", "function", "remove"}


def protocol_state(value: Any) -> Any:
    """State as the protocol carries it (langgraph-api's state normalizer): messages in
    their protocol shape, ``__interrupt__`` left out (an ``input.requested`` says it)."""
    if isinstance(value, list):
        return [protocol_state(v) for v in value]
    if not isinstance(value, dict):
        return value
    if value.get("type") in MESSAGE_TYPES and "content" in value:
        return protocol_message(value)
    return {k: protocol_state(v) for k, v in value.items() if k != INTERRUPT}


def protocol_message(value: dict[str, Any]) -> dict[str, Any]:
    """A message with the fields the protocol keeps: type, content, id, name, a
    response_metadata that says something, a tool message's call id and status, an AI
    message's tool calls as ``tool_call`` blocks."""
    message: dict[str, Any] = {"type": value["type"], "content": value["content"]}
    for key in ("id", "name"):
        if isinstance(value.get(key), str):
            message[key] = value[key]
    if value.get("response_metadata"):
        message["response_metadata"] = value["response_metadata"]
    if value["type"] == "tool":
        message["tool_call_id"] = value.get("tool_call_id")
        if value.get("status") in ("success", "error"):
            message["status"] = value["status"]
    calls = value.get("tool_calls") or []
    if value["type"] == "ai" and calls:
        message["tool_calls"] = [
            {"type": "tool_call", "name": c.get("name"), "args": c.get("args"), "id": c.get("id")}
            for c in calls
        ]
    return message

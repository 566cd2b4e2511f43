"""One run's items as the events of LangGraph's thread-centric streaming protocol (the
one ``langgraph_sdk``'s ``client.threads.stream()`` speaks), as langgraph-api 0.16 sends
them on ``POST /threads/{id}/stream/events``: each event an envelope
``{"type": "event", "event_id", "seq", "method", "params": {"namespace", "timestamp",
"data"}}``, its ``method`` one of the channels a client subscribes to.

- ``lifecycle``: ``{"event": "running", "graph_name"}`` when the run starts, then
  ``completed``, ``interrupted`` (a human is asked, or the run was stopped) or ``failed``
  (with the run's error message);
- ``values`` and ``updates`` (``{"node", "values"}``): the state, its messages in the
  protocol's shape, without ``__interrupt__``; an interrupt is an ``input.requested``
  event (channel ``input``) with its id;
- ``messages``: a model's reply as LangChain's content-block events (``message-start``,
  ``content-block-*``, ``message-finish``), made by ``langchain_core``'s own converters
  from the reply's chunks. A reply's events go out once the reply is whole (the
  converter pulls the chunks from an iterator: it cannot wait for the next one);
- ``custom`` and ``tools`` (a tool's partial output): the items as they are.

Pure: no I/O. The envelope's ``seq`` is the connection's (``thread_protocol``), and the
``event_id`` names the item's place in the run's logs, so the same item has the same id
on every connection (the SDK drops an id it has seen).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models._compat_bridge import chunks_to_events, message_to_events
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGenerationChunk

from loopline.api.wire import jsonable
from loopline.stream_modes import INTERRUPT, Item

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
"""The channels langgraph-api accepts (``checkpoints`` and ``tasks`` carry nothing here:
loopline's runs have no such items on this protocol yet); ``custom:<name>`` too."""

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
    """What one ``stream/events`` connection asked for. loopline's runs have no
    subgraphs: every event is at the root namespace ``[]``, which a ``namespaces`` filter
    lets through only when it lists the root."""

    channels: frozenset[str]
    namespaces: tuple[tuple[str, ...], ...] | None = None

    def wants(self, event: Event) -> bool:
        method = str(event["method"])
        channel = "input" if method == "input.requested" else method
        if channel not in self.channels:
            return False
        return self.namespaces is None or () in self.namespaces


@dataclass
class RunEvents:
    """The protocol events of one run, item by item (stateful: a reply's chunks are kept
    until it is whole, and an interrupt is announced once)."""

    run_id: str
    graph_name: str
    chunks: list[AIMessageChunk] = field(default_factory=list)
    chunks_at: str = ""
    asked: set[str] = field(default_factory=set)
    ended: bool = False

    def started(self) -> list[Event]:
        return [self._lifecycle("running")]

    def item(self, place: str, item: Item) -> list[Event]:
        """The events of one item, ``place`` naming where in the run it comes from."""
        mode, data = item
        if mode == "messages":
            return self._message(place, data[0])
        out = self._flush()
        if mode in ("values", "updates"):
            out += self._state(place, mode, jsonable(data))
        elif mode in ("custom", "tools"):
            out.append(envelope(f"{self.run_id}:{place}", mode, jsonable(data)))
        return out

    def failed(self, error: dict[str, str]) -> list[Event]:
        return [*self._flush(), self._lifecycle("failed", error=error["message"])]

    def finished(self, status: str) -> list[Event]:
        """The run's end: ``completed`` or ``interrupted`` (once: an interrupt already
        announced it)."""
        out = self._flush()
        if not self.ended:
            out.append(self._lifecycle(status))
        return out

    # -- the channels -----------------------------------------------------------------

    def _message(self, place: str, message: BaseMessage) -> list[Event]:
        if isinstance(message, AIMessageChunk):
            out = self._flush() if self.chunks and self.chunks[0].id != message.id else []
            if not self.chunks:
                self.chunks_at = place
            self.chunks.append(message)
            return out
        out = self._flush()
        if isinstance(message, AIMessage):  # whole (a hook's, a cached reply)
            out += self._numbered(place, "messages", message_to_events(message))
        return out  # a tool's message: the protocol's ``tools`` and state carry it

    def _flush(self) -> list[Event]:
        if not self.chunks:
            return []
        chunks, self.chunks = self.chunks, []
        generated = (ChatGenerationChunk(message=c) for c in chunks)
        made = chunks_to_events(generated, message_id=str(chunks[0].id))
        return self._numbered(self.chunks_at, "messages", made)

    def _state(self, place: str, mode: str, data: Any) -> list[Event]:
        interrupts = _interrupts(data)
        if mode == "updates" and isinstance(data, dict) and len(data) == 1:
            ((node, values),) = data.items()
            shown: Any = {
                "node": node,
                "values": values if isinstance(values, dict) else {"value": values},
            }
        else:
            shown = {"values": data} if mode == "updates" else data
        out = [envelope(f"{self.run_id}:{place}", mode, protocol_state(shown))]
        fresh = [i for i in interrupts if str(i.get("id")) not in self.asked]
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


def envelope(event_id: str, method: str, data: Any) -> Event:
    return {
        "type": "event",
        "event_id": event_id,
        "method": method,
        "params": {"namespace": [], "timestamp": int(time.time() * 1000), "data": data},
    }


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

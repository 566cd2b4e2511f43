"""JSON as LangGraph's server writes it: messages as LangChain's ``model_dump()``
(``type``, ``content``, ``id``, ``tool_calls``, ...), times in ISO 8601 with the zone,
interrupts as ``{"value", "id", "response_schema"}`` (in a thread's state without a null
schema); and the run input a client sends, as loopline messages.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import BaseMessage, convert_to_messages

from contracts.messages import Message, from_langchain, to_langchain


class BadRequest(ValueError):
    """The request cannot be served as sent (422, as LangGraph's server answers)."""


def iso(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).isoformat()


def _default(value: Any) -> Any:
    if isinstance(value, BaseMessage):
        return value.model_dump()
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    if hasattr(value, "value") and hasattr(value, "id"):  # langgraph.types.Interrupt
        # in streams and run outputs LangGraph's server writes every field
        schema = getattr(value, "response_schema", None)
        return {"value": value.value, "id": value.id, "response_schema": schema}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # a Command
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def dumps(value: Any) -> str:
    return json.dumps(value, default=_default, separators=(",", ":"))


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data (messages dumped, tuples as lists)."""
    return json.loads(dumps(value))


def message_json(message: Message) -> dict[str, Any]:
    return dict(to_langchain(message).model_dump())


def interrupt_json(interrupt: Any) -> dict[str, Any]:
    """An interrupt in a thread's state: its value and id, and its ``response_schema``
    when it has one (LangGraph's server leaves a null one out there)."""
    out = {"value": interrupt.value, "id": str(interrupt.id)}
    if interrupt.response_schema is not None:
        out["response_schema"] = interrupt.response_schema
    return out


def input_messages(payload: Any) -> list[Message]:
    """A run's ``input`` (``{"messages": [...]}``, each message a LangChain message dict
    or ``{"role", "content"}``, or one string) as loopline messages."""
    if not isinstance(payload, Mapping) or "messages" not in payload:
        raise BadRequest('input must be an object with "messages", like {"messages": [...]}')
    raw = payload["messages"]
    if isinstance(raw, str):
        raw = [{"role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise BadRequest('input "messages" must be a non-empty list of messages')
    try:
        return [from_langchain(m) for m in convert_to_messages(raw)]
    except (ValueError, TypeError, NotImplementedError) as exc:
        raise BadRequest(f"input messages: {exc}") from exc

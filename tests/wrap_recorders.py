"""Middleware that record what their ``wrap_model_call`` / ``wrap_tool_call`` requests
carry (``request.messages``, ``request.state["messages"]``), for tests/test_wrap_state.py.
Importable by path from the service processes; each record is one JSON entry in a Redis
list, so what LangChain's agent and loopline's services saw can be compared."""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import redis
from langchain.agents.middleware import AgentMiddleware

_client: redis.Redis | None = None


def _redis() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(os.environ.get("RECORD_REDIS_URL", "redis://127.0.0.1:6379"))
    return _client


def summary(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """What a message means to the model, without what differs by run or by transport
    (message ids, token usage, provider metadata): type, content, tool calls, the call a
    result answers, and the context-editing marks LangChain puts on what it cleared."""
    out: list[dict[str, Any]] = []
    for m in messages:
        entry: dict[str, Any] = {"type": m.type, "content": m.content}
        if m.type == "ai":
            entry["tool_calls"] = [[c["id"], c["name"], c["args"]] for c in m.tool_calls]
        if m.type == "tool":
            entry["tool_call_id"] = m.tool_call_id
            entry["name"] = m.name
        marks = (getattr(m, "response_metadata", None) or {}).get("context_editing")
        if marks:
            entry["context_editing"] = marks
        out.append(entry)
    return out


class ToolStateRecorder(AgentMiddleware):  # type: ignore[type-arg]
    """Records, per tool call, the agent state's messages its ``wrap_tool_call`` sees."""

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        messages = request.state["messages"]
        record = {
            "call": request.tool_call["id"],
            "count": len(messages),
            "messages": summary(messages),
        }
        _redis().rpush(self.key, json.dumps(record, sort_keys=True))
        return await handler(request)


class ModelRequestRecorder(AgentMiddleware):  # type: ignore[type-arg]
    """Records, per model call, the messages its ``wrap_model_call`` is handed, and the
    agent state's. ``label`` tells apart several in one agent."""

    def __init__(self, label: str, key: str) -> None:
        super().__init__()
        self.label = label
        self.key = key

    @property
    def name(self) -> str:  # LangChain requires distinct names per middleware
        return f"ModelRequestRecorder_{self.label}"

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        record = {
            "label": self.label,
            "messages": summary(request.messages),
            "state_messages": summary(request.state["messages"]),
        }
        _redis().rpush(self.key, json.dumps(record, sort_keys=True))
        return await handler(request)


class Padder(AgentMiddleware):  # type: ignore[type-arg]
    """Appends a long user message to what the model is handed (not to the state): placed
    before ``ContextEditingMiddleware``, it changes what the editor counts."""

    def __init__(self, chars: int) -> None:
        super().__init__()
        self.chars = chars

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        from langchain_core.messages import HumanMessage

        padding = HumanMessage(content="p" * self.chars)
        return await handler(request.override(messages=[*request.messages, padding]))

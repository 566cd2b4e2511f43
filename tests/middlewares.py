"""User middleware for the tests, importable by path from the service processes. Each
records its hook calls in a Redis list, so the order can be read across processes."""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from typing import Any, NotRequired

import redis
from langchain.agents.middleware import AgentMiddleware, AgentState, dynamic_prompt, hook_config
from langchain_core.messages import AIMessage

_client: redis.Redis | None = None


def _redis() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(os.environ.get("RECORD_REDIS_URL", "redis://127.0.0.1:6379"))
    return _client


class SeenState(AgentState):  # type: ignore[type-arg]
    """Extra state fields the recorders keep (declared, as LangChain requires)."""

    seen_A: NotRequired[int]
    seen_B: NotRequired[int]
    seen_C: NotRequired[int]


class Recorder(AgentMiddleware):  # type: ignore[type-arg]
    """Records every hook it sees as ``NAME.hook``; keeps a counter in the agent state."""

    state_schema = SeenState

    def __init__(self, name: str, key: str) -> None:
        super().__init__()
        self.label = name
        self.key = key

    @property
    def name(self) -> str:
        return self.label

    def _log(self, what: str) -> None:
        _redis().rpush(self.key, f"{self.label}.{what}")

    def before_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        self._log("before_agent")
        return None

    def before_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        self._log(f"before_model:{state.get('seen_' + self.label, 0)}")
        return None

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        self._log("wrap_model_call:in")
        response = await handler(request)
        self._log("wrap_model_call:out")
        return response

    def after_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        self._log("after_model")
        return {"seen_" + self.label: state.get("seen_" + self.label, 0) + 1}

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        self._log("wrap_tool_call:in")
        result = await handler(request)
        self._log("wrap_tool_call:out")
        return result

    def after_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        self._log("after_agent")
        return None


class StopAfter(AgentMiddleware):  # type: ignore[type-arg]
    """Ends the run from before_model once the model was called ``calls`` times."""

    def __init__(self, calls: int) -> None:
        super().__init__()
        self.calls = calls

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        made = sum(1 for m in state["messages"] if isinstance(m, AIMessage))
        if made >= self.calls:
            return {"jump_to": "end", "messages": [AIMessage(content=f"stopped after {made}")]}
        return None


def _shout(text: str) -> str:
    """Repeat the text in capitals."""
    return text.upper()


class Shouter(AgentMiddleware):
    """A middleware that adds a tool, as LangChain middleware may."""

    def __init__(self) -> None:
        super().__init__()
        from langchain_core.tools import tool

        self.tools = [tool("shout")(_shout)]


@dynamic_prompt
def terse(request: Any) -> str:
    """A dynamic system prompt (LangChain's decorator)."""
    return "Be terse."


class ContextRecorder(AgentMiddleware):  # type: ignore[type-arg]
    """Records the run's context (``runtime.context``) its ``before_model`` hook sees."""

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key

    def before_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        _redis().rpush(self.key, json.dumps(runtime.context))
        return None

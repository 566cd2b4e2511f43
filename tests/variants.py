"""Middleware that show which variant of each hook ran (sync or async) in what the model
is sent, so the same agent through LangChain and through loopline can be compared by
its requests alone. Importable by path from the service processes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage

MARKER_ID = "variant-marker"


def _marked(request: ModelRequest, variant: str) -> ModelRequest:
    text = request.system_prompt or ""
    return request.override(system_message=SystemMessage(f"{text} wrap_model_call:{variant}"))


def _tool_marked(result: Any, variant: str) -> Any:
    if isinstance(result, ToolMessage):
        return result.model_copy(update={"content": f"{result.content} (wrap_tool_call:{variant})"})
    return result


def _before(variant: str) -> dict[str, Any]:
    """One message, replaced (same id) at every step: the last variant that ran."""
    return {"messages": [HumanMessage(f"before_model:{variant}", id=MARKER_ID)]}


class BothWays(AgentMiddleware):  # type: ignore[type-arg]
    """Every hook in both variants; each says which one ran."""

    def before_model(self, state: Any, runtime: Any) -> dict[str, Any]:
        return _before("sync")

    async def abefore_model(self, state: Any, runtime: Any) -> dict[str, Any]:
        return _before("async")

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        return handler(_marked(request, "sync"))

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelResponse:
        return await handler(_marked(request, "async"))

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return _tool_marked(handler(request), "sync")

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        return _tool_marked(await handler(request), "async")


class AsyncOnlyBefore(AgentMiddleware):  # type: ignore[type-arg]
    async def abefore_model(self, state: Any, runtime: Any) -> dict[str, Any]:
        return _before("async")


class SyncOnlyWrapModel(AgentMiddleware):  # type: ignore[type-arg]
    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        return handler(_marked(request, "sync"))


class AsyncOnlyWrapTool(AgentMiddleware):  # type: ignore[type-arg]
    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        return _tool_marked(await handler(request), "async")


class SyncOnlyBefore(AgentMiddleware):  # type: ignore[type-arg]
    """Sync only: an async run runs it too (LangGraph runs it in a thread)."""

    def before_model(self, state: Any, runtime: Any) -> dict[str, Any]:
        return _before("sync")

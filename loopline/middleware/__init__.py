"""Middleware for loopline agents, with LangChain v1's names, parameters and defaults.

Each class converts to a ``MiddlewareSpec`` (its name and parameters) that travels with the
agent spec, so the consumer that owns the middleware's stage can rebuild it. Instances of
LangChain's own classes passed to ``create_agent`` are converted to these.
"""

from __future__ import annotations

import sys
from typing import Any

from langchain.agents.middleware import (
    AgentMiddleware,
    AgentState,
    ModelRequest,
    ModelResponse,
    after_agent,
    after_model,
    before_agent,
    before_model,
    dynamic_prompt,
    hook_config,
    wrap_model_call,
    wrap_tool_call,
)

from contracts.agent import MiddlewareSpec
from loopline.middleware.builtins import (
    BY_NAME,
    HumanInTheLoopMiddleware,
    LLMToolSelectorMiddleware,
    ModelCallLimitMiddleware,
    ModelFallbackMiddleware,
    ModelRetryMiddleware,
    PIIMiddleware,
    SummarizationMiddleware,
    ToolCallLimitMiddleware,
    ToolRetryMiddleware,
    build_builtin,
    params_of,
)
from loopline.middleware.context_editing import ClearToolUsesEdit, ContextEditingMiddleware
from loopline.middleware.ratelimit import RateLimitMiddleware
from loopline.middleware.todo import TodoListMiddleware

BUILTIN: dict[str, Any] = {
    "TodoListMiddleware": TodoListMiddleware,
    "ContextEditingMiddleware": ContextEditingMiddleware,
    "RateLimitMiddleware": RateLimitMiddleware,
    **BY_NAME,
}


def builtin_class(name: str) -> Any:
    """A factory for a built-in by name: ``factory(**params)`` builds it."""
    if name in BY_NAME or name == "RateLimitMiddleware":
        return _Factory(name)
    if name in BUILTIN:
        return BUILTIN[name]
    raise ValueError(f"unknown middleware type {name!r}; supported: {', '.join(sorted(BUILTIN))}")


class _Factory:
    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, **params: Any) -> Any:
        return build_builtin(self.name, params)


def to_spec(middleware: Any, *, embedded: bool = False) -> MiddlewareSpec:
    """A spec for a loopline middleware, a LangChain built-in, a user middleware, or a
    spec/dict as given. ``embedded``: in-process instances may stay in-process."""
    if isinstance(middleware, MiddlewareSpec):
        return middleware
    if isinstance(middleware, dict):
        return MiddlewareSpec.model_validate(middleware)
    if hasattr(middleware, "to_spec"):
        spec: MiddlewareSpec = middleware.to_spec()
        return spec
    name = type(middleware).__name__
    if name == "TodoListMiddleware":
        return TodoListMiddleware(
            system_prompt=middleware.system_prompt, tool_description=middleware.tool_description
        ).to_spec()
    if name == "ContextEditingMiddleware":
        if getattr(middleware, "token_counter", None) is not None:
            raise ValueError("a custom token_counter cannot travel to the context service")
        return ContextEditingMiddleware(
            edits=middleware.edits, token_count_method=middleware.token_count_method
        ).to_spec()
    if name in BY_NAME and type(middleware).__module__.startswith("langchain.agents"):
        rebuilt = build_builtin(name, params_of(middleware))
        converted: MiddlewareSpec = rebuilt.to_spec()
        return converted
    if not isinstance(middleware, AgentMiddleware):
        raise ValueError(f"{middleware!r} is not a middleware (subclass AgentMiddleware)")
    if embedded:
        from services.hooks import register_local

        return MiddlewareSpec(type=register_local(middleware))
    path = _import_path(middleware)
    if path:
        return MiddlewareSpec(type=path)
    cls = type(middleware)
    return MiddlewareSpec(type=f"{cls.__module__}:{cls.__qualname__}", params=params_of(middleware))


def _import_path(instance: Any) -> str | None:
    """``module:name`` of a module-level middleware instance (e.g. made by a decorator)."""
    for module_name in {type(instance).__module__, getattr(instance, "__module__", "")}:
        module = sys.modules.get(module_name or "")
        for attr, value in vars(module).items() if module else ():
            if value is instance:
                return f"{module_name}:{attr}"
    return None


def from_spec(spec: MiddlewareSpec) -> Any:
    """Build (and so validate) the middleware a spec names."""
    if spec.type in ("TodoListMiddleware", "ContextEditingMiddleware"):
        return BUILTIN[spec.type].from_spec(spec)
    if ":" not in spec.type and spec.type not in BUILTIN:
        raise ValueError(
            f"unknown middleware type {spec.type!r}; supported: {', '.join(sorted(BUILTIN))} "
            "or an import path package.module:Name"
        )
    from services.hooks import build

    return build(spec)


__all__ = [
    "AgentMiddleware",
    "AgentState",
    "ClearToolUsesEdit",
    "ContextEditingMiddleware",
    "HumanInTheLoopMiddleware",
    "LLMToolSelectorMiddleware",
    "ModelCallLimitMiddleware",
    "ModelFallbackMiddleware",
    "ModelRequest",
    "ModelResponse",
    "ModelRetryMiddleware",
    "PIIMiddleware",
    "RateLimitMiddleware",
    "SummarizationMiddleware",
    "TodoListMiddleware",
    "ToolCallLimitMiddleware",
    "ToolRetryMiddleware",
    "after_agent",
    "after_model",
    "before_agent",
    "before_model",
    "dynamic_prompt",
    "from_spec",
    "hook_config",
    "to_spec",
    "wrap_model_call",
    "wrap_tool_call",
]

"""Middleware for loopline agents, with LangChain v1's names, parameters and defaults.

Each class converts to a ``MiddlewareSpec`` (its name and parameters) that travels with the
agent spec, so the consumer that owns the middleware's stage can rebuild it. Instances of
LangChain's own classes passed to ``create_agent`` are converted to these.
"""

from __future__ import annotations

from typing import Any

from contracts.agent import MiddlewareSpec
from loopline.middleware.context_editing import ClearToolUsesEdit, ContextEditingMiddleware
from loopline.middleware.todo import TodoListMiddleware

BUILTIN: dict[str, Any] = {
    "TodoListMiddleware": TodoListMiddleware,
    "ContextEditingMiddleware": ContextEditingMiddleware,
}


def to_spec(middleware: Any) -> MiddlewareSpec:
    """A spec for a loopline middleware, a LangChain built-in, or a spec/dict as given."""
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
    raise ValueError(f"unsupported middleware {name}; supported: {', '.join(sorted(BUILTIN))}")


def from_spec(spec: MiddlewareSpec) -> Any:
    cls = BUILTIN.get(spec.type)
    if cls is None:
        raise ValueError(
            f"unknown middleware type {spec.type!r}; supported: {', '.join(sorted(BUILTIN))}"
        )
    return cls.from_spec(spec)


__all__ = [
    "ClearToolUsesEdit",
    "ContextEditingMiddleware",
    "TodoListMiddleware",
    "from_spec",
    "to_spec",
]

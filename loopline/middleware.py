"""Middleware for loopline agents, with LangChain v1's names, parameters and defaults.

Each class converts to a ``MiddlewareSpec`` (its name and parameters) that travels with the
agent spec, so the consumer that owns the middleware's stage can rebuild it. Instances of
LangChain's own classes passed to ``create_agent`` are converted to these. The classes live
in ``services.middleware`` (the services run them) and the conversions in
``services.spec.middleware``; this module is their public face.
"""

from __future__ import annotations

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

from services.middleware.builtins import (
    HumanInTheLoopMiddleware,
    LLMToolSelectorMiddleware,
    ModelCallLimitMiddleware,
    ModelFallbackMiddleware,
    ModelRetryMiddleware,
    PIIMiddleware,
    SummarizationMiddleware,
    ToolCallLimitMiddleware,
    ToolRetryMiddleware,
)
from services.middleware.context_editing import ClearToolUsesEdit, ContextEditingMiddleware
from services.middleware.ratelimit import RateLimitMiddleware
from services.middleware.todo import TodoListMiddleware
from services.spec.middleware import from_spec, to_spec

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

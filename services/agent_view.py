"""What the model sees of an agent besides the transcript: the system message and the tool
schemas, composed as LangChain's ``create_agent`` composes them.

Shared by the model consumer (the request it sends) and the context consumer (which counts
the system message with ``token_count_method="model"``, as LangChain does at the position
of ``ContextEditingMiddleware`` in the middleware list).
"""

from __future__ import annotations

from typing import Any

from contracts.agent import AgentSpec
from contracts.messages import SystemMessage
from services.middleware.todo import TodoListMiddleware
from services.spec import toolbox
from services.spec.middleware import NATIVE, build


def system_message(spec: AgentSpec, *, before: int | None = None) -> SystemMessage | None:
    """The system message as the ``wrap_model_call`` chain has shaped it by middleware
    number ``before`` (all middleware when None): the outer ones run first."""
    message = spec.system_message or (
        None if spec.system_prompt is None else SystemMessage(content=spec.system_prompt)
    )
    chain = spec.middleware if before is None else spec.middleware[:before]
    for mw in chain:
        if mw.type == "TodoListMiddleware":
            prompt = TodoListMiddleware.from_spec(mw).system_prompt
            if message is None:
                message = SystemMessage(content=[{"type": "text", "text": prompt}])
            else:
                blocks = _content_blocks(message)
                message = SystemMessage(
                    content=[*blocks, {"type": "text", "text": f"\n\n{prompt}"}]
                )
    return message


def _content_blocks(message: SystemMessage) -> list[str | dict[str, Any]]:
    if isinstance(message.content, str):
        return [{"type": "text", "text": message.content}] if message.content else []
    return [b if isinstance(b, dict) else {"type": "text", "text": b} for b in message.content]


def middleware_tools(spec: AgentSpec) -> list[Any]:
    """Tools that users' middleware add (their ``tools`` attribute), in middleware order."""
    found: list[Any] = []
    for mw in spec.middleware:
        if mw.type not in NATIVE:
            found.extend(getattr(build(mw), "tools", None) or [])
    return found


def tool_schemas(spec: AgentSpec) -> list[dict[str, Any]]:
    """Middleware tools first (in middleware order), then the agent's: LangChain's order."""
    schemas: list[dict[str, Any]] = []
    for mw in spec.middleware:
        if mw.type == "TodoListMiddleware":
            schemas.append(TodoListMiddleware.from_spec(mw).tool_schema())
        elif mw.type not in NATIVE:
            for made in getattr(build(mw), "tools", None) or []:
                schemas.append(toolbox.tool_schema(toolbox.as_tool(made)))
    if spec.tool_schemas is not None:
        schemas.extend(spec.tool_schemas)
    else:
        schemas.extend(toolbox.tool_schema(toolbox.resolve(ref)) for ref in spec.tools)
    return schemas


def has_todos(spec: AgentSpec) -> bool:
    return any(mw.type == "TodoListMiddleware" for mw in spec.middleware)

"""Validating a ``write_todos`` call and the answers LangChain gives."""

from __future__ import annotations

from collections import Counter
from typing import Any

from pydantic import TypeAdapter, ValidationError

from contracts.messages import ToolCall, ToolMessage
from contracts.todos import TODO_STATUSES, Todo
from services.tool_errors import TOOL_INVOCATION_ERROR_TEMPLATE

_TODOS = TypeAdapter(list[Todo])


def parse_todos(call: ToolCall) -> list[Todo] | ToolMessage:
    """The new list, or the error tool message that leaves the stored list unchanged."""
    try:
        if set(call.args) - {"todos"}:
            raise ValueError(f"unexpected arguments {sorted(set(call.args) - {'todos'})}")
        if "todos" not in call.args:
            raise ValueError("todos: Field required")
        return _TODOS.validate_python(call.args["todos"])
    except (ValidationError, ValueError) as exc:
        detail = (
            "\n".join(
                f"todos.{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors()
            )
            if isinstance(exc, ValidationError)
            else str(exc)
        )
        return ToolMessage(
            content=TOOL_INVOCATION_ERROR_TEMPLATE.format(
                tool_name=call.name, tool_kwargs=call.args, error=detail
            ),
            name=call.name,
            tool_call_id=call.id,
            status="error",
        )


def as_dicts(todos: list[Todo]) -> list[dict[str, Any]]:
    return [{"content": t.content, "status": t.status} for t in todos]


def updated_message(call: ToolCall, todos: list[Todo]) -> ToolMessage:
    """LangChain's answer, byte for byte: the list as Python prints it (named after the
    tool, as LangChain's tool node names it)."""
    return ToolMessage(
        content=f"Updated todo list to {as_dicts(todos)}", name=call.name, tool_call_id=call.id
    )


def status_counts(todos: list[Todo]) -> dict[str, int]:
    counted = Counter(t.status for t in todos)
    return {status: counted.get(status, 0) for status in TODO_STATUSES}

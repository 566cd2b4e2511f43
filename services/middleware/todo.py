"""LangChain's ``TodoListMiddleware``, which the services also run natively.

The class is LangChain's own (its ``write_todos`` tool, ``PlanningState``, system prompt,
``wrap_model_call`` and ``after_model``), so in-process it behaves exactly as LangChain's,
and the texts the model sees are imported from LangChain, never copied. What loopline
adds is the spec: in a running agent the todos consumer validates and stores each list,
the loop rejects parallel calls, the model consumer appends the prompt.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from langchain.agents.middleware.todo import (
    WRITE_TODOS_SYSTEM_PROMPT,
    WRITE_TODOS_TOOL_DESCRIPTION,
    PlanningState,
    Todo,
    WriteTodosInput,
)
from langchain.agents.middleware.todo import TodoListMiddleware as LcTodoListMiddleware
from langchain_core.messages import AIMessage

from contracts.agent import MiddlewareSpec

__all__ = [
    "WRITE_TODOS_SYSTEM_PROMPT",
    "WRITE_TODOS_TOOL_DESCRIPTION",
    "PlanningState",
    "Todo",
    "TodoListMiddleware",
    "WriteTodosInput",
    "parallel_write_todos_error",
    "write_todos_schema",
]


class TodoListMiddleware(LcTodoListMiddleware[Any, Any]):
    """Gives the agent a todo list: the ``write_todos`` tool, its prompt, its state."""

    spec_type = "TodoListMiddleware"

    def to_spec(self) -> MiddlewareSpec:
        params: dict[str, Any] = {}
        if self.system_prompt != WRITE_TODOS_SYSTEM_PROMPT:
            params["system_prompt"] = self.system_prompt
        if self.tool_description != WRITE_TODOS_TOOL_DESCRIPTION:
            params["tool_description"] = self.tool_description
        return MiddlewareSpec(type=self.spec_type, params=params)

    @classmethod
    def from_spec(cls, spec: MiddlewareSpec) -> TodoListMiddleware:
        return cls(**spec.params)

    def tool_schema(self) -> dict[str, Any]:
        return write_todos_schema(self.tool_description)


@cache
def write_todos_schema(description: str) -> dict[str, Any]:
    """The OpenAI tool schema LangChain sends for ``write_todos``: its own tool's."""
    from langchain_core.utils.function_calling import convert_to_openai_tool

    return convert_to_openai_tool(LcTodoListMiddleware(tool_description=description).tools[0])


@cache
def parallel_write_todos_error() -> str:
    """The answer LangChain's ``after_model`` gives each of several ``write_todos`` calls
    in one turn. LangChain writes the text inline there (no constant to import), so it is
    read back from LangChain's own hook, run on such a turn."""
    calls = [{"id": f"call_{i}", "name": "write_todos", "args": {"todos": []}} for i in (1, 2)]
    state: Any = {"messages": [AIMessage(content="", tool_calls=calls)]}
    update = LcTodoListMiddleware().after_model(state, None)  # type: ignore[arg-type]
    assert update is not None, "LangChain's TodoListMiddleware no longer refuses parallel calls"
    return str(update["messages"][0].content)

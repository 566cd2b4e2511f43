"""LangChain's (langgraph ``ToolNode``) error texts for tool calls, imported from it so the
model reads the same errors through loopline: shared by the tools service and the todos
service, which answers an invalid ``write_todos`` call as ToolNode answers invalid
arguments."""

from langgraph.prebuilt.tool_node import (
    INVALID_TOOL_NAME_ERROR_TEMPLATE,
    TOOL_INVOCATION_ERROR_TEMPLATE,
)

__all__ = ["INVALID_TOOL_NAME_ERROR_TEMPLATE", "TOOL_INVOCATION_ERROR_TEMPLATE"]

"""LangChain's (langgraph ``ToolNode``) error texts for tool calls, so the model reads the
same errors through loopline: shared by the tools service and the todos service, which
answers an invalid ``write_todos`` call as ToolNode answers invalid arguments."""

INVALID_TOOL_NAME_ERROR_TEMPLATE = (
    "Error: {requested_tool} is not a valid tool, try one of [{available_tools}]."
)
TOOL_INVOCATION_ERROR_TEMPLATE = (
    "Error invoking tool '{tool_name}' with kwargs {tool_kwargs} with error:\n"
    " {error}\n"
    " Please fix the error and try again."
)

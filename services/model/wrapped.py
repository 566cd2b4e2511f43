"""The model call inside the ``wrap_model_call`` chain, for agents whose middleware wrap
it (retry, fallback, tool selection, dynamic prompts, users' own). The chain is the
middleware list in order, the todo middleware at its place: LangChain's composition."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage as LcAIMessage
from langchain_core.messages import SystemMessage as LcSystemMessage

from contracts.agent import AgentSpec
from contracts.messages import AIMessage, Message, from_langchain, to_langchain
from services.agent_view import tool_schemas
from services.hooks import HookSet, call_wrapped, lg_runtime
from services.model.chat import build_chat_model


def chain_of(spec: AgentSpec, hooks: HookSet) -> list[Any]:
    from langchain.agents.middleware import TodoListMiddleware as LcTodoListMiddleware

    from loopline.middleware.todo import TodoListMiddleware

    wrappers = dict(hooks.with_hook("wrap_model_call"))
    chain: list[Any] = []
    for index, mw in enumerate(spec.middleware):
        if mw.type == "TodoListMiddleware":
            ours = TodoListMiddleware.from_spec(mw)
            chain.append(
                LcTodoListMiddleware(
                    system_prompt=ours.system_prompt, tool_description=ours.tool_description
                )
            )
        elif index in wrappers:
            chain.append(wrappers[index])
    return chain


def schema_tool(schema: dict[str, Any]) -> Any:
    """A tool object standing for a schema: middleware such as LLMToolSelector look at
    ``BaseTool`` instances (they pass over plain dicts, as provider tools), and binding it
    gives back exactly the schema (checked). The tools consumer runs the real tool."""
    from langchain_core.tools import StructuredTool

    function = schema["function"]

    def elsewhere(**_: Any) -> Any:
        raise RuntimeError("tools run in the tools consumer")

    return StructuredTool(
        name=function["name"],
        description=function.get("description", ""),
        args_schema=function.get("parameters", {"type": "object", "properties": {}}),
        func=elsewhere,
    )


def _normalize(result: Any) -> Any:
    from langchain.agents.middleware import ModelResponse
    from langchain.agents.middleware.types import ExtendedModelResponse

    if isinstance(result, ExtendedModelResponse):
        return result.model_response
    if isinstance(result, LcAIMessage):
        return ModelResponse(result=[result])
    return result


async def call_with_middleware(
    spec: AgentSpec, hooks: HookSet, view: list[Message], extra: dict[str, Any]
) -> AIMessage:
    from langchain.agents.middleware import ModelRequest, ModelResponse

    messages = [to_langchain(m) for m in view]
    request = ModelRequest(
        model=build_chat_model(spec.model),
        messages=messages,
        system_message=LcSystemMessage(content=spec.system_prompt) if spec.system_prompt else None,
        tools=[schema_tool(schema) for schema in tool_schemas(spec)],
        state={"messages": messages, **extra},  # type: ignore[arg-type]
        runtime=lg_runtime(),
    )

    async def call_model(req: Any) -> Any:
        model = req.model
        settings = dict(req.model_settings)
        bound = (
            model.bind_tools(req.tools, tool_choice=req.tool_choice, **settings)
            if req.tools
            else model.bind(**settings)
        )
        system = [req.system_message] if req.system_message is not None else []
        reply = await bound.ainvoke([*system, *req.messages])
        return ModelResponse(result=[reply])

    response = await call_wrapped(
        chain_of(spec, hooks), "wrap_model_call", request, call_model, _normalize
    )
    replies = [from_langchain(m) for m in response.result if isinstance(m, LcAIMessage)]
    if not replies or not isinstance(replies[-1], AIMessage):
        raise TypeError("the wrap_model_call chain returned no AI message")
    return replies[-1]

"""Chat models for agent specs: ChatOpenAI on the operator's endpoint for the model the
agent names (``services.spec.endpoints``), bound to the agent's tools, built once per agent
and reused (one HTTP connection pool per model)."""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.prompt_values import ChatPromptValue
from langchain_core.runnables import Runnable

from contracts.agent import AgentSpec, ModelSpec
from services.agent_view import tool_schemas
from services.errors import ConfigurationError
from services.spec import endpoints, structured
from services.spec.models import bind_tools, local_model


def build_chat_model(spec: ModelSpec) -> BaseChatModel:
    """Built once per agent (``ModelPool``): the checks here cost nothing per step."""
    if spec.ref:
        return local_model(spec.ref)
    problem = endpoints.model_problem(spec)
    if problem:
        raise ConfigurationError(problem)
    if endpoints.is_fake(spec):
        from services.model.fake import ScriptedChatModel

        return ScriptedChatModel(**spec.params)
    endpoint = endpoints.endpoint_for(spec)
    if endpoint is None:
        raise ConfigurationError(
            f"no endpoint configured for model {spec.name!r}: name it in {endpoints.MODELS_ENV} "
            "or set OPENAI_BASE_URL (any OpenAI-compatible server) and/or OPENAI_API_KEY, "
            "or try `loopline demo`"
        )
    from langchain_openai import ChatOpenAI

    kwargs: dict[str, Any] = dict(spec.params)
    if endpoint.base_url:
        kwargs["base_url"] = endpoint.base_url
    kwargs["api_key"] = endpoint.api_key or "unused"  # local servers need none
    kwargs.setdefault("stream_usage", True)  # a streamed reply carries its usage too
    return ChatOpenAI(model=endpoint.model, **kwargs)


def prompt_of(messages: list[BaseMessage]) -> ChatPromptValue:
    """The input of a model call. LangChain validates a plain message list into a
    ``ChatPromptValue`` on every call, which walks the whole conversation again (0.5 ms
    at 1,000 messages on a 2-core machine); these messages are LangChain messages
    already, so the same value is built without that pass."""
    return ChatPromptValue.model_construct(messages=messages)


MODELS_CACHED = 1024
"""Bound models a model service keeps (each per-run override of a deployed agent is an
agent of its own); past it the pool starts over."""


class ModelPool:
    """Bound models per agent id: building ChatOpenAI and tool schemas once per agent."""

    def __init__(self) -> None:
        self._bound: dict[str, tuple[Runnable[Any, Any], Any]] = {}

    def bound(self, agent_id: str, spec: AgentSpec) -> Runnable[Any, Any]:
        return self.bound_with_strategy(agent_id, spec)[0]

    def bound_with_strategy(self, agent_id: str, spec: AgentSpec) -> tuple[Runnable[Any, Any], Any]:
        """The bound model and, for an agent with a ``response_format``, the LangChain
        strategy it was bound for (else None)."""
        found = self._bound.get(agent_id)
        if found is None:
            found = _bind(spec)
            if len(self._bound) >= MODELS_CACHED:
                self._bound.clear()
            self._bound[agent_id] = found
        return found


def _bind(spec: AgentSpec) -> tuple[Runnable[Any, Any], Any]:
    model = build_chat_model(spec.model)
    schemas = tool_schemas(spec)
    if spec.response_format is not None:
        return structured.bind(spec.response_format, model, schemas)
    return (bind_tools(model, schemas) if schemas else model), None

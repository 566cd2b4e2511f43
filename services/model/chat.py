"""Chat models for agent specs: ChatOpenAI on any OpenAI-compatible endpoint, bound to the
agent's tools, built once per agent and reused (one HTTP connection pool per model)."""

from __future__ import annotations

import os
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.prompt_values import ChatPromptValue
from langchain_core.runnables import Runnable

from contracts.agent import AgentSpec, ModelSpec
from services.agent_view import tool_schemas
from services.errors import ConfigurationError
from services.spec.models import local_model


def endpoint_configured(spec: ModelSpec) -> bool:
    return bool(
        spec.ref
        or spec.name == "fake"
        or spec.name.startswith("fake:")
        or spec.base_url
        or os.environ.get("OPENAI_BASE_URL")
        or os.environ.get("OPENAI_API_KEY")
    )


def build_chat_model(spec: ModelSpec) -> BaseChatModel:
    if spec.ref:
        return local_model(spec.ref)
    provider, _, _ = spec.name.rpartition(":")
    if spec.name == "fake" or provider == "fake":
        from services.model.fake import ScriptedChatModel

        return ScriptedChatModel(**spec.params)
    if provider and provider != "openai":
        raise ConfigurationError(
            f"model {spec.name!r}: only OpenAI-compatible endpoints are supported "
            "(use 'openai:NAME' or a plain name and set OPENAI_BASE_URL)"
        )
    if not endpoint_configured(spec):
        raise ConfigurationError(
            "no model endpoint configured: set OPENAI_BASE_URL (any OpenAI-compatible "
            "server) and/or OPENAI_API_KEY, or try `loopline demo`"
        )
    from langchain_openai import ChatOpenAI

    kwargs: dict[str, Any] = dict(spec.params)
    base_url = spec.base_url or os.environ.get("OPENAI_BASE_URL")
    if base_url:
        kwargs["base_url"] = base_url
    if not os.environ.get("OPENAI_API_KEY"):
        kwargs.setdefault("api_key", "unused")  # local OpenAI-compatible servers need none
    return ChatOpenAI(model=spec.model_name, **kwargs)


def prompt_of(messages: list[BaseMessage]) -> ChatPromptValue:
    """The input of a model call. LangChain validates a plain message list into a
    ``ChatPromptValue`` on every call, which walks the whole conversation again (0.5 ms
    at 1,000 messages on a 2-core machine); these messages are LangChain messages
    already, so the same value is built without that pass."""
    return ChatPromptValue.model_construct(messages=messages)


class ModelPool:
    """Bound models per agent id: building ChatOpenAI and tool schemas once per agent."""

    def __init__(self) -> None:
        self._bound: dict[str, Runnable[Any, Any]] = {}

    def bound(self, agent_id: str, spec: AgentSpec) -> Runnable[Any, Any]:
        found = self._bound.get(agent_id)
        if found is None:
            model = build_chat_model(spec.model)
            schemas = tool_schemas(spec)
            found = model.bind_tools(schemas, tool_choice=None) if schemas else model
            self._bound[agent_id] = found
        return found

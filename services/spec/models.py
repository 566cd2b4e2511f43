"""In-process chat models (embedded mode): any LangChain chat model object, named in the
spec by a ``local:`` reference that only this process resolves. Models named by name are
built by the model service, on the endpoints its operator configured."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import Runnable

from services.errors import ConfigurationError
from services.spec import local


def register_local_model(model: BaseChatModel) -> str:
    return local.register(str(id(model)), model)


def local_model(ref: str) -> BaseChatModel:
    found: BaseChatModel | None = local.lookup(ref, BaseChatModel)
    if found is None:
        raise ConfigurationError(
            f"model {ref} is an in-process object of another process; give the "
            "model by name when services run separately"
        )
    return found


def bind_tools(
    model: BaseChatModel,
    tools: Sequence[Any],
    *,
    tool_choice: Any = None,
    settings: Mapping[str, Any] | None = None,
) -> Runnable[Any, Any]:
    """``model.bind_tools(...)``; a chat model without tool calling (LangChain's
    ``GenericFakeChatModel`` and other fakes, whose replies are given, tool calls
    included) is called as it is, with the settings only, so an agent on it runs
    instead of failing with a bare ``NotImplementedError``."""
    try:
        return model.bind_tools(tools, tool_choice=tool_choice, **dict(settings or {}))
    except NotImplementedError:
        return model.bind(**dict(settings or {}))

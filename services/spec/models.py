"""In-process chat models (embedded mode): any LangChain chat model object, named in the
spec by a ``local:`` reference that only this process resolves. Models named by name are
built by the model service, on the endpoints its operator configured."""

from __future__ import annotations

from langchain_core.language_models import BaseChatModel

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

"""Middleware parameters as JSON, so a built-in travels in its spec: chat models given as
objects travel as ``openai:NAME`` strings; functions (a PII detector, say) as
``{"callable": "package.module:name"}``, or as a ``local:`` reference to this process's
function when it is not importable (embedded mode only)."""

from __future__ import annotations

import inspect
import sys
from typing import Any

from services.spec import imports, local

CALLABLE_KEY = "callable"
JSON_SCALARS = (str, int, float, bool, type(None))


class NotPortable(ValueError):
    """A parameter that cannot travel as JSON without loss (a model object other than a
    ``ChatOpenAI`` on the operator's endpoint, an object of another kind). Raised before
    anything is serialized: a model holding an endless iterator is never walked."""


def to_json(value: Any) -> Any:
    if isinstance(value, JSON_SCALARS):
        return value
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if _is_chat_model(value):
        return _model_name(value)
    if inspect.isfunction(value) or inspect.isbuiltin(value):
        return {CALLABLE_KEY: _callable_ref(value)}
    raise NotPortable(f"a {type(value).__name__} object does not travel as data")


def _is_chat_model(value: Any) -> bool:
    from langchain_core.language_models import BaseChatModel

    return isinstance(value, BaseChatModel)


def _model_name(model: Any) -> str:
    """``openai:NAME`` for a ChatOpenAI the model service can serve as it is: on the
    default endpoint (``OPENAI_BASE_URL``), with no settings the name would lose."""
    import os

    kind = type(model).__name__
    if kind != "ChatOpenAI":
        raise NotPortable(
            f"a {kind} model object does not travel to the services (they serve models by "
            "name, with ChatOpenAI on the operator's endpoints); give 'openai:NAME'"
        )
    base_url = getattr(model, "openai_api_base", None)
    if base_url and base_url != os.environ.get("OPENAI_BASE_URL"):
        raise NotPortable(
            f"ChatOpenAI(base_url={base_url!r}) does not travel: endpoints are the "
            "operator's (LOOPLINE_MODELS, OPENAI_BASE_URL); give 'openai:NAME'"
        )
    for setting in ("temperature", "max_tokens", "top_p", "seed", "model_kwargs"):
        if getattr(model, setting, None) not in (None, {}):
            raise NotPortable(
                f"ChatOpenAI({setting}=...) does not travel inside a middleware's "
                "parameters (only its name does); give 'openai:NAME'"
            )
    return f"openai:{model.model_name}"


def _callable_ref(func: Any) -> str:
    module = sys.modules.get(getattr(func, "__module__", None) or "")
    qualname = getattr(func, "__qualname__", "")
    target: Any = module
    for part in qualname.split(".") if module is not None and "<" not in qualname else ():
        target = getattr(target, part, None)
    if module is not None and module.__name__ != "__main__" and target is func:
        return f"{module.__name__}:{qualname}"
    return local.register_instance(func)


def from_json(value: Any) -> Any:
    """The inverse of ``to_json`` for functions: ``{"callable": ref}`` -> the function."""
    if isinstance(value, dict):
        if set(value) == {CALLABLE_KEY} and isinstance(value[CALLABLE_KEY], str):
            return _import_callable(value[CALLABLE_KEY])
        return {k: from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_json(v) for v in value]
    return value


def _import_callable(ref: str) -> Any:
    if local.is_local(ref):
        found = local.lookup(ref)
        if found is None:
            raise ValueError(
                f"{ref} is an in-process function of another process; give a module-level "
                "function (package.module:name) when services run separately"
            )
        return found
    try:
        target = imports.resolve(ref)
    except imports.UnresolvedPath as exc:
        raise ValueError(f"function {ref!r} cannot be imported: {exc}") from exc
    if not callable(target):
        raise ValueError(f"{ref} is not callable")
    return target

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


def to_json(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if hasattr(value, "model_name") and hasattr(value, "invoke"):
        return f"openai:{value.model_name}"
    if inspect.isfunction(value) or inspect.isbuiltin(value):
        return {CALLABLE_KEY: _callable_ref(value)}
    return value


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

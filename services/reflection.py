"""LangChain's per-call reflection, done once per function.

On every tool call LangChain resolves the type hints of the tool's function
(``langchain_core.tools.base._get_type_hints``, to find a ``RunnableConfig`` parameter)
and builds ``inspect.signature`` of its ``_run`` / ``func`` (``_signature_parameters``, to
find ``run_manager`` or ``callbacks``); every model call builds the signature of the
model's ``_agenerate``. A profile of the tools service under load puts these at about a
fifth of its busy time for a tool that does nothing. A function's signature and
annotations do not change once it is defined, so ``install()`` memoizes both per
function (weakly: a function that goes away takes its entry along) in the modules that
call them. The answers are LangChain's own, computed by its own functions the first time;
a failed resolution (``None``: a forward reference not importable yet) is not kept, so a
later call tries again as LangChain would. Bound methods are keyed by their function: the
answer is the same for every instance. Other callables (partials, classes, objects with
``__call__``) pass through uncached.

A service process installs this at start (``loopline serve``); in-process code is left as
LangChain ships it.
"""

from __future__ import annotations

import inspect
import types
import weakref
from collections.abc import Callable, Mapping
from typing import Any

_SIGNATURE_USERS = (
    "langchain_core.tools.base",
    "langchain_core.tools.structured",
    "langchain_core.tools.simple",
    "langchain_core.language_models.chat_models",
    "langchain_core.language_models.llms",
)


def _function_key(obj: Any) -> tuple[types.FunctionType, bool] | None:
    """(The function, whether bound) for a plain function or bound method, else None."""
    if isinstance(obj, types.MethodType) and isinstance(obj.__func__, types.FunctionType):
        return obj.__func__, True
    if isinstance(obj, types.FunctionType):
        return obj, False
    return None


def memoized_signature_parameters(
    original: Callable[[Any], Mapping[str, inspect.Parameter]],
) -> Callable[[Any], Mapping[str, inspect.Parameter]]:
    cache: weakref.WeakKeyDictionary[types.FunctionType, dict[bool, Any]]
    cache = weakref.WeakKeyDictionary()

    def signature_parameters(obj: Any) -> Mapping[str, inspect.Parameter]:
        key = _function_key(obj)
        if key is None:
            return original(obj)
        per_function = cache.setdefault(key[0], {})
        found = per_function.get(key[1])
        if found is None:
            found = per_function[key[1]] = original(obj)  # a read-only mappingproxy
        return found

    signature_parameters.__wrapped__ = original  # type: ignore[attr-defined]
    return signature_parameters


def memoized_type_hints(
    original: Callable[..., dict[str, Any] | None],
) -> Callable[..., dict[str, Any] | None]:
    cache: weakref.WeakKeyDictionary[types.FunctionType, dict[tuple[bool, bool], Any]]
    cache = weakref.WeakKeyDictionary()

    def get_type_hints(func: Any, *, include_extras: bool = False) -> dict[str, Any] | None:
        key = _function_key(func)
        if key is None:
            return original(func, include_extras=include_extras)
        per_function = cache.setdefault(key[0], {})
        found = per_function.get((key[1], include_extras))
        if found is None:
            found = original(func, include_extras=include_extras)
            if found is None:
                return None  # not resolvable yet: LangChain tries again next time
            per_function[(key[1], include_extras)] = found
        return dict(found)  # the caller's own dict, as LangChain returns a new one

    get_type_hints.__wrapped__ = original  # type: ignore[attr-defined]
    return get_type_hints


def install() -> None:
    """Memoize LangChain's per-call reflection in this process (idempotent)."""
    import importlib

    from langchain_core.tools import base
    from langchain_core.utils import _signature

    original = _signature._signature_parameters
    memo = memoized_signature_parameters(original)
    for name in _SIGNATURE_USERS:
        module = importlib.import_module(name)
        if getattr(module, "_signature_parameters", None) is original:  # not yet installed
            module._signature_parameters = memo  # type: ignore[attr-defined]
    if not hasattr(base._get_type_hints, "__wrapped__"):
        base._get_type_hints = memoized_type_hints(base._get_type_hints)

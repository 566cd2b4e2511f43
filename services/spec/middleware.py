"""A ``MiddlewareSpec`` to and from its middleware instance.

A spec names one of loopline's own middleware (todos, context editing, the rate limit),
one of LangChain's built-in classes (rebuilt from its remembered arguments), an import
path (``package.module:Name``, a class built with the spec's params or an instance), or a
``local:`` instance of this process (embedded mode). ``to_spec`` is what ``create_agent``
calls on the user's objects; ``from_spec`` validates a spec (agent files); ``build`` is
what the services call to get the instance whose hooks they run.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware import ContextEditingMiddleware as LcContextEditingMiddleware
from langchain.agents.middleware import TodoListMiddleware as LcTodoListMiddleware

from contracts.agent import MiddlewareSpec
from services.errors import ConfigurationError
from services.middleware.builtins import (
    BY_NAME,
    REFUSED_DEPLOYED,
    Remembers,
    build_builtin,
    builtin_name,
    constructor_args,
    params_of,
)
from services.middleware.context_editing import ContextEditingMiddleware, NotPortable
from services.middleware.ratelimit import RateLimitMiddleware
from services.middleware.todo import TodoListMiddleware
from services.spec import imports, local, params

# Implemented by the services themselves rather than run as hooks.
NATIVE = {"TodoListMiddleware", "ContextEditingMiddleware"}

BUILTIN: dict[str, Any] = {
    "TodoListMiddleware": TodoListMiddleware,
    "ContextEditingMiddleware": ContextEditingMiddleware,
    "RateLimitMiddleware": RateLimitMiddleware,
    **BY_NAME,
}


def builtin_class(name: str) -> Any:
    """A factory for a built-in by name: ``factory(**params)`` builds it."""
    if name in BY_NAME or name == "RateLimitMiddleware":
        return _Factory(name)
    if name in BUILTIN:
        return BUILTIN[name]
    raise ValueError(f"unknown middleware type {name!r}; supported: {', '.join(sorted(BUILTIN))}")


class _Factory:
    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, **given: Any) -> Any:
        return build_builtin(self.name, params.from_json(given))


def _remembered_spec(middleware: Remembers) -> MiddlewareSpec:
    return MiddlewareSpec(
        type=builtin_name(type(middleware)), params=params.to_json(params_of(middleware))
    )


def _portable(
    middleware: Any, make: Callable[[], MiddlewareSpec], embedded: bool
) -> MiddlewareSpec:
    """``make()``'s spec, or, when the instance cannot travel as data without loss, the
    instance itself in this process (embedded) or a clear refusal (deployed)."""
    name = builtin_name(type(middleware))
    try:
        return make()
    except ValueError as exc:  # NotPortable, or arguments that cannot be read back
        if embedded:
            return MiddlewareSpec(type=local.register_instance(middleware))
        raise ValueError(f"{name} cannot travel to the services: {exc}") from exc


def _langchain_builtin_spec(middleware: Any, embedded: bool) -> MiddlewareSpec:
    """LangChain's own instance: its constructor arguments read back (and checked), the
    models in them by name; built-ins that cannot run deployed stay in-process embedded
    and are refused otherwise (``REFUSED_DEPLOYED``, with the reason)."""
    name = builtin_name(type(middleware))
    if name in REFUSED_DEPLOYED:
        if embedded:
            return MiddlewareSpec(type=local.register_instance(middleware))
        raise ValueError(f"{name} cannot run deployed: {REFUSED_DEPLOYED[name]}")
    return _portable(
        middleware,
        lambda: _remembered_spec(build_builtin(name, constructor_args(middleware))),
        embedded,
    )


def refused_reason(type_name: str) -> str | None:
    """Why a spec's middleware type cannot run deployed, if it names such a built-in (by
    name or by its path in ``langchain.agents.middleware``)."""
    module, _, attr = type_name.rpartition(":")
    name = attr or type_name
    if module and not module.startswith("langchain.agents.middleware"):
        return None
    if name in REFUSED_DEPLOYED:
        return f"{name} cannot run deployed: {REFUSED_DEPLOYED[name]}"
    return None


def _as_native(middleware: Any) -> Any:
    """loopline's instance for one of its own middleware or LangChain's instance of a
    class the services run natively (the same parameters); None for any other."""
    if hasattr(middleware, "to_spec"):
        return middleware
    if type(middleware) is LcTodoListMiddleware:
        return TodoListMiddleware(
            system_prompt=middleware.system_prompt, tool_description=middleware.tool_description
        )
    if type(middleware) is LcContextEditingMiddleware:
        return ContextEditingMiddleware(
            edits=middleware.edits,
            token_count_method=middleware.token_count_method,
            token_counter=middleware.token_counter,
        )
    return None


def _native_spec(native: Any, given: Any, embedded: bool) -> MiddlewareSpec:
    """``native``'s spec, its functions (a token_counter) as references; an edit the
    context service does not implement keeps the instance given in-process (embedded,
    where it runs as LangChain's middleware) or is refused (deployed)."""
    try:
        spec: MiddlewareSpec = native.to_spec()
    except NotPortable as exc:
        if embedded:
            return MiddlewareSpec(type=local.register_instance(given))
        raise ValueError(f"{type(given).__name__} cannot run deployed: {exc}") from exc
    return MiddlewareSpec(type=spec.type, params=params.to_json(spec.params))


def to_spec(middleware: Any, *, embedded: bool = False) -> MiddlewareSpec:
    """A spec for a loopline middleware, a LangChain built-in, a user middleware, or a
    spec/dict as given. ``embedded``: in-process instances may stay in-process."""
    if isinstance(middleware, MiddlewareSpec):
        return middleware
    if isinstance(middleware, dict):
        return MiddlewareSpec.model_validate(middleware)
    if isinstance(middleware, Remembers):
        return _portable(middleware, lambda: _remembered_spec(middleware), embedded)
    native = _as_native(middleware)
    if native is not None:
        return _native_spec(native, middleware, embedded)
    name = type(middleware).__name__
    if type(middleware).__module__.startswith("langchain.agents.middleware") and (
        name in BY_NAME or name in REFUSED_DEPLOYED
    ):
        return _langchain_builtin_spec(middleware, embedded)
    if not isinstance(middleware, AgentMiddleware):
        raise ValueError(f"{middleware!r} is not a middleware (subclass AgentMiddleware)")
    if embedded:
        return MiddlewareSpec(type=local.register_instance(middleware))
    path = _import_path(middleware)
    if path:
        return MiddlewareSpec(type=path)
    cls = type(middleware)
    return MiddlewareSpec(type=f"{cls.__module__}:{cls.__qualname__}", params=params_of(middleware))


def _import_path(instance: Any) -> str | None:
    """``module:name`` of a module-level middleware instance (e.g. made by a decorator)."""
    for module_name in {type(instance).__module__, getattr(instance, "__module__", "")}:
        module = sys.modules.get(module_name or "")
        for attr, value in vars(module).items() if module else ():
            if value is instance:
                return f"{module_name}:{attr}"
    return None


def from_spec(spec: MiddlewareSpec) -> Any:
    """Build (and so validate) the middleware a spec names."""
    refused = refused_reason(spec.type)
    if refused is not None:
        raise ValueError(refused)
    if spec.type in NATIVE:  # with the functions its parameters name (a token_counter)
        return BUILTIN[spec.type].from_spec(
            MiddlewareSpec(type=spec.type, params=params.from_json(spec.params))
        )
    if ":" not in spec.type and spec.type not in BUILTIN:
        raise ValueError(
            f"unknown middleware type {spec.type!r}; supported: {', '.join(sorted(BUILTIN))} "
            "or an import path package.module:Name"
        )
    return build(spec)


def build(spec: MiddlewareSpec) -> Any:
    """An instance for a spec that is not one of loopline's native middleware."""
    if local.is_local(spec.type):
        found = local.lookup(spec.type)
        if found is None:
            raise ConfigurationError(
                f"middleware {spec.type} is an in-process object of another process; "
                "name middleware by import path when services run separately"
            )
        return found
    if ":" not in spec.type:
        try:
            return builtin_class(spec.type)(**spec.params)
        except (TypeError, ValueError, KeyError) as exc:
            raise ConfigurationError(f"middleware {spec.type}: {exc}") from exc
    try:
        target = imports.resolve(spec.type)
    except imports.ModuleNotAllowed as exc:
        raise ConfigurationError(f"middleware {spec.type!r}: {exc}") from exc
    except imports.ModuleNotImportable as exc:
        raise ConfigurationError(f"middleware {spec.type!r}: {exc}") from exc
    except imports.NameNotFound as exc:
        raise ConfigurationError(
            f"middleware {spec.type!r}: no {exc.attr} in {exc.module_name}"
        ) from exc
    if inspect.isclass(target):
        try:
            return target(**spec.params)
        except TypeError as exc:
            raise ConfigurationError(f"middleware {spec.type}: {exc}") from exc
    if spec.params:
        raise ConfigurationError(f"middleware {spec.type} is an instance: it takes no params")
    return target

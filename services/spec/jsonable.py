"""What a task can store: its spec travels in a JSON event, and the state its middleware keep
between stages is stored as JSON. A value or a state field that JSON cannot hold is found
here, by where it sits, so the client is told at the call instead of a service failing on
an event it cannot write or read.
"""

from __future__ import annotations

import collections.abc
import types
import typing
from typing import Any, ForwardRef, Literal, TypeVar, Union, get_args, get_origin

import typing_extensions

from services.spec.annotations import typed_dict_fields

JSON_SCALARS = (str, int, float, bool, type(None))

_WRAPPERS = {
    getattr(typing, name)
    for name in ("Annotated", "NotRequired", "Required", "ReadOnly")
    if hasattr(typing, name)
}
_CONTAINERS = {
    list,
    tuple,
    dict,
    collections.abc.Sequence,
    collections.abc.MutableSequence,
    collections.abc.Mapping,
    collections.abc.MutableMapping,
}


def first_unstorable(value: Any, where: str) -> tuple[str, Any] | None:
    """The path and the value of the first part of ``value`` that JSON cannot hold
    (objects, sets, keys that are not strings); None when all of it is JSON."""
    if isinstance(value, JSON_SCALARS):
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{where} key {key!r}", key
            found = first_unstorable(item, f"{where}.{key}")
            if found:
                return found
        return None
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = first_unstorable(item, f"{where}[{index}]")
            if found:
                return found
        return None
    return where, value


def unstorable_type(annotation: Any, _seen: frozenset[int] = frozenset()) -> str | None:  # noqa: C901 (one case per kind of type)
    """The name of a type inside ``annotation`` whose values JSON cannot hold (a class
    that is not a TypedDict, a set, a callable); None when every part is JSON or unknown
    (an unresolved name, a type variable, ``Any``: never refused)."""
    if annotation is Any or isinstance(annotation, TypeVar | ForwardRef | str):
        return None
    if annotation in JSON_SCALARS or annotation is None:
        return None
    origin = get_origin(annotation)
    if origin in _WRAPPERS:
        return unstorable_type(get_args(annotation)[0], _seen)
    if origin is Literal:
        return None
    if origin is Union or origin is types.UnionType or origin in _CONTAINERS:
        for arg in get_args(annotation):
            if arg is Ellipsis:
                continue
            found = unstorable_type(arg, _seen)
            if found:
                return found
        return None
    if annotation in (list, tuple, dict):
        return None
    if typing_extensions.is_typeddict(annotation):
        return _unstorable_field(annotation, _seen)
    if origin is not None:
        return getattr(origin, "__name__", str(origin))
    if isinstance(annotation, type):
        return annotation.__name__
    return None


def _unstorable_field(typed_dict: Any, seen: frozenset[int]) -> str | None:
    if id(typed_dict) in seen:
        return None
    for annotation in typed_dict_fields(typed_dict).values():
        found = unstorable_type(annotation, seen | {id(typed_dict)})
        if found:
            return found
    return None


def unstorable_state_field(state_schema: Any) -> tuple[str, str] | None:
    """The first field a middleware adds to the agent state (beyond LangChain's
    ``AgentState``) whose values JSON cannot hold, with the type that cannot be."""
    from langchain.agents.middleware import AgentState

    if state_schema is None or state_schema is AgentState:
        return None
    base = set(getattr(AgentState, "__annotations__", {}))
    for name, annotation in typed_dict_fields(state_schema).items():
        if name in base:
            continue
        found = unstorable_type(annotation)
        if found:
            return name, found
    return None

"""What a task can store: its spec travels in a JSON event, and the state its middleware keep
between stages is stored as LangGraph's checkpoint serializer carries it
(``services.spec.statecodec``). A spec value that JSON cannot hold, or a state field whose
type the serializer cannot carry (a live session, a file handle), is found here, by where
it sits, so the client is told at the call instead of a service failing on an event it
cannot write or read.
"""

from __future__ import annotations

import collections
import collections.abc
import dataclasses
import enum
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
    set,
    frozenset,
    collections.deque,
    collections.abc.Set,
    collections.abc.MutableSet,
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
    """The name of a type inside ``annotation`` whose values LangGraph's checkpoint
    serializer cannot carry (a class that is none of a pydantic model, a dataclass of
    carried fields, an enum, one of the serializer's own types; a callable); None when
    every part is carried or unknown (an unresolved name, a type variable, ``Any``:
    never refused)."""
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
        return _uncarried_class(annotation, _seen)
    return None


_CARRIED_BASES: tuple[type, ...] = (bytes, bytearray, enum.Enum, set, frozenset, tuple)


def _uncarried_class(cls: type, seen: frozenset[int]) -> str | None:
    """The serializer's cases for a class (``jsonplus._msgpack_default``): a pydantic
    model, a named tuple, an enum, its own safe types are carried; a dataclass when its
    fields are."""
    from langgraph.checkpoint.serde._msgpack import SAFE_MSGPACK_TYPES
    from pydantic import BaseModel

    if issubclass(cls, (BaseModel, *_CARRIED_BASES)):
        return None
    if (cls.__module__, cls.__name__) in SAFE_MSGPACK_TYPES:
        return None
    if dataclasses.is_dataclass(cls):
        if id(cls) in seen:
            return None
        try:
            hints = typing.get_type_hints(cls)
        except Exception:  # a name that does not resolve: never refused
            return None
        for name, hint in hints.items():
            if name.startswith("_") or hint is typing.ClassVar:
                continue
            if unstorable_type(hint, seen | {id(cls)}):
                return cls.__name__
        return None
    return cls.__name__


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
    ``AgentState``) whose values LangGraph's checkpoint serializer cannot carry, with the
    type that cannot be."""
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

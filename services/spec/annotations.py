"""Annotations as types that pydantic can check, from code written for type checkers.

Under ``from __future__ import annotations`` every annotation is a string, and many name
what the module imports only for a type checker (``if TYPE_CHECKING:``). Each annotation
is resolved on its own, against its module, the usual ``typing`` and ``collections.abc``
names and a few of LangChain's; a name still not found counts as ``Any``, so what cannot
be known is accepted, never refused. TypedDicts are rebuilt from their resolved fields
(optional keys kept optional), which also gives pydantic the ``typing_extensions`` kind it
needs before Python 3.12.
"""

from __future__ import annotations

import builtins
import collections.abc
import pathlib
import sys
import types
import typing
from typing import Any, ForwardRef, Literal, Union, get_args, get_origin

import typing_extensions

NO_ANNOTATION: Any = object()
"""An annotation that could not be turned into a type at all: nothing to check."""

_WRAPPERS = {
    getattr(typing, n) for n in ("NotRequired", "Required", "ReadOnly") if hasattr(typing, n)
}


def _fallback_names() -> dict[str, Any]:
    """Names annotations use without importing them at run time (``TYPE_CHECKING``)."""
    names: dict[str, Any] = {n: getattr(typing, n) for n in typing.__all__ if hasattr(typing, n)}
    names.update({n: getattr(collections.abc, n) for n in collections.abc.__all__})
    names["Path"] = pathlib.Path
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import BaseMessage
    from langchain_core.tools import BaseTool

    names.update(BaseChatModel=BaseChatModel, BaseMessage=BaseMessage, BaseTool=BaseTool)
    return names


_FALLBACK = _fallback_names()


class _Lenient(dict[str, Any]):
    """A namespace in which a name that is nowhere to be found is ``Any``."""

    def __missing__(self, key: str) -> Any:
        return getattr(builtins, key, Any)


class _Holder:
    """An object ``typing.get_type_hints`` resolves one annotation of."""

    def __init__(self, annotation: str) -> None:
        self.__annotations__ = {"value": annotation}


def resolve_annotation(annotation: Any, module: str | None) -> Any:
    """The annotation as a type; ``NO_ANNOTATION`` when even a lenient reading fails (a
    missing name used as a generic, a syntax typing cannot read)."""
    if isinstance(annotation, ForwardRef):
        module = getattr(annotation, "__forward_module__", None) or module
        annotation = annotation.__forward_arg__
    if not isinstance(annotation, str):
        return annotation
    module_globals = getattr(sys.modules.get(module or ""), "__dict__", {})
    names = _Lenient({**_FALLBACK, **module_globals})
    try:
        hints = typing.get_type_hints(
            _Holder(annotation), globalns=names, localns=names, include_extras=True
        )
    except Exception:
        return NO_ANNOTATION
    return hints["value"]


def typed_dict_fields(schema: Any) -> dict[str, Any]:
    """A TypedDict's fields, each annotation resolved on its own (one unresolvable field
    does not lose the others)."""
    fields: dict[str, Any] = {}
    for name, annotation in getattr(schema, "__annotations__", {}).items():
        resolved = resolve_annotation(annotation, schema.__module__)
        fields[name] = Any if resolved is NO_ANNOTATION else resolved
    return fields


def checkable(annotation: Any) -> Any:
    """The annotation with every TypedDict inside rebuilt from resolved fields."""
    return _Rebuilder().rebuild(annotation)


class _Rebuilder:
    def __init__(self) -> None:
        self.building: set[int] = set()

    def rebuild(self, tp: Any) -> Any:
        if typing_extensions.is_typeddict(tp):
            return self._typed_dict(tp)
        if isinstance(tp, type) and typing_extensions.is_protocol(tp):
            return Any  # a structural type: pydantic has no isinstance to check it with
        origin, args = get_origin(tp), get_args(tp)
        if not args or origin is collections.abc.Callable:
            return tp
        if origin is Literal:
            return Any if Any in args else tp  # a name that stood for a value: unknown
        if origin is typing.Annotated:
            return typing.Annotated[(self.rebuild(args[0]), *tp.__metadata__)]
        new_args = tuple(a if a is Ellipsis else self.rebuild(a) for a in args)
        if origin is Union or origin is types.UnionType:
            return Union[new_args]  # noqa: UP007 - a union built from its members
        if origin in _WRAPPERS:
            return origin[new_args[0]]
        if isinstance(tp, types.GenericAlias):
            return types.GenericAlias(origin, new_args)
        copy_with = getattr(tp, "copy_with", None)
        return copy_with(new_args) if copy_with is not None else tp

    def _typed_dict(self, tp: Any) -> Any:
        if id(tp) in self.building:  # a TypedDict that contains itself: not checked deeper
            return dict[str, Any]
        self.building.add(id(tp))
        optional: frozenset[str] = getattr(tp, "__optional_keys__", frozenset())
        fields: dict[str, Any] = {}
        for name, field in typed_dict_fields(tp).items():
            rebuilt = self.rebuild(field)
            if name in optional and get_origin(rebuilt) not in _WRAPPERS:
                rebuilt = typing_extensions.NotRequired[rebuilt]
            fields[name] = rebuilt
        self.building.discard(id(tp))
        return typing_extensions.TypedDict(tp.__name__, fields)  # type: ignore[operator]

"""A constructor's parameters as a spec may give them, and the check of given values
against their annotations, so a spec with a wrong type is refused before anything runs.

The parameters of a class are collected along its MRO: an ``__init__`` that takes
``**kwargs`` passes the rest on to its base, so the bases' parameters count too (loopline's
wrappers of LangChain's classes forward everything). Annotations are resolved one by one
(``services.spec.annotations``) and checked with pydantic in strict JSON mode: what the
spec holds is what the constructor receives, so ``"5"`` is not an ``int``. An annotation
that cannot be resolved, or that pydantic cannot check, is skipped: the check may let a
wrong value through, never refuse a right one.
"""

from __future__ import annotations

import inspect
import json
import re
import types
from dataclasses import dataclass, field
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import ConfigDict, TypeAdapter, ValidationError

from services.spec.annotations import NO_ANNOTATION, checkable, resolve_annotation
from services.spec.params import CALLABLE_KEY

REPR_MAX = 60
"""A given value is quoted in an error up to this many characters."""

EXPECTED_MAX = 240
"""An expected type is described up to this many characters, so an error stays one line."""


@dataclass(frozen=True)
class Param:
    """One parameter a spec may give: its annotation (resolved, or ``NO_ANNOTATION`` when
    it could not be) and whether the constructor needs it."""

    name: str
    annotation: Any
    required: bool


@dataclass
class Signature:
    """What a constructor accepts by name. ``open``: it also takes any other keyword
    (a ``**kwargs`` its class keeps for itself), so no name is unknown to it."""

    params: dict[str, Param] = field(default_factory=dict)
    open: bool = False


def _forwards_everything(sig: inspect.Signature) -> bool:
    kinds = {p.kind for p in sig.parameters.values()}
    return kinds <= {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}


def _is_vague(annotation: Any) -> bool:
    return annotation is NO_ANNOTATION or annotation is Any or annotation is inspect.Parameter.empty


def _own_parameters(klass: type) -> inspect.Signature | None:
    init = vars(klass).get("__init__")
    if init is None:
        return None
    try:
        sig = inspect.signature(init)
    except (TypeError, ValueError):  # built in C: nothing to read
        return None
    return sig.replace(parameters=list(sig.parameters.values())[1:])  # without self


def constructor_signature(cls: type, *, var_positional_by_name: bool = False) -> Signature:
    """The parameters ``cls(**params)`` accepts. ``var_positional_by_name``: a ``*name``
    parameter is given as a list under ``name`` (how specs give LangChain's
    ``ModelFallbackMiddleware`` its ``additional_models``)."""
    found = Signature()
    for klass in cls.__mro__:
        if klass is object:
            return found
        sig = _own_parameters(klass)
        if sig is None:
            continue
        if not _forwards_everything(sig):
            _collect(found, sig, klass.__module__, var_positional_by_name)
        found.open = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
        if not found.open:
            return found
    return found


def _collect(found: Signature, sig: inspect.Signature, module: str, by_name: bool) -> None:
    for p in sig.parameters.values():
        if p.kind is p.VAR_KEYWORD or (p.kind is p.VAR_POSITIONAL and not by_name):
            continue
        annotation = resolve_annotation(p.annotation, module)
        if p.kind is p.VAR_POSITIONAL and not _is_vague(annotation):
            annotation = list[annotation]  # type: ignore[valid-type]
        required = p.default is p.empty and p.kind is not p.VAR_POSITIONAL
        known = found.params.get(p.name)
        if known is None:
            found.params[p.name] = Param(p.name, annotation, required)
        elif _is_vague(known.annotation) and not _is_vague(annotation):
            found.params[p.name] = Param(p.name, annotation, known.required)


# -- checking values ---------------------------------------------------------------------

_ARBITRARY = ConfigDict(arbitrary_types_allowed=True)


_adapters: dict[Any, TypeAdapter[Any] | None] = {}


def _build_adapter(annotation: Any) -> TypeAdapter[Any] | None:
    try:
        return TypeAdapter(checkable(annotation), config=_ARBITRARY)
    except Exception:  # a type pydantic cannot build a validator for: not checked
        return None


def _adapter(annotation: Any) -> TypeAdapter[Any] | None:
    """Built once per annotation (building one costs far more than using it)."""
    try:
        if annotation not in _adapters:
            _adapters[annotation] = _build_adapter(annotation)
        return _adapters[annotation]
    except TypeError:  # an unhashable annotation: built each time
        return _build_adapter(annotation)


def refers_to_function(value: Any) -> bool:
    """Whether a value holds a ``{"callable": ref}`` function reference: such a value
    becomes a function only when built, so its annotation cannot check it here."""
    if isinstance(value, dict):
        if set(value) == {CALLABLE_KEY}:
            return True
        return any(refers_to_function(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(refers_to_function(v) for v in value)
    return False


def mismatches(annotation: Any, value: Any) -> bool:
    """Whether a JSON value certainly does not match the annotation."""
    if _is_vague(annotation) or refers_to_function(value):
        return False
    adapter = _adapter(annotation)
    if adapter is None:
        return False
    try:
        adapter.validate_json(json.dumps(value), strict=True)
    except ValidationError:
        return True
    except Exception:  # a validator that fails on its own (a Protocol, say): not checked
        return False
    return False


def describe_type(annotation: Any) -> str:
    """An annotation as a reader writes it: ``int``, ``'end' or 'error'``, ``str | None``."""
    text = _describe(annotation)
    return text if len(text) <= EXPECTED_MAX else text[: EXPECTED_MAX - 3] + "..."


def _describe(annotation: Any, inner: bool = False) -> str:
    """``inner``: inside brackets, where alternatives read better as ``a | b``."""
    if annotation is type(None) or annotation is None:
        return "None"
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return (" | " if inner else " or ").join(repr(v) for v in args)
    if origin is Union or origin is types.UnionType:
        parts = [_describe(a, inner) for a in args]
        plain = not inner and all(" | " not in p for p in parts)
        return (" or " if plain else " | ").join(parts)
    if isinstance(annotation, type) and not args:
        return annotation.__name__
    if origin is tuple and args and Ellipsis not in args:
        return "(" + ", ".join(_describe(a, inner=True) for a in args) + ")"
    if origin in (list, dict) and args:
        return f"{origin.__name__}[{', '.join(_describe(a, inner=True) for a in args)}]"
    return re.sub(r"\b(?:[A-Za-z_]\w*\.)+([A-Za-z_]\w*)", r"\1", str(annotation))


def describe_value(value: Any) -> str:
    """A given value with its JSON type: ``'lots' (str)``."""
    if value is None:
        return "None"
    text = repr(value)
    if len(text) > REPR_MAX:
        text = text[: REPR_MAX - 3] + "..."
    return f"{text} ({type(value).__name__})"


def problems(sig: Signature, given: dict[str, Any]) -> list[str]:
    """What is wrong with ``given`` for this signature, each as ``parameter ...`` text:
    unknown names, missing required ones, values of the wrong type."""
    found: list[str] = []
    if not sig.open:
        unknown = sorted(set(given) - set(sig.params))
        expected = ", ".join(sorted(sig.params)) or "none"
        found.extend(f"unknown parameter {name}; expected: {expected}" for name in unknown)
    missing = [p.name for p in sig.params.values() if p.required and p.name not in given]
    found.extend(f"missing required parameter {name}" for name in missing)
    for name, value in given.items():
        param = sig.params.get(name)
        if param is not None and mismatches(param.annotation, value):
            found.append(
                f"{name} must be {describe_type(param.annotation)}, got {describe_value(value)}"
            )
    return found

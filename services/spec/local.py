"""In-process objects that a spec names by ``local:`` reference: the tools, models,
middleware and functions of an agent built in this process (embedded mode), which no
other process can import. One registry for all of them, so every kind of object resolves
the same way; each kind keeps its own reference form (a tool by its name, a model by its
identity, a middleware or function by its type and identity), as agent ids hash them."""

from __future__ import annotations

from typing import Any

LOCAL_PREFIX = "local:"

_objects: dict[str, Any] = {}


def register(name: str, obj: Any) -> str:
    """Keep ``obj`` for this process's services; returns its reference, ``local:name``."""
    ref = LOCAL_PREFIX + name
    _objects[ref] = obj
    return ref


def register_instance(obj: Any) -> str:
    """``register`` by type name and identity, for objects without a name of their own
    (middleware instances, functions given as middleware parameters)."""
    return register(f"{type(obj).__name__}:{id(obj)}", obj)


def is_local(ref: str) -> bool:
    return ref.startswith(LOCAL_PREFIX)


def lookup(ref: str, kind: type[Any] = object) -> Any:
    """The object registered as ``ref`` when it is a ``kind``; None when this process has
    none (the reference came from another process)."""
    found = _objects.get(ref)
    return found if isinstance(found, kind) else None

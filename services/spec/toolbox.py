"""Finding an agent's tools: import paths, or in-process callables in embedded mode.

A tool is named in the spec by ``package.module:name`` (a LangChain tool, a ``BaseTool``
instance, or a plain typed function with a docstring) or by ``local:name`` for a callable
registered by the embedded runtime of this process. Plain functions become tools exactly
as LangChain's ``create_agent`` makes them (``langchain_core.tools.tool``).
"""

from __future__ import annotations

from typing import Any

from langchain_core.tools import BaseTool, tool

from services.errors import ConfigurationError
from services.spec import imports, local

LOCAL_PREFIX = local.LOCAL_PREFIX
_imported: dict[str, BaseTool] = {}


IDEMPOTENT = "idempotent"


def idempotent(obj: Any) -> Any:
    """Declare a tool safe to run again when a worker died while running it (without this,
    an interrupted call answers the model that its outcome is unknown)."""
    if isinstance(obj, BaseTool):
        obj.metadata = {**(obj.metadata or {}), IDEMPOTENT: True}
    else:
        obj.__loopline_idempotent__ = True
    return obj


def is_idempotent(made: BaseTool) -> bool:
    return bool((made.metadata or {}).get(IDEMPOTENT))


def as_tool(obj: Any) -> BaseTool:
    if isinstance(obj, BaseTool):
        return obj
    if callable(obj):
        if not (obj.__doc__ or "").strip():
            raise ConfigurationError(
                f"tool function {getattr(obj, '__name__', obj)!r} needs a docstring: "
                "it is the description the model reads"
            )
        made: BaseTool = tool(obj)
        if getattr(obj, "__loopline_idempotent__", False):
            made.metadata = {**(made.metadata or {}), IDEMPOTENT: True}
        return made
    raise ConfigurationError(f"{obj!r} is not a tool or a callable")


def register_local(obj: Any) -> str:
    """Make an in-process tool available to this process's services; returns its ref,
    by the tool's name and the given object's identity: two agents' tools of one name
    (each sub-agent's ``delegate``, each backend's ``read_file``) stay two tools. The
    tool made keeps ``obj`` alive (``func``), so its identity is not reused."""
    made = as_tool(obj)
    return local.register(f"{made.name}:{id(obj)}", made)


def tool_ref(obj: Any) -> str:
    """The spec reference of a tool: its import path when importable, else ``local:``."""
    if isinstance(obj, str):
        resolve(obj)  # fail early on a bad path
        return obj
    made = as_tool(obj)
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if module and qualname and "<" not in qualname and module != "__main__":
        path = f"{module}:{qualname}"
        try:
            if resolve(path).name == made.name:
                return path
        except ConfigurationError:
            pass
    return register_local(obj)


def resolve(ref: str) -> BaseTool:
    if local.is_local(ref):
        found: BaseTool | None = local.lookup(ref, BaseTool)
        if found is None:
            raise ConfigurationError(
                f"tool {ref!r} is an in-process tool of another process; name tools by "
                "import path (package.module:name) when services run separately"
            )
        return found
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(f"tool path {ref!r} must look like package.module:name")
    try:
        imports.check_allowed(ref)  # a cached tool too: the allow-list may have changed
    except imports.ModuleNotAllowed as exc:
        raise ConfigurationError(f"tool path {ref!r}: {exc}") from exc
    cached = _imported.get(ref)
    if cached is not None:
        return cached
    try:
        obj = imports.resolve(ref)
    except imports.ModuleNotImportable as exc:
        raise ConfigurationError(f"tool path {ref!r}: cannot import {module_name}: {exc}") from exc
    except imports.NameNotFound as exc:
        raise ConfigurationError(f"tool path {ref!r}: {module_name} has no {attr}") from exc
    made = as_tool(obj)
    _imported[ref] = made
    return made


def tool_schema(made: BaseTool) -> dict[str, Any]:
    from langchain_core.utils.function_calling import convert_to_openai_tool

    return convert_to_openai_tool(made)

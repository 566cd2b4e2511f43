"""The agent's ``context_schema`` and ``state_schema``: resolved from the spec where a
hook or tool runs, the run's context coerced as LangGraph coerces it, and which state
keys LangChain takes as input and gives back as output.

Both schemas travel as ``AgentSpec.context_schema`` / ``state_schema``: an import path
(``package.module:Class``, through the import allow-list) or, in embedded mode, a
``local:`` reference to the class itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, Literal, get_type_hints

from contracts.agent import AgentSpec
from services.errors import ConfigurationError
from services.spec import imports, local

MESSAGES = "messages"


def resolve(ref: str, what: str) -> Any:
    """The class a schema reference names; ConfigurationError naming ``what``."""
    if local.is_local(ref):
        found = local.lookup(ref)
        if found is None:
            raise ConfigurationError(
                f"{what} {ref!r} is an in-process class of another process; name it by "
                "import path (package.module:Class)"
            )
        return found
    if ":" not in ref:
        raise ConfigurationError(f"{what} {ref!r} must look like package.module:Class")
    try:
        return imports.resolve(ref)
    except imports.UnresolvedPath as exc:
        raise ConfigurationError(f"{what} {ref!r}: {exc}") from exc


def context_schema(spec: AgentSpec) -> Any:
    return None if spec.context_schema is None else resolve(spec.context_schema, "context_schema")


def state_schema(spec: AgentSpec) -> Any:
    return None if spec.state_schema is None else resolve(spec.state_schema, "state_schema")


def run_context(spec: AgentSpec) -> Any:
    """``Runtime.context`` for a task of this spec: its JSON context, an instance of the
    ``context_schema`` when that is a dataclass or pydantic model (LangGraph's
    ``_coerce_context``), else as it is."""
    if spec.context is None:
        return None
    schema = context_schema(spec)
    if schema is None:
        return spec.context
    from pydantic import BaseModel

    if isinstance(schema, type) and (
        issubclass(schema, BaseModel) or dataclasses.is_dataclass(schema)
    ):
        return schema(**spec.context)
    return spec.context


def context_as_json(context: Any) -> dict[str, Any] | None:
    """A context given to ``invoke(..., context=...)`` as the JSON it travels as: a
    dict as it is, a dataclass or pydantic model by its fields. TypeError for others."""
    if context is None or isinstance(context, dict):
        return context
    from pydantic import BaseModel

    if isinstance(context, BaseModel):
        return context.model_dump(mode="json")
    if dataclasses.is_dataclass(context) and not isinstance(context, type):
        return dataclasses.asdict(context)
    raise TypeError(
        f"context must be a dict, a dataclass or a pydantic model instance, not {context!r}"
    )


def state_keys(
    schema: Any, instances: Iterable[Any], purpose: Literal["input", "output"]
) -> frozenset[str]:
    """The state keys besides ``messages`` that LangChain's agent takes as input or gives
    as output, from the agent's ``state_schema`` and its middleware's, as its factory
    resolves them (``OmitFromInput`` / ``OmitFromOutput`` / private keys left out)."""
    from langchain.agents.factory import _resolve_schemas
    from langchain.agents.middleware.types import AgentState

    schemas: list[type] = [getattr(m, "state_schema", AgentState) for m in instances]
    schemas.append(schema if schema is not None else AgentState)
    _, inputs, outputs = _resolve_schemas(schemas)
    resolved = inputs if purpose == "input" else outputs
    return frozenset(get_type_hints(resolved, include_extras=True)) - {MESSAGES}

"""``response_format``: LangChain's structured output, by LangChain's own pieces.

The strategies (``ToolStrategy``, ``ProviderStrategy``, the bare schema's auto choice),
the structured-output tool, its argument parsing and the error handling are LangChain's
(``langchain.agents.structured_output`` and the helpers of ``langchain.agents.factory``);
this module only rebuilds them from a spec and turns their outcome into data the task
state machine stores (``StructuredOutcome``).
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import types
import typing
from typing import Any

from pydantic import BaseModel, TypeAdapter

from contracts.agent import ResponseFormatSpec
from contracts.events import StructuredOutcome
from contracts.messages import ToolMessage
from services.errors import ConfigurationError
from services.spec import imports, local

Strategy = Any
"""A LangChain ``ToolStrategy`` or ``ProviderStrategy`` (``AutoStrategy`` before the choice)."""

_strategies: dict[str, Strategy] = {}
"""By the spec's JSON (a spec holding a JSON schema dict is not hashable)."""


def _key(rf: ResponseFormatSpec) -> str:
    return rf.model_dump_json()


def response_schema(rf: ResponseFormatSpec) -> Any:
    """The schema a spec names: a JSON schema dict as given, else the class its import
    path (through the allow-list) or ``local:`` reference names; a list of them is their
    union (``A | B``, as a deployed agent's union of models travels)."""
    ref = rf.schema_
    if isinstance(ref, dict):
        return ref
    if isinstance(ref, list):
        if not ref:
            raise ConfigurationError("response_format schema: an empty list names no class")
        return functools.reduce(operator.or_, [_schema_class(r) for r in ref])
    return _schema_class(ref)


def _schema_class(ref: str) -> Any:
    if local.is_local(ref):
        found = local.lookup(ref)
        if found is None:
            raise ConfigurationError(
                f"response_format schema {ref!r} is an in-process class of another "
                "process; name it by import path (package.module:Class)"
            )
        return found
    if ":" not in ref:
        raise ConfigurationError(
            f"response_format schema {ref!r} must look like package.module:Class"
        )
    try:
        return imports.resolve(ref)
    except imports.UnresolvedPath as exc:
        raise ConfigurationError(f"response_format schema {ref!r}: {exc}") from exc


def strategy_of(rf: ResponseFormatSpec) -> Strategy:
    """The LangChain strategy the spec stands for (built once per spec)."""
    if rf.ref is not None:
        return _local_strategy(rf.ref)
    found = _strategies.get(_key(rf))
    if found is None:
        from langchain.agents.structured_output import (
            AutoStrategy,
            ProviderStrategy,
            ToolStrategy,
        )

        schema = response_schema(rf)
        if rf.strategy == "tool":
            found = ToolStrategy(
                schema,
                tool_message_content=rf.tool_message_content,
                handle_errors=rf.handle_errors,
            )
        elif rf.strategy == "provider":
            found = ProviderStrategy(schema, strict=rf.strict)
        else:
            found = AutoStrategy(schema)
        _strategies[_key(rf)] = found
    return found


def _local_strategy(ref: str) -> Strategy:
    found = local.lookup(ref)
    if found is None:
        raise ConfigurationError(
            f"response_format {ref!r} is an in-process strategy of another process; "
            "give handle_errors as True, False or a message where services run apart"
        )
    return found


def output_tools(rf: ResponseFormatSpec) -> dict[str, Any]:
    """The structured-output tools by name (LangChain's ``structured_output_tools``): a
    ToolStrategy's, or, for the auto choice, the ToolStrategy it would fall back to."""
    from langchain.agents.structured_output import (
        AutoStrategy,
        OutputToolBinding,
        ToolStrategy,
    )

    found = strategy_of(rf)
    if isinstance(found, AutoStrategy):
        found = _auto_tool_strategy(rf)
    if not isinstance(found, ToolStrategy):
        return {}
    bindings = [OutputToolBinding.from_schema_spec(s) for s in found.schema_specs]
    return {b.tool.name: b for b in bindings}


_auto_tools: dict[str, Strategy] = {}


def _auto_tool_strategy(rf: ResponseFormatSpec) -> Strategy:
    from langchain.agents.structured_output import ToolStrategy

    found = _auto_tools.get(_key(rf))
    if found is None:
        found = _auto_tools[_key(rf)] = ToolStrategy(schema=response_schema(rf))
    return found


def effective(
    rf: ResponseFormatSpec, model: Any, tools: list[Any], requested: Any = None
) -> Strategy:
    """The strategy used for a call: the auto choice made as LangChain makes it, by the
    model's profile (or name) and the tools it is given. ``requested``: the request's
    ``response_format`` when ``wrap_model_call`` middleware may have replaced it (None:
    the agent's own)."""
    from langchain.agents.factory import _supports_provider_strategy
    from langchain.agents.structured_output import (
        AutoStrategy,
        ProviderStrategy,
        ToolStrategy,
    )

    initial = strategy_of(rf)
    found = initial if requested is None else requested
    if not isinstance(found, AutoStrategy | ToolStrategy | ProviderStrategy):
        found = AutoStrategy(schema=found)  # a bare schema, as LangChain normalizes it
    if not isinstance(found, AutoStrategy):
        return found
    if _supports_provider_strategy(model, tools=tools):
        return ProviderStrategy(schema=found.schema)
    if found is initial:
        return _auto_tool_strategy(rf)
    return ToolStrategy(schema=found.schema)


def bind(
    rf: ResponseFormatSpec,
    model: Any,
    tools: list[Any],
    *,
    tool_choice: Any = None,
    settings: dict[str, Any] | None = None,
    requested: Any = None,
) -> tuple[Any, Strategy]:
    """The model bound for one call, and the strategy used: LangChain's
    ``_get_bound_model`` for an agent with a ``response_format`` (``requested``: see
    ``effective``)."""
    from langchain.agents.factory import _is_openai_compatible_model
    from langchain.agents.structured_output import ProviderStrategy

    settings = dict(settings or {})
    used = effective(rf, model, tools, requested)
    if isinstance(used, ProviderStrategy):
        kwargs: dict[str, Any] = {**used.to_model_kwargs(), **settings}
        if _is_openai_compatible_model(model) and not getattr(model, "use_responses_api", False):
            kwargs["strict"] = True
            # an OpenAI tool dict is bound as it is; its function part is made strict, as
            # the tool object it stands for would be
            tools = [_function_of(t) for t in tools]
        return model.bind_tools(tools, **kwargs), used
    structured = output_tools(rf)
    wanted = {s.name for s in used.schema_specs}
    final = [*tools, *(b.tool for name, b in structured.items() if name in wanted)]
    choice = "any" if structured else tool_choice
    return model.bind_tools(final, tool_choice=choice, **settings), used


def _function_of(tool: Any) -> Any:
    if isinstance(tool, dict) and tool.get("type") == "function" and "function" in tool:
        return tool["function"]
    return tool


def outcome(rf: ResponseFormatSpec, used: Strategy, reply: Any) -> StructuredOutcome | None:
    """What LangChain's model node makes of ``reply`` (a LangChain AIMessage): the
    structured response and the tool messages answering structured calls; None when the
    reply has nothing structured. An error LangChain would raise is raised."""
    from langchain.agents.structured_output import (
        ProviderStrategy,
        ProviderStrategyBinding,
        StructuredOutputValidationError,
    )

    if isinstance(used, ProviderStrategy):
        if reply.tool_calls:
            return None
        binding = ProviderStrategyBinding.from_schema_spec(used.schema_spec)
        try:
            value = binding.parse(reply)
        except Exception as exc:
            name = getattr(used.schema_spec.schema, "__name__", "response_format")
            raise StructuredOutputValidationError(name, exc, reply) from exc
        return StructuredOutcome(response=to_json(value), given=True)
    structured = output_tools(rf)
    calls = [c for c in reply.tool_calls if c["name"] in structured]
    if not calls:
        return None
    if len(calls) > 1:
        return _several_calls(used, calls, reply)
    call = calls[0]
    try:
        value = structured[call["name"]].parse(call["args"])
    except Exception as exc:
        error = StructuredOutputValidationError(call["name"], exc, reply)
        return StructuredOutcome(tool_messages=[_retry_message(used, error, call, exc)])
    content = used.tool_message_content or f"Returning structured response: {value}"
    answer = ToolMessage(content=content, tool_call_id=call["id"], name=call["name"])
    return StructuredOutcome(tool_messages=[answer], response=to_json(value), given=True)


def _several_calls(used: Strategy, calls: list[Any], reply: Any) -> StructuredOutcome:
    from langchain.agents.structured_output import MultipleStructuredOutputsError

    error = MultipleStructuredOutputsError([c["name"] for c in calls], reply)
    messages = [_retry_message(used, error, c, None) for c in calls]
    return StructuredOutcome(tool_messages=messages)


def _retry_message(
    used: Strategy, error: Exception, call: Any, cause: Exception | None
) -> ToolMessage:
    """The tool message to retry on, or the error raised when ``handle_errors`` says no
    retry (LangChain's ``_handle_structured_output_error``)."""
    from langchain.agents.factory import _handle_structured_output_error

    retry, text = _handle_structured_output_error(error, used)
    if not retry:
        raise error from cause
    # status stays "success": LangChain's retry message is a plain ToolMessage
    return ToolMessage(content=text, tool_call_id=call["id"], name=call["name"])


def to_json(value: Any) -> Any:
    """The structured response as JSON, as stored with the task."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return TypeAdapter(type(value)).dump_python(value, mode="json")
    return TypeAdapter(Any).dump_python(value, mode="json")


def from_json(schema: Any, value: Any) -> Any:
    """The structured response as LangChain returns it: an instance of a pydantic model
    or dataclass schema; a dict for a TypedDict or a JSON schema. For a union, the
    member pydantic's (smart mode) union validation of the JSON picks: the one the
    answer's fields fit."""
    if value is None or isinstance(schema, dict):
        return value
    if typing.get_origin(schema) in (typing.Union, types.UnionType):
        return TypeAdapter(schema).validate_python(value)
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return schema.model_validate(value)
    if dataclasses.is_dataclass(schema):
        return TypeAdapter(schema).validate_python(value)
    return value

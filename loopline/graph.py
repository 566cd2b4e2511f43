"""The compiled graph LangChain's ``create_agent`` builds for the same arguments.

A loopline agent runs on the bus, but to every caller it is the graph ``create_agent``
returns: its ``get_graph()``, ``nodes``, ``stream_channels``, ``builder``, channels and
schemas are read from LangChain's own graph, built once and lazily from the agent's
arguments. That graph is never run: its model is one that cannot answer (the graph's
shape does not depend on the model), and execution stays on the bus.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# bound at import: LangChain's own function, whatever later rebinds the name (a harness
# that runs LangChain's tests on loopline swaps ``langchain.agents.create_agent``)
from langchain.agents.factory import create_agent as langchain_create_agent

GRAPH_ATTRIBUTES = frozenset(
    {
        "builder",
        "cache",
        "nodes",
        "channels",
        "stream_channels",
        "stream_channels_asis",
        "stream_channels_list",
        "input_channels",
        "output_channels",
        "stream_mode",
        "trigger_to_nodes",
        "interrupt_before_nodes",
        "interrupt_after_nodes",
        "retry_policy",
        "cache_policy",
        "step_timeout",
        "stream_eager",
        "schema_to_mapper",
        "context_schema",
        "get_context_jsonschema",
        "get_subgraphs",
        "aget_subgraphs",
        "aget_graph",
        "stream_transformers",
    }
)
"""What code reads off a compiled graph beyond ``Runnable``'s interface, answered by
LangChain's graph for the same arguments (``Agent.__getattr__``)."""

REFUSED_KEYWORDS: dict[str, str] = {
    "interrupt_before": (
        "interrupt_before (LangGraph's static breakpoints) is not implemented on the bus; "
        "HumanInTheLoopMiddleware(interrupt_on=...) or interrupt() in a hook or tool stop "
        "a run for a human"
    ),
    "interrupt_after": (
        "interrupt_after (LangGraph's static breakpoints) is not implemented on the bus; "
        "HumanInTheLoopMiddleware(interrupt_on=...) or interrupt() in a hook or tool stop "
        "a run for a human"
    ),
    "debug": (
        "debug=True (LangGraph's printed trace of every step) is not implemented; "
        "astream_task_events or `loopline tasks events TASK` show every step's events"
    ),
}
"""``create_agent`` keywords LangChain takes that the bus does not implement, with why and
what to use instead: a value other than the default is refused, never ignored."""


def refuse_unimplemented(given: dict[str, Any]) -> None:
    """Raise for a keyword of ``REFUSED_KEYWORDS`` given anything but its default (None,
    an empty list, False)."""
    for name, value in given.items():
        if value:
            raise ValueError(f"create_agent({name}={value!r}): {REFUSED_KEYWORDS[name]}")


@dataclass(frozen=True)
class GraphArguments:
    """The ``create_agent`` arguments that shape LangChain's graph."""

    tools: Sequence[Any] = ()
    system_prompt: Any = None
    middleware: Sequence[Any] = ()
    response_format: Any = None
    state_schema: Any = None
    context_schema: Any = None
    name: str | None = None
    cache: Any = None
    store: Any = None
    checkpointer: Any = field(default=None, compare=False)
    transformers: Sequence[Any] = ()
    """``create_agent(transformers=...)``: LangChain registers them on its graph's
    ``stream_transformers``, which the agent's v3 streaming reads."""


def reference_graph(arguments: GraphArguments) -> Any:
    """LangChain's compiled graph for ``arguments``, with a model that cannot answer."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    return langchain_create_agent(
        GenericFakeChatModel(messages=iter(())),
        tools=[_tool_object(t) for t in arguments.tools],
        system_prompt=arguments.system_prompt,
        middleware=[_middleware_object(m) for m in arguments.middleware],
        response_format=arguments.response_format,
        state_schema=arguments.state_schema,
        context_schema=arguments.context_schema,
        checkpointer=arguments.checkpointer,
        store=arguments.store,
        name=arguments.name,
        cache=arguments.cache,
        transformers=list(arguments.transformers) or None,
    )


def _tool_object(tool: Any) -> Any:
    """A tool as LangChain takes it: an import path (``package.module:name``) resolved."""
    if isinstance(tool, str):
        from services.spec import toolbox

        return toolbox.resolve(tool)
    return tool


def _middleware_object(middleware: Any) -> Any:
    """A middleware as LangChain takes it: a spec (a dict or ``MiddlewareSpec``) built."""
    from langchain.agents.middleware import AgentMiddleware

    if isinstance(middleware, AgentMiddleware):
        return middleware
    from contracts.agent import MiddlewareSpec
    from services.spec.middleware import from_spec, to_spec

    spec = middleware if isinstance(middleware, MiddlewareSpec) else to_spec(middleware)
    built = from_spec(spec)
    if not isinstance(built, AgentMiddleware):
        raise TypeError(
            f"middleware {spec.type} has no LangChain graph form "
            "(it is not an AgentMiddleware), so the agent's graph cannot be drawn"
        )
    return built

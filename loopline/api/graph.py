"""A deployed agent's graph as LangGraph draws it (``GET /assistants/{id}/graph``).

loopline runs no LangGraph graph, so the drawing is that of LangChain's own
``create_agent`` for the same shape: the agent's tools (stand-ins with their names) and its
middleware rebuilt as LangChain's classes of the same names (the nodes and edges depend on
which hooks each class has, and on the tools it brings). An agent whose middleware is not
one of LangChain's classes (an import path, an in-process object, one of loopline's own)
cannot be drawn this way and is refused, as LangGraph's server refuses a graph that does
not support visualization.
"""

from __future__ import annotations

from typing import Any

import langchain.agents.middleware as langchain_middleware
from langchain_core.tools import BaseTool, StructuredTool

from contracts.agent import AgentSpec, MiddlewareSpec
from loopline.graph import GraphArguments, reference_graph


class NotDrawable(ValueError):
    """The agent's graph cannot be drawn as LangChain's (422)."""


def graph_json(spec: AgentSpec, xray: bool | int = False) -> dict[str, Any]:
    """The JSON of ``get_graph(xray=...)`` of LangChain's agent of this shape, without
    the nodes' class paths (LangGraph's server leaves them out too)."""
    middleware = [as_langchain_middleware(m) for m in spec.middleware]
    agent = reference_graph(GraphArguments(tools=stand_in_tools(spec), middleware=middleware))
    drawn: dict[str, Any] = agent.get_graph(xray=xray).to_json()
    for node in drawn.get("nodes", []):
        data = node.get("data")
        if isinstance(data, dict):
            data.pop("id", None)
    return drawn


def stand_in_tools(spec: AgentSpec) -> list[BaseTool]:
    """Stand-ins named as the agent's tools (the tools node lists their names)."""
    names = [s["function"]["name"] for s in spec.tool_schemas or () if "function" in s]
    if not names:
        names = [ref.rpartition(":")[2].rpartition(".")[2] for ref in spec.tools]
    return [
        StructuredTool.from_function(
            func=_never_called, name=name, description=name, args_schema={"type": "object"}
        )
        for name in names
    ]


def _never_called(**kwargs: Any) -> None:
    raise RuntimeError("a stand-in tool of a drawing is never called")


def as_langchain_middleware(spec: MiddlewareSpec) -> Any:
    """LangChain's middleware class the spec names, made with its parameters
    (``NotDrawable`` for another class)."""
    cls = getattr(langchain_middleware, spec.type, None)
    if not isinstance(cls, type) or not issubclass(cls, langchain_middleware.AgentMiddleware):
        raise NotDrawable(
            f"The graph does not support visualization: middleware {spec.type} is not one of "
            "LangChain's classes"
        )
    try:
        return cls(**spec.params)
    except (TypeError, ValueError) as exc:
        raise NotDrawable(
            f"The graph does not support visualization: middleware {spec.type}: {exc}"
        ) from exc

"""``/assistants``: the deployed agents (``loopline deploy``), by name, as LangGraph's
assistants (``assistant_id`` and ``graph_id`` are the agent's name)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from contracts.agent import DeployedAgent
from loopline.api.gateway import body_of, tenant_of
from loopline.api.graph import NotDrawable, graph_json
from loopline.api.params import (
    AssistantCount,
    AssistantSearch,
    GraphQuery,
    NoParams,
    SubgraphsQuery,
    parse,
)
from loopline.api.wire import BadRequest, iso

MESSAGES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"messages": {"type": "array", "items": {"type": "object"}}},
    "required": ["messages"],
}


def assistant_json(agent: DeployedAgent) -> dict[str, Any]:
    at = iso(agent.deployed_at)
    return {
        "assistant_id": agent.name,
        "graph_id": agent.name,
        "name": agent.name,
        "description": None,
        "config": {},
        "context": {},
        "metadata": {
            "created_by": "system",
            "loopline_ref": agent.ref,
            "model": agent.spec.model.name,
            "tools": list(agent.spec.tools),
        },
        "version": agent.version,
        "created_at": at,
        "updated_at": at,
    }


def _matches(agent: DeployedAgent, wanted: AssistantCount) -> bool:
    """``graph_id`` equal, ``name`` contained, every ``metadata`` pair equal."""
    shown = assistant_json(agent)
    if wanted.graph_id and wanted.graph_id != agent.name:
        return False
    if wanted.name and wanted.name not in agent.name:
        return False
    return all(shown["metadata"].get(k) == v for k, v in wanted.metadata.items())


async def _found(request: Request, wanted: AssistantCount) -> list[dict[str, Any]]:
    tenant = await tenant_of(request)
    agents = [a for a in await tenant.client.list_agents() if _matches(a, wanted)]
    return [assistant_json(a) for a in agents]


async def search(request: Request) -> Response:
    """``POST /assistants/search``: filtered, sorted (``sort_by``, ``sort_order``; by
    creation, newest first, as LangGraph's server), a page of them, ``select``'s fields."""
    wanted = parse(AssistantSearch, await body_of(request))
    found = await _found(request, wanted)
    key = wanted.sort_by or "created_at"
    found.sort(key=lambda a: a[key], reverse=(wanted.sort_order or "desc") == "desc")
    page = found[wanted.offset : wanted.offset + wanted.limit]
    if wanted.select:
        page = [{k: a[k] for k in wanted.select} for a in page]
    return JSONResponse(page)


async def count(request: Request) -> Response:
    """``POST /assistants/count``: how many match (the filters of ``search``)."""
    wanted = parse(AssistantCount, await body_of(request))
    return JSONResponse(len(await _found(request, wanted)))


async def graph(request: Request) -> Response:
    """``GET /assistants/{id}/graph``: the agent's graph as LangGraph draws it
    (``loopline.api.graph``)."""
    query = parse(GraphQuery, request.query_params)
    if query.xray is not False and not isinstance(query.xray, bool) and query.xray <= 0:
        raise BadRequest("Invalid xray value")
    tenant = await tenant_of(request)
    agent = await tenant.assistant(request.path_params["assistant_id"])
    try:
        drawn = graph_json(agent.spec, query.xray)
    except NotDrawable as exc:
        raise BadRequest(str(exc)) from exc
    return JSONResponse(drawn)


async def subgraphs(request: Request) -> Response:
    """``GET /assistants/{id}/subgraphs``: a loopline agent has none (sub-agents run
    inside tools), so ``{}``, as LangGraph's server answers for an agent without."""
    parse(SubgraphsQuery, request.query_params)
    tenant = await tenant_of(request)
    await tenant.assistant(request.path_params["assistant_id"])  # 404 for an unknown one
    return JSONResponse({})


async def get(request: Request) -> Response:
    parse(NoParams, request.query_params)
    tenant = await tenant_of(request)
    agent = await tenant.assistant(request.path_params["assistant_id"])
    return JSONResponse(assistant_json(agent))


async def schemas(request: Request) -> Response:
    parse(NoParams, request.query_params)
    tenant = await tenant_of(request)
    agent = await tenant.assistant(request.path_params["assistant_id"])
    context: dict[str, Any] = {"type": "object"}
    return JSONResponse(
        {
            "graph_id": agent.name,
            "input_schema": MESSAGES_SCHEMA,
            "output_schema": MESSAGES_SCHEMA,
            "state_schema": MESSAGES_SCHEMA,
            "config_schema": {"type": "object"},
            "context_schema": context if "context" in agent.overridable else None,
        }
    )

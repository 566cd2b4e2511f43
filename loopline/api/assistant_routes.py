"""``/assistants``: the deployed agents (``loopline deploy``), by name, as LangGraph's
system assistants (``assistant_id`` and ``graph_id`` are the agent's name), and the
assistants created over HTTP, versioned configurations of them (``loopline.api.assistants``):
create, update (a new version), versions, set the latest, delete, search, count."""

from __future__ import annotations

import time
import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from contracts.agent import DeployedAgent
from loopline.api.assistants import Assistant, AssistantVersion
from loopline.api.gateway import body_of, tenant_of
from loopline.api.graph import NotDrawable, graph_json
from loopline.api.params import (
    AssistantCount,
    AssistantCreate,
    AssistantLatest,
    AssistantPatch,
    AssistantSearch,
    AssistantVersions,
    GraphQuery,
    NoParams,
    SubgraphsQuery,
    parse,
)
from loopline.api.tenant import NotFound, Tenant
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


def version_json(version: AssistantVersion) -> dict[str, Any]:
    """One version of a created assistant, as ``get_versions`` shows it."""
    return {
        "assistant_id": version.assistant_id,
        "version": version.version,
        "graph_id": version.graph_id,
        "config": version.config,
        "context": version.context,
        "metadata": version.metadata,
        "created_at": iso(version.created_at),
        "name": version.name,
        "description": version.description,
    }


def created_json(assistant: Assistant) -> dict[str, Any]:
    """A created assistant as it is now (its latest version)."""
    shown = version_json(assistant.latest)
    shown["created_at"] = iso(assistant.created_at)
    shown["updated_at"] = iso(assistant.updated_at)
    return shown


def _matches(shown: dict[str, Any], wanted: AssistantCount) -> bool:
    """``graph_id`` equal, ``name`` contained (any case), every ``metadata`` pair equal."""
    if wanted.graph_id and wanted.graph_id != shown["graph_id"]:
        return False
    if wanted.name and wanted.name.lower() not in str(shown["name"]).lower():
        return False
    return all(shown["metadata"].get(k) == v for k, v in wanted.metadata.items())


async def _found(request: Request, wanted: AssistantCount) -> list[dict[str, Any]]:
    """The deployed agents' assistants and the created ones that match."""
    tenant = await tenant_of(request)
    shown = [assistant_json(a) for a in await tenant.client.list_agents()]
    shown += [created_json(a) for a in await tenant.assistants.all()]
    return [a for a in shown if _matches(a, wanted)]


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
    assistant_id = request.path_params["assistant_id"]
    created = await tenant.assistants.get(assistant_id)
    if created is not None:
        return JSONResponse(created_json(created))
    return JSONResponse(assistant_json(await tenant.deployed_agent(assistant_id)))


async def create(request: Request) -> Response:
    """``POST /assistants``: version 1 of a configuration of the deployed agent
    ``graph_id`` (404 for no such agent; 409 for an id taken, unless ``if_exists`` says
    ``do_nothing``: then the existing one)."""
    tenant = await tenant_of(request)
    body = parse(AssistantCreate, await body_of(request))
    await _graph(tenant, body.graph_id)
    assistant_id = body.assistant_id or str(uuid.uuid4())
    first = AssistantVersion(
        assistant_id=assistant_id,
        graph_id=body.graph_id,
        version=1,
        config=body.config.model_dump(exclude_defaults=True),
        context=dict(body.context),
        metadata=dict(body.metadata),
        name=body.name,
        description=body.description,
    )
    created = await tenant.assistants.create(first)
    if created is None:
        existing = await tenant.assistants.get(assistant_id)
        if body.if_exists == "do_nothing" and existing is not None:
            return JSONResponse(created_json(existing))
        return JSONResponse({"detail": f"Assistant {assistant_id} already exists"}, status_code=409)
    return JSONResponse(created_json(created))


async def _graph(tenant: Tenant, graph_id: str) -> None:
    """404 for a ``graph_id`` that names no deployed agent, as LangGraph's server."""
    try:
        await tenant.deployed_agent(graph_id)
    except NotFound as exc:
        names = sorted(a.name for a in await tenant.client.list_agents())
        raise NotFound(f"Graph {graph_id!r} not found. Expected one of: {names}") from exc


async def _created(tenant: Tenant, assistant_id: str) -> Assistant:
    """A created assistant (404 for none; 422 for a deployed agent's, which only
    ``loopline deploy`` changes)."""
    found = await tenant.assistants.get(assistant_id)
    if found is not None:
        return found
    try:
        await tenant.deployed_agent(assistant_id)
    except (NotFound, BadRequest):
        raise NotFound(f"Assistant {assistant_id} not found") from None
    raise BadRequest(
        f"{assistant_id!r} is a deployed agent, changed by `loopline deploy`; "
        "create an assistant of it (graph_id) to configure it over HTTP"
    )


async def update(request: Request) -> Response:
    """``PATCH /assistants/{id}``: the next version, made the latest."""
    tenant = await tenant_of(request)
    patch = parse(AssistantPatch, await body_of(request))
    now = await _created(tenant, request.path_params["assistant_id"])
    if patch.graph_id:
        await _graph(tenant, patch.graph_id)
    latest = now.latest
    config = (
        latest.config if patch.config is None else patch.config.model_dump(exclude_defaults=True)
    )
    version = AssistantVersion(
        assistant_id=latest.assistant_id,
        graph_id=patch.graph_id or latest.graph_id,
        version=0,  # the next one, given as it is stored
        config=config,
        context=latest.context if patch.context is None else dict(patch.context),
        metadata={**latest.metadata, **patch.metadata},
        name=patch.name or latest.name,
        description=latest.description if patch.description is None else patch.description,
        created_at=time.time(),
    )
    updated = await tenant.assistants.add_version(version)
    if updated is None:  # deleted meanwhile
        raise NotFound(f"Assistant {latest.assistant_id} not found")
    return JSONResponse(created_json(updated))


async def versions(request: Request) -> Response:
    """``POST /assistants/{id}/versions``: newest first, those whose metadata has the
    pairs asked."""
    tenant = await tenant_of(request)
    wanted = parse(AssistantVersions, await body_of(request))
    await _created(tenant, request.path_params["assistant_id"])
    found = [
        version_json(v)
        for v in await tenant.assistants.versions(request.path_params["assistant_id"])
        if all(v.metadata.get(k) == x for k, x in wanted.metadata.items())
    ]
    return JSONResponse(found[wanted.offset : wanted.offset + wanted.limit])


async def set_latest(request: Request) -> Response:
    """``POST /assistants/{id}/latest``: make an earlier (or later) version current."""
    tenant = await tenant_of(request)
    body = parse(AssistantLatest, await body_of(request))
    assistant_id = request.path_params["assistant_id"]
    await _created(tenant, assistant_id)
    if not await tenant.assistants.set_latest(assistant_id, body.version):
        raise NotFound(f"Version {body.version} not found for assistant {assistant_id}")
    found = await tenant.assistants.get(assistant_id)
    if found is None:
        raise NotFound(f"Assistant {assistant_id} not found")
    return JSONResponse(created_json(found))


async def delete(request: Request) -> Response:
    """``DELETE /assistants/{id}``: the assistant and its versions (``delete_threads``
    is not implemented); its runs that are going go on."""
    parse(NoParams, request.query_params)
    tenant = await tenant_of(request)
    assistant_id = request.path_params["assistant_id"]
    await _created(tenant, assistant_id)
    if not await tenant.assistants.delete(assistant_id):
        raise NotFound(f"Assistant with ID {assistant_id} not found")
    return Response(status_code=204)


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

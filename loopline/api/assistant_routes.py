"""``/assistants``: the deployed agents (``loopline deploy``), by name, as LangGraph's
assistants (``assistant_id`` and ``graph_id`` are the agent's name)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from contracts.agent import DeployedAgent
from loopline.api.gateway import body_of, tenant_of
from loopline.api.wire import iso

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


def _matches(agent: DeployedAgent, body: dict[str, Any]) -> bool:
    shown = assistant_json(agent)
    if body.get("graph_id") and body["graph_id"] != agent.name:
        return False
    if body.get("name") and body["name"] not in agent.name:
        return False
    wanted = body.get("metadata") or {}
    return all(shown["metadata"].get(k) == v for k, v in wanted.items())


async def search(request: Request) -> Response:
    tenant = await tenant_of(request)
    body = await body_of(request)
    limit, offset = int(body.get("limit") or 10), int(body.get("offset") or 0)
    agents = [a for a in await tenant.client.list_agents() if _matches(a, body)]
    return JSONResponse([assistant_json(a) for a in agents[offset : offset + limit]])


async def get(request: Request) -> Response:
    tenant = await tenant_of(request)
    agent = await tenant.assistant(request.path_params["assistant_id"])
    return JSONResponse(assistant_json(agent))


async def schemas(request: Request) -> Response:
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

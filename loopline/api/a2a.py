"""``/a2a/{assistant_id}``: each deployed agent as an Agent2Agent (A2A) agent over
JSON-RPC 2.0, as LangGraph's Agent Server serves its assistants.

- ``GET /a2a/{id}``, ``/a2a/{id}/.well-known/agent-card.json`` (and ``agent.json``),
  ``/.well-known/agent-card.json?assistant_id=``: the agent card.
- ``POST /a2a/{id}``: ``message/send`` (``SendMessage``) runs the agent on the message's
  context (a thread, made when new) and answers with the task when the run ends or asks a
  human; ``message/stream`` (``SendStreamingMessage``) streams the task, the reply so far
  as ``working`` updates, the answer as an artifact, then the final status;
  ``tasks/get`` (``GetTask``) the task's state and history; ``tasks/cancel``
  (``CancelTask``) stops its run; ``ListTasks`` the tasks of a context;
  ``GetExtendedAgentCard`` the card.

The A2A 1.0 names answer in 1.0's shape, the slash names (A2A 0.3) in 0.3's
(``agent``, ``completed``, no ``{"task": ...}`` wrapper), as LangGraph's server answers.
Unlike LangGraph's server, where an assistant id is a UUID, an agent is named by its
loopline name (the ``assistant_id`` of ``/assistants``). This module is the routes, the
JSON-RPC envelope and the card; the methods are in ``a2a_methods``, their params and
A2A's codes in ``a2a_rpc``, the task model in ``a2a_tasks``.
"""

from __future__ import annotations

import json
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from contracts.agent import DeployedAgent
from loopline.api import a2a_methods as methods
from loopline.api import a2a_rpc as rpc
from loopline.api import a2a_tasks as tasks
from loopline.api.a2a_rpc import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    LEGACY_METHODS,
    METHOD_NOT_FOUND,
    METHODS,
    MODES,
    PARSE_ERROR,
    RpcError,
    spec_format,
)
from loopline.api.gateway import tenant_of
from loopline.api.tenant import NotFound, Tenant


def _rpc_error(code: int, message: str, rpc_id: Any = None) -> Response:
    return JSONResponse(
        {"jsonrpc": "2.0", "id": rpc_id, "error": {"code": code, "message": message}}
    )


def _refused(message: str, status: int) -> Response:
    body = json.dumps({"error": message}, separators=(",", ":"))
    return Response(body, status, media_type="application/json")


def _accepts(accept: str, media_type: str) -> bool:
    for item in accept.lower().split(","):
        candidate = item.split(";", 1)[0].strip()
        if candidate in ("*/*", media_type) or (
            candidate.endswith("/*") and media_type.startswith(candidate[:-1])
        ):
            return True
    return False


async def _agent(tenant: Tenant, assistant_id: str) -> DeployedAgent:
    try:
        return await tenant.assistant(assistant_id)
    except NotFound as exc:
        raise RpcError(INVALID_PARAMS, f"Assistant '{assistant_id}' not found") from exc


# -- routes ----------------------------------------------------------------------------


async def endpoint(request: Request) -> Response:
    """``/a2a/{assistant_id}``: GET the card, POST a JSON-RPC request."""
    if request.method == "GET":
        return await card(request)
    if request.method != "POST":
        return Response(status_code=405)
    tenant = await tenant_of(request)
    try:
        message = json.loads(await request.body())
    except ValueError:
        return _rpc_error(PARSE_ERROR, "Invalid JSON payload")
    refused = _refused_envelope(message, request.headers.get("accept") or "")
    if refused is not None:
        return refused
    rpc_id, asked = message["id"], message["method"]
    legacy = asked in LEGACY_METHODS
    method = LEGACY_METHODS.get(asked, asked)
    assistant_id = request.path_params["assistant_id"]
    params = message.get("params", {})
    try:
        agent = await _agent(tenant, assistant_id)
        if method == "SendStreamingMessage":
            return await methods.stream(request, tenant, agent, params, rpc_id, legacy)
        result = await _answer(request, tenant, agent, method, params)
    except RpcError as exc:
        return _rpc_error(exc.code, str(exc), rpc_id)
    body = {"jsonrpc": "2.0", "id": rpc_id, "result": result}
    return JSONResponse(spec_format(body) if legacy else body)


def _refused_envelope(message: Any, accept: str) -> Response | None:
    """What is wrong with a JSON-RPC message before its method runs, answered as
    LangGraph's server answers it (None: a request to serve)."""
    if not isinstance(message, dict):
        return _rpc_error(INVALID_REQUEST, "Invalid message format: expected object")
    rpc_id, method = message.get("id"), message.get("method")
    if message.get("jsonrpc") != "2.0":
        text = "Invalid JSON-RPC message: missing or invalid jsonrpc version"
        return _rpc_error(INVALID_REQUEST, text, rpc_id)
    if rpc_id is not None and not isinstance(rpc_id, str | int | float):
        text = "Invalid JSON-RPC request: 'id' must be a string, number, or null"
        return _rpc_error(INVALID_REQUEST, text)
    if method is not None and not isinstance(method, str):
        return _rpc_error(METHOD_NOT_FOUND, "Method not found: method must be a string", rpc_id)
    if method is not None and LEGACY_METHODS.get(method, method) not in METHODS:
        return _rpc_error(METHOD_NOT_FOUND, f"Method not found: {method}", rpc_id)
    streaming = method == "message/stream" or method == "SendStreamingMessage"
    wanted = "text/event-stream" if streaming else "application/json"
    if not _accepts(accept, wanted):
        return _refused(
            f"Accept header must include {wanted}" + (" for streaming" * streaming), 400
        )
    if rpc_id is not None and method:
        return None
    if rpc_id is not None and ("result" in message or "error" in message):
        return Response(status_code=202)  # a response to a request this server never sends
    text = "Invalid message format: must be a JSON-RPC request or notification"
    return _rpc_error(INVALID_REQUEST, text)


async def _answer(
    request: Request, tenant: Tenant, agent: DeployedAgent, method: str, params: Any
) -> dict[str, Any]:
    if method == "SendMessage":
        return await methods.send(request, tenant, agent, rpc.send_params(params))
    if method == "GetTask":
        return await methods.get(request, tenant, agent, rpc.task_params(tasks.GetParams, params))
    if method == "CancelTask":
        return await methods.cancel(
            request, tenant, agent, rpc.task_params(tasks.CancelParams, params)
        )
    if method == "ListTasks":
        return await methods.list_tasks(request, tenant, agent, rpc.list_params(params))
    assert method == "GetExtendedAgentCard"
    return agent_card(request, agent)


async def card(request: Request) -> Response:
    """The agent card of the path's agent, or of ``?assistant_id=`` at the domain root."""
    assistant_id = request.path_params.get("assistant_id") or request.query_params.get(
        "assistant_id"
    )
    if not assistant_id:
        error = {
            "code": INVALID_PARAMS,
            "message": "Missing required query parameter: assistant_id",
        }
        return JSONResponse({"error": error}, status_code=400)
    tenant = await tenant_of(request)
    try:
        agent = await _agent(tenant, assistant_id)
    except RpcError as exc:
        return JSONResponse({"error": {"code": exc.code, "message": str(exc)}}, status_code=400)
    return JSONResponse(agent_card(request, agent))


def _version() -> str:
    try:
        return version("loopline")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "unknown"


def agent_card(request: Request, agent: DeployedAgent) -> dict[str, Any]:
    """The card LangGraph's server writes for an assistant: one skill (the agent),
    JSON-RPC at ``/a2a/{name}`` on the host the client called, streaming, no push."""
    base = str(request.base_url).rstrip("/")
    url = f"{base}/a2a/{agent.name}"
    description = f"{agent.name} assistant"
    history_scope = {
        "uri": tasks.HISTORY_SCOPE_URI,
        "description": "Choose task-only or full-context response history",
        "required": False,
        "params": {
            "header": tasks.HISTORY_SCOPE_HEADER,
            "values": ["context", "task"],
            "default": "context",
            "methods": ["SendMessage", "GetTask", "ListTasks"],
        },
    }
    skill = {
        "id": f"{agent.name}-main",
        "name": f"{agent.name} Capabilities",
        "description": description,
        "tags": ["assistant", "langgraph"],
        "examples": [],
        "inputModes": MODES,
        "outputModes": MODES,
        "metadata": {
            "inputSchema": {
                "required": ["messages"],
                "properties": ["messages"],
                "supportsA2A": True,
            }
        },
    }
    return {
        "name": agent.name,
        "description": description,
        "url": url,
        "supportedInterfaces": [
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ],
        "capabilities": {
            "streaming": True,
            "pushNotifications": False,
            "stateTransitionHistory": False,
            "extensions": [history_scope],
        },
        "defaultInputModes": MODES,
        "defaultOutputModes": MODES,
        "skills": [skill],
        "version": _version(),
    }

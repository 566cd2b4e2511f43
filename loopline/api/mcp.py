"""``/mcp``: every deployed agent as a tool of a Model Context Protocol server, as
LangGraph's Agent Server offers its assistants (stateless Streamable HTTP, answers in
``application/json`` only).

One JSON-RPC request per POST: ``initialize`` (the protocol version the client asks
for, when known), ``ping``, ``tools/list`` (one tool per agent, taking the user's
message as a string) and ``tools/call`` (a stateless run of the agent, waited for; its
final values as the tool's text, or ``isError`` for a run that failed or an input the
gateway refuses). A notification or a response is acknowledged with 202. There is no
session: ``GET`` (a server-to-client stream) answers 405 and ``DELETE`` 404, as
LangGraph's server does. Methods it does not serve (resources, prompts, ...) get
JSON-RPC's "method not found"; parameters it does not act on are refused with
"invalid params" naming them.
"""

from __future__ import annotations

import json
import re
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from pydantic import Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from contracts.agent import DeployedAgent
from loopline.api.gateway import gateway_of, tenant_of, unless_stopping
from loopline.api.params import Params, reasons
from loopline.api.runs import RunRequest, start_run, wait_for
from loopline.api.tenant import Tenant
from loopline.api.wire import BadRequest

PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
"""The MCP versions served (those of LangGraph's server); the newest is offered to a
client that asks for another."""

PAGE_SIZE = 100
"""Tools per ``tools/list`` page (``nextCursor`` when a page is full)."""

METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602

MESSAGE_DESCRIPTION = "The user message to send to the agent."
TOOL_INPUT_SCHEMA: dict[str, Any] = {
    "properties": {
        "messages": {"type": "string", "title": "Messages", "description": MESSAGE_DESCRIPTION}
    },
    "required": ["messages"],
    "title": "InputSchema",
    "type": "object",
}
"""A tool's input: LangGraph's server shows an agent's message list to a model as one
string, the user's message."""

TOOL_ANNOTATIONS = {
    "readOnlyHint": False,
    "destructiveHint": False,
    "idempotentHint": False,
    "openWorldHint": True,
}

_INVALID_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_\-.]")


class ListParams(Params):
    """``tools/list``: a page from ``cursor`` (an offset, as LangGraph's server)."""

    cursor: str | int | None = None
    meta: dict[str, Any] | None = Field(None, alias="_meta")
    """The protocol's request metadata: nothing in it changes a stateless answer."""


class CallParams(Params):
    """``tools/call``: the tool (agent), its arguments (the run's input) and the run's
    ``context``. ``_meta`` is accepted; progress notifications are not sent (a JSON
    answer carries none, on LangGraph's server either)."""

    name: str | None = None
    arguments: dict[str, Any] = Field(default_factory=dict)
    context: dict[str, Any] | None = None
    meta: dict[str, Any] | None = Field(None, alias="_meta")


class RpcError(Exception):
    """A JSON-RPC error answer (HTTP 200 with ``error``)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def tool_name(agent_name: str) -> str:
    """An agent's name as an MCP tool name (``^[a-zA-Z0-9_\\-.]{1,128}$``)."""
    name = re.sub(r"\s+", "_", agent_name.strip())
    return _INVALID_NAME_CHARS.sub("", name)[:128]


def _server_version() -> str:
    try:
        return version("loopline")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "unknown"


def _refused(message: str, status: int = 400) -> Response:
    return Response(json.dumps({"error": message}), status, media_type="application/json")


async def endpoint(request: Request) -> Response:
    """``/mcp``: POST a JSON-RPC message; GET and DELETE as a stateless server answers."""
    if request.method == "GET":
        return Response(status_code=405)  # no server-to-client stream
    if request.method == "DELETE":
        return Response(status_code=404)  # no session to end
    tenant = await tenant_of(request)
    try:
        message = json.loads(await request.body())
    except ValueError:
        return _refused("Invalid JSON")
    accept = request.headers.get("accept", "")
    if "application/json" not in accept and "text/event-stream" not in accept:
        return _refused("Accept header must include application/json or text/event-stream")
    if not isinstance(message, dict):
        return _refused("Invalid message format.")
    if message.get("jsonrpc") != "2.0":
        return _refused("Invalid JSON-RPC message. Missing or invalid jsonrpc version.")
    rpc_id, method = message.get("id"), message.get("method")
    if rpc_id is None:
        if method:
            return Response(status_code=202)  # a notification: nothing to answer
        return _refused(
            "Invalid message format. A message is to be either a JSON-RPC request, "
            "response, or notification."
        )
    if not method:
        return Response(status_code=202)  # a response to a request this server never sends
    try:
        result = await _answer(request, tenant, str(method), message.get("params") or {})
    except RpcError as exc:
        error = {"code": exc.code, "message": str(exc)}
        return JSONResponse({"jsonrpc": "2.0", "id": rpc_id, "error": error})
    return JSONResponse({"jsonrpc": "2.0", "id": rpc_id, "result": result})


async def _answer(request: Request, tenant: Tenant, method: str, params: Any) -> dict[str, Any]:
    if method == "initialize":
        asked = params.get("protocolVersion") if isinstance(params, dict) else None
        return {
            "protocolVersion": asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[-1],
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "loopline", "version": _server_version()},
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        return await _tools(tenant, _params(ListParams, params))
    if method == "tools/call":
        return await _call(request, tenant, _params(CallParams, params))
    raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")


def _params(model: type[Params], params: Any) -> Any:
    if not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, "params must be an object")
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        raise RpcError(INVALID_PARAMS, reasons(exc)) from exc


async def _agents(tenant: Tenant) -> list[DeployedAgent]:
    """The deployed agents, newest first (the order of ``/assistants/search``)."""
    agents = await tenant.client.list_agents()
    return sorted(agents, key=lambda a: a.deployed_at, reverse=True)


async def _tools(tenant: Tenant, params: ListParams) -> dict[str, Any]:
    try:
        offset = int(params.cursor or 0)
    except ValueError:
        offset = 0  # as LangGraph's server: an unreadable cursor starts over
    page = (await _agents(tenant))[offset : offset + PAGE_SIZE]
    tools, seen = [], set()
    for agent in page:
        name = tool_name(agent.name)
        if name in seen:  # two agents whose names differ only in dropped characters
            continue
        seen.add(name)
        tools.append(
            {
                "name": name,
                "title": agent.name,
                "description": f"Tool based on the {agent.name} assistant",
                "inputSchema": TOOL_INPUT_SCHEMA,
                "annotations": TOOL_ANNOTATIONS,
            }
        )
    result: dict[str, Any] = {"tools": tools}
    if len(page) == PAGE_SIZE:
        result["nextCursor"] = offset + PAGE_SIZE
    return result


async def _call(request: Request, tenant: Tenant, params: CallParams) -> dict[str, Any]:
    """A stateless run of the agent the tool names, waited for."""
    found = [a for a in await _agents(tenant) if params.name and tool_name(a.name) == params.name]
    if not found:
        raise RpcError(INVALID_PARAMS, f"Unknown tool: {params.name}")
    if len(found) > 1:
        raise RpcError(INVALID_PARAMS, "Multiple tools found with the same name.")
    run = RunRequest(assistant_id=found[0].name, input=params.arguments, context=params.context)
    try:
        record = await start_run(tenant, None, run)
    except BadRequest as exc:  # a tool's input error goes back to the model, to correct
        return {"isError": True, "content": [{"type": "text", "text": str(exc)}]}
    values = await unless_stopping(gateway_of(request), wait_for(tenant, record))
    if "__error__" in values:
        text = values["__error__"]["error"]
        return {"isError": True, "content": [{"type": "text", "text": text}]}
    # the run's values as Python shows them: LangGraph's server answers with their repr
    return {"content": [{"type": "text", "text": repr(values)}]}

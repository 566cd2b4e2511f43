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
loopline name (the ``assistant_id`` of ``/assistants``). The task model is in
``a2a_tasks``.
"""

from __future__ import annotations

import datetime
import json
import uuid
from collections.abc import AsyncIterator
from importlib.metadata import PackageNotFoundError, version
from typing import Any, TypeVar

from langchain_core.messages import AIMessageChunk
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from contracts.agent import DeployedAgent
from loopline.api import a2a_tasks as tasks
from loopline.api.events import Failed, run_items
from loopline.api.gateway import gateway_of, tenant_of, unless_stopping
from loopline.api.params import Params, reasons
from loopline.api.run_routes import SSE_HEADERS
from loopline.api.runs import Busy, RunRequest, cancel_run, start_run, wait_for, was_stopped
from loopline.api.sse import with_heartbeats
from loopline.api.tenant import NotFound, Tenant
from loopline.api.wire import BadRequest, dumps, iso

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002
PUSH_NOT_SUPPORTED = -32003
UNSUPPORTED_OPERATION = -32004
CONTENT_TYPE_NOT_SUPPORTED = -32005

LEGACY_METHODS = {
    "message/send": "SendMessage",
    "message/stream": "SendStreamingMessage",
    "tasks/get": "GetTask",
    "tasks/cancel": "CancelTask",
}
"""A2A 0.3's method names, answered in 0.3's shape."""
METHODS = {
    "SendMessage",
    "SendStreamingMessage",
    "GetTask",
    "CancelTask",
    "ListTasks",
    "GetExtendedAgentCard",
}

LEGACY_ROLES = {"ROLE_USER": "user", "ROLE_AGENT": "agent"}
LEGACY_STATES: dict[str, str] = {
    "TASK_STATE_SUBMITTED": "submitted",
    "TASK_STATE_WORKING": "working",
    "TASK_STATE_COMPLETED": "completed",
    "TASK_STATE_FAILED": "failed",
    "TASK_STATE_CANCELED": "canceled",
    "TASK_STATE_INPUT_REQUIRED": "input-required",
    "TASK_STATE_REJECTED": "rejected",  # never a loopline task's, but a valid filter
    "TASK_STATE_AUTH_REQUIRED": "auth-required",
}
LEGACY_STATE_NAMES = {v: k for k, v in LEGACY_STATES.items()}
MODES = ["application/json", "text/plain"]


TaskParams = TypeVar("TaskParams", tasks.GetParams, tasks.CancelParams)


class RpcError(Exception):
    """A JSON-RPC error answer (HTTP 200 with ``error``)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def spec_format(data: Any) -> Any:
    """A 1.0-shaped answer in A2A 0.3's shape (lowercase roles and states, a task not
    wrapped in ``{"task": ...}``)."""
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            if key == "role" and isinstance(value, str):
                out[key] = LEGACY_ROLES.get(value, value)
            elif key == "state" and isinstance(value, str):
                out[key] = LEGACY_STATES.get(value, value)
            elif key == "result" and isinstance(value, dict) and list(value) == ["task"]:
                out[key] = spec_format(value["task"])
            else:
                out[key] = spec_format(value)
        return out
    if isinstance(data, list):
        return [spec_format(v) for v in data]
    return data


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


def _params(model: type[Params], params: Any) -> Any:
    """``params`` as ``model``; what it does not declare is refused, naming it."""
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        raise RpcError(INVALID_PARAMS, reasons(exc)) from exc


def _history_length(length: Any) -> None:
    if length is None:
        return
    if not isinstance(length, int) or isinstance(length, bool) or length < 0:
        raise RpcError(INVALID_PARAMS, "historyLength must be a non-negative integer")
    if length > tasks.MAX_HISTORY:
        raise RpcError(INVALID_PARAMS, f"historyLength cannot exceed {tasks.MAX_HISTORY}")


def _send_params(params: Any) -> tasks.SendParams:
    """A message's params, checked in the order and with the words of LangGraph's
    server, then against ``SendParams`` (push notifications and file parts, which
    loopline does not implement, are refused with A2A's codes for them)."""
    if not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, "Invalid params: must be an object")
    message = params.get("message")
    if not message or not isinstance(message, dict):
        raise RpcError(INVALID_PARAMS, "Missing or invalid 'message' in params")
    configuration = params.get("configuration") or {}
    if not isinstance(configuration, dict):
        raise RpcError(INVALID_PARAMS, "Invalid params: 'configuration' must be an object")
    _history_length(configuration.get("historyLength"))
    if {"pushNotificationConfig", "taskPushNotificationConfig"} & set(configuration):
        raise RpcError(PUSH_NOT_SUPPORTED, "Push notifications are not supported by this gateway")
    for field, text in (
        ("messageId", "Missing required 'messageId' in message"),
        ("role", "Missing required 'role' in message"),
    ):
        if not message.get(field):
            raise RpcError(INVALID_PARAMS, text)
    parts = message.get("parts", [])
    if not isinstance(parts, list):
        raise RpcError(INVALID_PARAMS, "Invalid params: 'parts' must be an array")
    if not parts:
        raise RpcError(INVALID_PARAMS, "Message must contain at least one part")
    for part in parts:
        if isinstance(part, dict) and "file" in part:
            raise RpcError(
                CONTENT_TYPE_NOT_SUPPORTED, "file parts are not supported by this gateway"
            )
        if not isinstance(part, dict) or not ({"text", "data"} & set(part)):
            text = "Unsupported part type. This gateway supports 'text' and 'data' parts only."
            raise RpcError(CONTENT_TYPE_NOT_SUPPORTED, text)
    found: tasks.SendParams = _params(tasks.SendParams, params)
    return found


def _task_params(model: type[TaskParams], params: Any) -> TaskParams:
    if not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, "Invalid params: must be an object")
    if not params.get("id"):
        raise RpcError(INVALID_PARAMS, "Missing required parameter: id (task_id)")
    if not isinstance(params["id"], str) or not isinstance(params.get("contextId") or "", str):
        raise RpcError(INVALID_PARAMS, "Task id and contextId must be strings")
    _history_length(params.get("historyLength"))
    found: TaskParams = _params(model, params)
    return found


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
            return await _stream(request, tenant, agent, params, rpc_id, legacy)
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
        return await _send(request, tenant, agent, _send_params(params))
    if method == "GetTask":
        return await _get(request, tenant, agent, _task_params(tasks.GetParams, params))
    if method == "CancelTask":
        return await _cancel(request, tenant, agent, _task_params(tasks.CancelParams, params))
    if method == "ListTasks":
        return await _list(request, tenant, agent, _list_params(params))
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


# -- methods ---------------------------------------------------------------------------


def _scope(request: Request, asked: tasks.HistoryScope | None) -> tasks.HistoryScope:
    scope = asked or request.headers.get(tasks.HISTORY_SCOPE_HEADER) or "context"
    if scope not in ("context", "task"):
        raise RpcError(INVALID_PARAMS, "historyScope must be 'context' or 'task'")
    return "task" if scope == "task" else "context"


async def _started(
    request: Request, tenant: Tenant, agent: DeployedAgent, params: tasks.SendParams
) -> tuple[Any, str, str, list[Any]]:
    """The run a message starts (new task, or the answer to one waiting for input):
    its record, the task id, the context id and the thread's runs of the agent."""
    message = params.message
    resumes = [p.data["resume"] for p in message.parts if p.data is not None and "resume" in p.data]
    others = [p for p in message.parts if p.data is not None and "resume" not in p.data]
    if others:
        raise RpcError(
            INVALID_PARAMS,
            'data parts other than {"resume": ...} are not supported: a loopline agent\'s '
            "input is its messages",
        )
    if len(resumes) > 1:
        raise RpcError(INVALID_PARAMS, "Only one resume value is allowed in data parts")
    inputs = tasks.input_messages(message)
    task = None
    if message.taskId is not None:
        task = await tasks.resolve(tenant, message.taskId, message.contextId, agent.name)
        if task is None:
            raise RpcError(TASK_NOT_FOUND, f"Task not found: {message.taskId}")
        if task.state in tasks.TERMINAL:
            raise RpcError(UNSUPPORTED_OPERATION, "A terminal task cannot accept another message")
    elif resumes:
        raise RpcError(INVALID_PARAMS, "contextId and taskId are required when resuming a task")
    command = _answer_to(task, resumes, inputs)
    context_id = task.context_id if task is not None else (message.contextId or _new_id())
    run = RunRequest(
        assistant_id=agent.name,
        input=None if command is not None else {"messages": inputs},
        command=command,
        context=params.context,
        metadata={"a2a": {"task_id": task.task_id}} if task is not None else {},
        if_not_exists="create",
    )
    try:
        record = await start_run(tenant, context_id, run)
    except BadRequest as exc:
        raise RpcError(INVALID_PARAMS, f"Invalid request: {exc}") from exc
    except Busy as exc:
        raise RpcError(INVALID_PARAMS, f"Failed to create run: {exc}") from exc
    task_id = task.task_id if task is not None else tasks.task_id_of(context_id, record.run_id)
    runs = await tasks.thread_runs(tenant, context_id, agent.name)
    return record, task_id, context_id, runs


def _answer_to(
    task: tasks.Task | None, resumes: list[Any], inputs: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """The ``command`` a message to a task that waits for input carries: the data part's
    ``resume``, else its text (None: the message is new input)."""
    if task is not None and task.state == "TASK_STATE_INPUT_REQUIRED":
        if resumes:
            return {"resume": resumes[0]}
        if inputs:
            return {"resume": "\n".join(str(m["content"]) for m in inputs)}
    elif resumes:
        raise RpcError(INVALID_PARAMS, "Task is not awaiting input")
    return None


def _new_id() -> str:
    return str(uuid.uuid4())


async def _send(
    request: Request, tenant: Tenant, agent: DeployedAgent, params: tasks.SendParams
) -> dict[str, Any]:
    scope = _scope(request, params.configuration.historyScope)
    record, task_id, context_id, runs = await _started(request, tenant, agent, params)
    values = await unless_stopping(gateway_of(request), wait_for(tenant, record))
    stopped = await was_stopped(tenant, record.task_id)
    status, artifacts = tasks.outcome(values, task_id, context_id, agent.name, stopped=stopped)
    task: dict[str, Any] = {"kind": "task", "id": task_id, "contextId": context_id}
    length = params.configuration.historyLength
    if length != 0:
        task["history"] = tasks.history(
            values.get("messages") or [], task_id, context_id, runs, length, scope
        )
    task["status"] = status
    if artifacts:
        task["artifacts"] = artifacts
    return {"task": task}


async def _cancel(
    request: Request, tenant: Tenant, agent: DeployedAgent, params: tasks.CancelParams
) -> dict[str, Any]:
    """Stop the task's run (a running one, or one waiting for input) and wait for it to
    stop; the task is then ``canceled``."""
    task = await tasks.resolve(tenant, params.id, params.contextId, agent.name)
    if task is None:
        raise RpcError(TASK_NOT_FOUND, f"Task not found: {params.id}")
    if task.state in tasks.TERMINAL:
        raise RpcError(TASK_NOT_CANCELABLE, "Task is not cancelable in its current state")
    await cancel_run(tenant, task.record)
    await unless_stopping(gateway_of(request), wait_for(tenant, task.record))
    message = tasks.agent_status_message("Task was canceled", task.task_id)
    status = {"state": "TASK_STATE_CANCELED", "timestamp": tasks.now(), "message": message}
    return {"kind": "task", "id": task.task_id, "contextId": task.context_id, "status": status}


def _list_params(params: Any) -> tasks.ListParams:
    """``ListTasks``'s params, checked with the words of LangGraph's server."""
    if not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, "Invalid params: must be an object")
    size = params.get("pageSize")
    if size is not None and (not isinstance(size, int) or not 1 <= size <= 100):
        raise RpcError(INVALID_PARAMS, "pageSize must be an integer between 1 and 100.")
    _history_length(params.get("historyLength"))
    status = params.get("status")
    if status is not None:
        status = LEGACY_STATE_NAMES.get(status, status)
        if status not in LEGACY_STATES:
            raise RpcError(INVALID_PARAMS, f"Invalid status value: '{status}'.")
    after = params.get("statusTimestampAfter")
    if after is not None and _timestamp(after) is None:
        raise RpcError(INVALID_PARAMS, "statusTimestampAfter must be a valid ISO 8601 timestamp.")
    token = params.get("pageToken")
    if token is not None and not isinstance(token, str):
        raise RpcError(INVALID_PARAMS, "pageToken must be a string.")
    if token and not token.isdigit():
        raise RpcError(INVALID_PARAMS, "Invalid pageToken.")
    found: tasks.ListParams = _params(tasks.ListParams, {**params, "status": status})
    if found.contextId is None:
        raise RpcError(
            INVALID_PARAMS,
            "contextId is required: listing the tasks of every context is not implemented "
            "by this gateway",
        )
    return found


def _timestamp(value: Any) -> datetime.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        found = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return found if found.tzinfo else found.replace(tzinfo=datetime.UTC)


async def _list(
    request: Request, tenant: Tenant, agent: DeployedAgent, params: tasks.ListParams
) -> dict[str, Any]:
    """The context's tasks of the agent, newest first, a page of them (without
    artifacts, as LangGraph's server lists them)."""
    scope = _scope(request, params.historyScope)
    assert params.contextId is not None
    found = await tasks.context_tasks(tenant, params.contextId, agent.name)
    after = _timestamp(params.statusTimestampAfter)
    listed = [
        t
        for t in found
        if params.status in (None, t.state)
        and (
            after is None
            or datetime.datetime.fromtimestamp(t.record.created_at, datetime.UTC) >= after
        )
    ]
    offset = int(params.pageToken or 0)
    page = listed[offset : offset + params.pageSize]
    shown = []
    for task in page:
        status = {"state": task.state, "timestamp": iso(task.record.created_at)}
        entry: dict[str, Any] = {"kind": "task", "id": task.task_id, "contextId": task.context_id}
        entry |= {"status": status, "artifacts": []}
        if params.historyLength != 0:
            values = await tasks.run_values(tenant, task.record)
            messages = values.get("messages") or []
            entry["history"] = tasks.history(
                messages, task.task_id, task.context_id, task.runs, params.historyLength, scope
            )
        shown.append(entry)
    following = offset + len(page)
    return {
        "tasks": shown,
        "totalSize": len(listed),
        "pageSize": len(page),
        "nextPageToken": str(following) if following < len(listed) else "",
    }


async def _get(
    request: Request, tenant: Tenant, agent: DeployedAgent, params: tasks.GetParams
) -> dict[str, Any]:
    scope = _scope(request, params.historyScope)
    task = await tasks.resolve(tenant, params.id, params.contextId, agent.name)
    if task is None:
        where = f" in context '{params.contextId}'" if params.contextId else ""
        raise RpcError(TASK_NOT_FOUND, f"Task not found: {params.id}{where}")
    status: dict[str, Any] = {"state": task.state, "timestamp": iso(task.record.created_at)}
    if task.state == "TASK_STATE_COMPLETED":
        status["message"] = tasks.agent_status_message("Task completed successfully", task.task_id)
    elif task.state == "TASK_STATE_FAILED":
        status["message"] = tasks.agent_status_message(
            "Task failed with status: error", task.task_id
        )
    shown: dict[str, Any] = {
        "kind": "task",
        "id": task.task_id,
        "contextId": task.context_id,
        "status": status,
    }
    if params.historyLength != 0:
        values = await tasks.run_values(tenant, task.record)
        shown["history"] = tasks.history(
            values.get("messages") or [],
            task.task_id,
            task.context_id,
            task.runs,
            params.historyLength,
            scope,
        )
    return shown


# -- streaming -------------------------------------------------------------------------


def _event(rpc_id: Any, result: dict[str, Any], legacy: bool) -> bytes:
    body = {"jsonrpc": "2.0", "id": rpc_id, "result": result}
    return (
        f"event: message\r\ndata: {dumps(spec_format(body) if legacy else body)}\r\n\r\n".encode()
    )


async def _stream(
    request: Request,
    tenant: Tenant,
    agent: DeployedAgent,
    raw: Any,
    rpc_id: Any,
    legacy: bool,
) -> Response:
    """``message/stream``: the task (submitted, with the message), the agent's reply so
    far as ``working`` updates, the answer (or what it asks) as an artifact, the final
    status. Errors before the run starts are JSON-RPC errors, as for ``message/send``."""
    params = _send_params(raw)
    _scope(request, params.configuration.historyScope)
    record, task_id, context_id, _ = await _started(request, tenant, agent, params)
    ids = {"taskId": task_id, "contextId": context_id}

    async def events() -> AsyncIterator[bytes]:
        sent = [
            m | {"taskId": task_id, "contextId": context_id}
            for m in tasks.history(
                [{"type": "human", **m} for m in tasks.input_messages(params.message)],
                task_id,
                context_id,
                [],
                None,
                "context",
            )
        ]
        status = {"state": "TASK_STATE_SUBMITTED", "timestamp": tasks.now()}
        yield _event(
            rpc_id,
            {
                "task": {
                    "kind": "task",
                    "id": task_id,
                    "contextId": context_id,
                    "history": sent,
                    "status": status,
                }
            },
            legacy,
        )
        so_far: dict[str, AIMessageChunk] = {}
        async for _source, _position, item in run_items(tenant, record, ["messages"]):
            if isinstance(item, Failed):
                continue
            _mode, (message, _meta) = item
            if not isinstance(message, AIMessageChunk):
                continue
            key = str(message.id)
            joined = message if key not in so_far else so_far[key] + message
            so_far[key] = joined
            parts = tasks.content_parts(joined.content)
            if not any(p.get("text") for p in parts):
                continue
            working = {
                "state": "TASK_STATE_WORKING",
                "message": {
                    "kind": "message",
                    "role": "ROLE_AGENT",
                    "parts": parts,
                    "messageId": _new_id(),
                    **ids,
                },
                "timestamp": tasks.now(),
            }
            yield _event(
                rpc_id, {**ids, "kind": "status-update", "status": working, "final": False}, legacy
            )
        values = await wait_for(tenant, record)
        stopped = await was_stopped(tenant, record.task_id)
        final, artifacts = tasks.outcome(values, task_id, context_id, agent.name, stopped=stopped)
        for artifact in artifacts:
            update: dict[str, Any] = {**ids, "kind": "artifact-update", "artifact": artifact}
            if final["state"] == "TASK_STATE_COMPLETED":  # the answer, whole (not so a question)
                update |= {"append": False, "lastChunk": True}
            yield _event(rpc_id, update, legacy)
        yield _event(
            rpc_id, {**ids, "kind": "status-update", "status": final, "final": True}, legacy
        )

    # a comment line while the run is quiet (a long tool call), and an end as soon as
    # the gateway stops (the run goes on: tasks/get finds it)
    frames = with_heartbeats(events(), stopping=gateway_of(request).stopping)
    return StreamingResponse(frames, media_type="text/event-stream", headers=SSE_HEADERS)

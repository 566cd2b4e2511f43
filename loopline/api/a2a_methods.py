"""The A2A methods on loopline's runs: ``SendMessage`` (``message/send``),
``SendStreamingMessage`` (``message/stream``), ``GetTask``, ``CancelTask``,
``ListTasks``, each answering in A2A 1.0's shape (``a2a_rpc.spec_format`` gives 0.3's).
The task model is ``a2a_tasks``'s."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import AsyncIterator
from typing import Any

from langchain_core.messages import AIMessageChunk
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from contracts.agent import DeployedAgent
from loopline.api import a2a_tasks as tasks
from loopline.api.a2a_rpc import (
    INVALID_PARAMS,
    TASK_NOT_CANCELABLE,
    TASK_NOT_FOUND,
    UNSUPPORTED_OPERATION,
    RpcError,
    send_params,
    spec_format,
    timestamp,
)
from loopline.api.events import Failed, run_items
from loopline.api.gateway import gateway_of, unless_stopping
from loopline.api.records import RunRecord
from loopline.api.run_routes import SSE_HEADERS
from loopline.api.runs import Busy, RunRequest, cancel_run, start_run, wait_for, was_stopped
from loopline.api.sse import with_heartbeats
from loopline.api.tenant import Tenant
from loopline.api.wire import BadRequest, dumps, iso


def _scope(request: Request, asked: tasks.HistoryScope | None) -> tasks.HistoryScope:
    scope = asked or request.headers.get(tasks.HISTORY_SCOPE_HEADER) or "context"
    if scope not in ("context", "task"):
        raise RpcError(INVALID_PARAMS, "historyScope must be 'context' or 'task'")
    return "task" if scope == "task" else "context"


async def _started(
    tenant: Tenant, agent: DeployedAgent, params: tasks.SendParams
) -> tuple[RunRecord, str, str, list[RunRecord]]:
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
    if resumes and inputs:  # a loopline run takes an answer or new input, not both
        raise RpcError(INVALID_PARAMS, "send a resume data part without text parts")
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


async def send(
    request: Request, tenant: Tenant, agent: DeployedAgent, params: tasks.SendParams
) -> dict[str, Any]:
    scope = _scope(request, params.configuration.historyScope)
    record, task_id, context_id, runs = await _started(tenant, agent, params)
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


async def cancel(
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


async def list_tasks(
    request: Request, tenant: Tenant, agent: DeployedAgent, params: tasks.ListParams
) -> dict[str, Any]:
    """The context's tasks of the agent, newest first, a page of them (without
    artifacts, as LangGraph's server lists them)."""
    scope = _scope(request, params.historyScope)
    assert params.contextId is not None
    found = await tasks.context_tasks(tenant, params.contextId, agent.name)
    after = timestamp(params.statusTimestampAfter)
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


async def get(
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


async def stream(
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
    params = send_params(raw)
    _scope(request, params.configuration.historyScope)
    record, task_id, context_id, _ = await _started(tenant, agent, params)
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

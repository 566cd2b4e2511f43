"""A2A's JSON-RPC vocabulary as LangGraph's Agent Server speaks it: the error codes,
A2A 0.3's names and shape beside 1.0's, and each method's params read with the words of
LangGraph's server, then against the models of ``a2a_tasks`` (what those do not declare
is refused, naming it)."""

from __future__ import annotations

import datetime
from typing import Any, TypeVar

from pydantic import ValidationError

from loopline.api import a2a_tasks as tasks
from loopline.api.params import Params, reasons

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


def read(model: type[Params], params: Any) -> Any:
    """``params`` as ``model``; what it does not declare is refused, naming it."""
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        raise RpcError(INVALID_PARAMS, reasons(exc)) from exc


def check_history_length(length: Any) -> None:
    if length is None:
        return
    if not isinstance(length, int) or isinstance(length, bool) or length < 0:
        raise RpcError(INVALID_PARAMS, "historyLength must be a non-negative integer")
    if length > tasks.MAX_HISTORY:
        raise RpcError(INVALID_PARAMS, f"historyLength cannot exceed {tasks.MAX_HISTORY}")


def send_params(params: Any) -> tasks.SendParams:
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
    check_history_length(configuration.get("historyLength"))
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
    found: tasks.SendParams = read(tasks.SendParams, params)
    return found


def task_params(model: type[TaskParams], params: Any) -> TaskParams:
    if not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, "Invalid params: must be an object")
    if not params.get("id"):
        raise RpcError(INVALID_PARAMS, "Missing required parameter: id (task_id)")
    if not isinstance(params["id"], str) or not isinstance(params.get("contextId") or "", str):
        raise RpcError(INVALID_PARAMS, "Task id and contextId must be strings")
    check_history_length(params.get("historyLength"))
    found: TaskParams = read(model, params)
    return found


def list_params(params: Any) -> tasks.ListParams:
    """``ListTasks``'s params, checked with the words of LangGraph's server."""
    if not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, "Invalid params: must be an object")
    size = params.get("pageSize")
    if size is not None and (not isinstance(size, int) or not 1 <= size <= 100):
        raise RpcError(INVALID_PARAMS, "pageSize must be an integer between 1 and 100.")
    check_history_length(params.get("historyLength"))
    status = params.get("status")
    if status is not None:
        status = LEGACY_STATE_NAMES.get(status, status)
        if status not in LEGACY_STATES:
            raise RpcError(INVALID_PARAMS, f"Invalid status value: '{status}'.")
    after = params.get("statusTimestampAfter")
    if after is not None and timestamp(after) is None:
        raise RpcError(INVALID_PARAMS, "statusTimestampAfter must be a valid ISO 8601 timestamp.")
    token = params.get("pageToken")
    if token is not None and not isinstance(token, str):
        raise RpcError(INVALID_PARAMS, "pageToken must be a string.")
    if token and not token.isdigit():
        raise RpcError(INVALID_PARAMS, "Invalid pageToken.")
    found: tasks.ListParams = read(tasks.ListParams, {**params, "status": status})
    if found.contextId is None:
        raise RpcError(
            INVALID_PARAMS,
            "contextId is required: listing the tasks of every context is not implemented "
            "by this gateway",
        )
    return found


def timestamp(value: Any) -> datetime.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        found = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return found if found.tzinfo else found.replace(tzinfo=datetime.UTC)

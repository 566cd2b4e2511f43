"""A2A tasks on loopline's runs, as LangGraph's Agent Server maps them: a context is a
thread (``contextId`` = ``thread_id``), a task is the run that began it and the runs
that answered its interrupts (``id`` = ``"{contextId}:{run_id}"`` of the first), its
state the run's status (``input-required`` while a human is asked).

A message's text parts are the run's input (one user message each, with the message's
``messageId``); a data part ``{"resume": ...}``, or the text sent to a task that waits
for input, answers the interrupt (``command.resume``). The thread's messages come back as
A2A history, each tagged with the task whose run brought it in. Everything is built in
A2A 1.0's shape (``ROLE_AGENT``, ``TASK_STATE_COMPLETED``); ``a2a.spec_format`` turns it
into the 0.3 shape for the slash-named methods, as LangGraph's server does.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, model_validator

from loopline.api.params import Params
from loopline.api.records import RunRecord
from loopline.api.runs import run_record, run_status, state_values
from loopline.api.tenant import NotFound, Tenant
from loopline.conversation import waiting_interrupts

TaskState = Literal[
    "TASK_STATE_SUBMITTED",
    "TASK_STATE_WORKING",
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_INPUT_REQUIRED",
]
TERMINAL: set[str] = {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED"}
STATE_OF_STATUS: dict[str, TaskState] = {
    "pending": "TASK_STATE_SUBMITTED",
    "running": "TASK_STATE_WORKING",
    "success": "TASK_STATE_COMPLETED",
    "interrupted": "TASK_STATE_CANCELED",  # LangGraph's status of a cancelled run
    "error": "TASK_STATE_FAILED",
    "timeout": "TASK_STATE_FAILED",
}
MAX_HISTORY = 10
"""The most history messages a request may ask for (``historyLength``)."""

HistoryScope = Literal["context", "task"]
HISTORY_SCOPE_HEADER = "LangGraph-A2A-History-Scope"
HISTORY_SCOPE_URI = "https://langchain.com/a2a/extensions/history-scope/v1"

# -- parameters ------------------------------------------------------------------------


class SendConfiguration(Params):
    """``params.configuration`` of a message: how much history comes back. The run is
    always waited for (``blocking``); push notifications are not implemented."""

    historyLength: int | None = Field(None, ge=0, le=MAX_HISTORY)
    historyScope: HistoryScope | None = None
    acceptedOutputModes: list[str] | None = None
    """Accepted: every answer is text and JSON data, the modes the agent card lists."""
    blocking: Literal[True] | None = None
    returnImmediately: Literal[False] | None = None


class Part(Params):
    """A message part: text, or data (``{"resume": ...}`` answers an interrupt). File
    parts are not implemented."""

    kind: Literal["text", "data"] | None = None
    text: str | None = None
    data: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Part:
        if (self.text is None) == (self.data is None):
            raise ValueError("each part must have exactly one of 'text' or 'data'")
        return self


class A2AMessage(Params):
    """``params.message`` (``metadata``, ``extensions`` and ``referenceTaskIds`` are
    not implemented)."""

    messageId: str = Field(min_length=1)
    role: Literal["ROLE_USER", "ROLE_AGENT", "user", "agent"]
    parts: list[Part] = Field(min_length=1)
    contextId: str | None = Field(None, min_length=1, max_length=256)
    taskId: str | None = Field(None, min_length=1)
    kind: Literal["message"] | None = None


class SendParams(Params):
    """``message/send`` and ``message/stream`` (``SendMessage``,
    ``SendStreamingMessage``); ``context`` is the run's context (LangGraph's addition)."""

    message: A2AMessage
    configuration: SendConfiguration = Field(default_factory=SendConfiguration)
    context: dict[str, Any] | None = None


class ListParams(Params):
    """``ListTasks``: the tasks of one context, newest first, a page at a time
    (``pageToken`` an offset). Listing every context's tasks (no ``contextId``) and
    ``includeArtifacts`` are not implemented."""

    contextId: str | None = None
    status: str | None = None
    pageSize: int = Field(50, ge=1, le=100)
    pageToken: str | None = None
    historyLength: int | None = Field(None, ge=0, le=MAX_HISTORY)
    historyScope: HistoryScope | None = None
    statusTimestampAfter: str | None = None
    includeArtifacts: Literal[False] | None = None


class CancelParams(Params):
    """``tasks/cancel`` (``CancelTask``)."""

    id: str = Field(min_length=1)
    contextId: str | None = None


class GetParams(Params):
    """``tasks/get`` (``GetTask``)."""

    id: str = Field(min_length=1)
    contextId: str | None = None
    historyLength: int | None = Field(None, ge=0, le=MAX_HISTORY)
    historyScope: HistoryScope | None = None


# -- tasks -----------------------------------------------------------------------------


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat()


def task_id_of(context_id: str, run_id: str) -> str:
    return f"{context_id}:{run_id}"


def stamped_task(record: RunRecord) -> str:
    """The task a run belongs to: the one it answered, else the one it began."""
    stamp = record.metadata.get("a2a")
    if isinstance(stamp, dict) and isinstance(stamp.get("task_id"), str):
        return str(stamp["task_id"])
    return task_id_of(record.thread_id, record.run_id)


@dataclass
class Task:
    task_id: str
    context_id: str
    record: RunRecord
    """The task's latest run."""
    state: str
    runs: list[RunRecord]
    """The thread's runs of this assistant, oldest first (whose inputs tag history)."""


async def thread_runs(tenant: Tenant, thread_id: str, assistant_id: str) -> list[RunRecord]:
    found = []
    for run_id in await tenant.records.run_ids(thread_id, 0, 1000):
        record = await tenant.records.run(run_id)
        if record is not None and record.assistant_id == assistant_id:
            found.append(record)
    return sorted(found, key=lambda r: r.created_at)


async def resolve(
    tenant: Tenant, task_id: str, context_id: str | None, assistant_id: str
) -> Task | None:
    """The task ``task_id`` of the assistant, or None when there is none."""
    parsed, _, run_id = task_id.rpartition(":")
    if not parsed or (context_id and context_id != parsed):
        return None
    try:
        anchor = await run_record(tenant, parsed, run_id)
    except NotFound:
        return None
    if anchor.assistant_id != assistant_id or stamped_task(anchor) != task_id:
        return None
    runs = await thread_runs(tenant, parsed, assistant_id)
    latest = next((r for r in reversed(runs) if stamped_task(r) == task_id), anchor)
    state = await task_state(tenant, latest)
    return Task(task_id, parsed, latest, state, runs)


async def context_tasks(tenant: Tenant, context_id: str, assistant_id: str) -> list[Task]:
    """The tasks of the assistant in the context, newest first (each as its latest
    run has it)."""
    runs = await thread_runs(tenant, context_id, assistant_id)
    found: dict[str, Task] = {}
    for record in reversed(runs):
        task_id = stamped_task(record)
        if task_id not in found:
            state = await task_state(tenant, record)
            found[task_id] = Task(task_id, context_id, record, state, runs)
    return list(found.values())


async def task_state(tenant: Tenant, record: RunRecord) -> str:
    try:
        status = await run_status(tenant, record)
    except NotFound:
        return "TASK_STATE_CANCELED"  # rolled back by a newer run
    if status == "success" and await waiting(tenant, record):
        return "TASK_STATE_INPUT_REQUIRED"
    return STATE_OF_STATUS.get(status, "TASK_STATE_SUBMITTED")


async def waiting(tenant: Tenant, record: RunRecord) -> bool:
    """The run's task waits for a human."""
    state = await tenant.threads.of_run(record.thread_id, record.task_id)
    return bool(await waiting_interrupts(tenant.client, state))


async def run_values(tenant: Tenant, record: RunRecord) -> dict[str, Any]:
    """The thread's values as the run left them (or has them now)."""
    return await state_values(tenant, await tenant.threads.of_run(record.thread_id, record.task_id))


# -- messages --------------------------------------------------------------------------


def input_messages(message: A2AMessage) -> list[dict[str, Any]]:
    """A message's text parts as the run's input messages (the first keeps the A2A
    ``messageId`` as its id, so history shows it back)."""
    role = "human" if message.role in ("ROLE_USER", "user") else "assistant"
    texts = [p.text for p in message.parts if p.text is not None]
    return [
        {
            "role": role,
            "content": text,
            "id": message.messageId if i == 0 else f"{message.messageId}-{i}",
        }
        for i, text in enumerate(texts)
    ]


def content_parts(content: Any) -> list[dict[str, Any]]:
    """A LangChain message's content as A2A text parts (its text blocks joined)."""
    if isinstance(content, str):
        return [{"kind": "text", "text": content}]
    if content is None:
        return []
    if not isinstance(content, list):
        return [{"kind": "text", "text": str(content)}]
    texts = [
        b if isinstance(b, str) else str(b.get("text", ""))
        for b in content
        if isinstance(b, str) or (isinstance(b, dict) and b.get("type") == "text")
    ]
    return [{"kind": "text", "text": "".join(texts)}] if texts else []


def _has_text(parts: list[dict[str, Any]]) -> bool:
    return any(p.get("kind") == "data" or p.get("text") for p in parts)


def _tool_result(message: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {"toolCallId": message["tool_call_id"]}
    if message.get("content") not in (None, ""):
        result["content"] = message["content"]
    for key in ("name", "status"):
        if message.get(key):
            result[key] = message[key]
    return result


def a2a_message(message: dict[str, Any], task_id: str, context_id: str) -> dict[str, Any] | None:
    """One LangChain message (as JSON) as an A2A message; None for what A2A does not
    show (a system prompt, an AI turn with only tool calls)."""
    kind = message.get("type")
    if kind == "human":
        role, parts = (
            "ROLE_USER",
            content_parts(message.get("content")) or [{"kind": "text", "text": ""}],
        )
    elif kind == "ai":
        role, parts = "ROLE_AGENT", content_parts(message.get("content"))
        if not _has_text(parts):
            return None
    elif kind == "tool" and message.get("tool_call_id"):
        role, parts = (
            "ROLE_AGENT",
            [{"kind": "data", "data": {"tool_results": [_tool_result(message)]}}],
        )
    else:
        return None
    return {
        "kind": "message",
        "role": role,
        "parts": parts,
        "messageId": message.get("id") or str(uuid.uuid4()),
        "taskId": task_id,
        "contextId": context_id,
    }


def history(
    messages: list[dict[str, Any]],
    task_id: str,
    context_id: str,
    runs: list[RunRecord],
    length: int | None,
    scope: HistoryScope,
) -> list[dict[str, Any]]:
    """The thread's messages as A2A history: each run's first input message begins its
    task's messages; ``scope="task"`` keeps this task's, ``length`` the last ones."""
    starts = {r.input_ids[0]: stamped_task(r) for r in runs if r.input_ids}
    current = task_id
    shown = []
    for message in messages:
        current = starts.get(str(message.get("id")), current)
        converted = a2a_message(message, current, context_id)
        if converted is not None and (scope == "context" or current == task_id):
            shown.append(converted)
    if length is None:
        return shown
    return shown[-length:] if length else []


def reply_parts(values: dict[str, Any]) -> list[dict[str, Any]]:
    """The agent's answer: the text of the last AI message after the last user one."""
    messages = values.get("messages") or []
    turn_start = max((i for i, m in enumerate(messages) if m.get("type") == "human"), default=-1)
    for message in reversed(messages[turn_start + 1 :]):
        if message.get("type") == "ai":
            parts = content_parts(message.get("content"))
            if _has_text(parts):
                return parts
    return [{"kind": "text", "text": ""}]


def response_artifact(parts: list[dict[str, Any]], assistant_id: str) -> dict[str, Any]:
    return {
        "artifactId": str(uuid.uuid4()),
        "name": "Assistant Response",
        "description": f"Response from assistant {assistant_id}",
        "parts": parts,
    }


def interrupt_artifact(interrupts: list[dict[str, Any]]) -> dict[str, Any]:
    parts = []
    for interrupt in interrupts:
        data = {"id": interrupt.get("id"), "value": interrupt.get("value")}
        if interrupt.get("response_schema") is not None:
            data["response_schema"] = interrupt["response_schema"]
        parts.append({"kind": "data", "data": data})
    return {
        "artifactId": str(uuid.uuid4()),
        "name": "Interrupt",
        "description": "Agent requires input to continue",
        "parts": parts,
    }


def agent_status_message(text: str, task_id: str, context_id: str | None = None) -> dict[str, Any]:
    message = {
        "kind": "message",
        "role": "ROLE_AGENT",
        "parts": [{"kind": "text", "text": text}],
        "messageId": str(uuid.uuid4()),
        "taskId": task_id,
    }
    if context_id is not None:
        message["contextId"] = context_id
    return message


def outcome(
    values: dict[str, Any], task_id: str, context_id: str, assistant_id: str, *, stopped: bool
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A finished run's task status and artifacts: its answer, what it asks, why it
    failed, or that it was cancelled (``stopped``)."""
    if stopped:
        return {"state": "TASK_STATE_CANCELED", "timestamp": now()}, []
    if "__error__" in values:
        text = f"Error executing assistant: {values['__error__']['error']}"
        message = agent_status_message(text, task_id, context_id)
        return {"state": "TASK_STATE_FAILED", "message": message}, []
    if "__interrupt__" in values:
        status = {"state": "TASK_STATE_INPUT_REQUIRED", "timestamp": now()}
        return status, [interrupt_artifact(values["__interrupt__"])]
    status = {"state": "TASK_STATE_COMPLETED", "timestamp": now()}
    return status, [response_artifact(reply_parts(values), assistant_id)]

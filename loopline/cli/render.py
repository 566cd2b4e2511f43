"""How the command line shows things: one human line per event of a task's log, the
result of a run, per-agent statistics, dead letters. No I/O: the commands print."""

from __future__ import annotations

import json
from typing import Any

from contracts.events import (
    AnyEvent,
    ApprovalRequested,
    ContextEdited,
    DeadLettered,
    ModelResponded,
    StepStarted,
    TaskCompleted,
    TaskFailed,
    TaskSubmitted,
    TodosUpdated,
    ToolCompleted,
    ToolInterrupted,
)
from contracts.messages import Message

TODO_MARKS = {"completed": "[x]", "in_progress": "[~]", "pending": "[ ]"}

VALUE_ROOM = 40
"""Characters one argument value may take in a progress line before it is summarised."""
ARGS_ROOM = 100
"""Characters a call's arguments may take; the arguments past it are counted, not shown."""


def call_summary(name: str, args: Any) -> str:
    """A tool call as one short line, shortened by structure, never cut mid-value: a todo
    list as its counts, long strings with an ellipsis inside their quotes, long lists and
    objects as their sizes, arguments past the room counted."""
    if not isinstance(args, dict):
        return f"{name}({short_value(args)})"
    todos = args.get("todos") if name == "write_todos" else None
    if isinstance(todos, list):
        return f"{name}({todo_counts(todos)})"
    shown: list[str] = []
    used = 0
    for i, (key, value) in enumerate(args.items()):
        part = f"{key}={short_value(value)}"
        if shown and used + len(part) > ARGS_ROOM:
            shown.append(f"+{len(args) - i} more")
            break
        shown.append(part)
        used += len(part) + 2
    return f"{name}({', '.join(shown)})"


def short_value(value: Any, room: int = VALUE_ROOM) -> str:
    """One argument's value as JSON when it fits in ``room``, else summarised whole."""
    text = json.dumps(value, ensure_ascii=False)
    if len(text) <= room:
        return text
    if isinstance(value, str):
        return json.dumps(value[: room - 3] + "…", ensure_ascii=False)
    if isinstance(value, list):
        return f"[{_count(len(value), 'item')}]"
    if isinstance(value, dict):
        return "{" + _count(len(value), "key") + "}"
    return text  # a number or a constant: short by nature


def todo_counts(todos: list[Any]) -> str:
    """``3 todos: 1 done, 1 in progress, 1 pending`` (the statuses present)."""
    names = {"completed": "done", "in_progress": "in progress", "pending": "pending"}
    counts = {status: 0 for status in names}
    for todo in todos:
        status = todo.get("status") if isinstance(todo, dict) else None
        if status in counts:
            counts[status] += 1
    parts = [f"{n} {names[status]}" for status, n in counts.items() if n]
    return _count(len(todos), "todo") + (": " + ", ".join(parts) if parts else "")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def clip(text: str, room: int = 80) -> str:
    """Prose on one line, an ellipsis where it was cut."""
    flat = " ".join(text.split())
    return flat if len(flat) <= room else flat[: room - 1] + "…"


def describe(event: AnyEvent) -> str | None:
    """One human line per event of a task's log."""
    if isinstance(event, TaskSubmitted):
        return f"task {event.task_id} submitted (agent {event.agent_name})"
    if isinstance(event, StepStarted):
        return f"step {event.step}: calling the model"
    if isinstance(event, ModelResponded):
        calls = ", ".join(call_summary(c.name, c.args) for c in event.message.tool_calls)
        return f"step {event.step}: model asked for {calls}" if calls else None
    if isinstance(event, ToolCompleted):
        mark = "error" if event.message.status == "error" else "ok"
        text = clip(event.message.text())
        return f"step {event.step}:   {event.message.tool_call_id} {mark}: {text}"
    if isinstance(event, TodosUpdated):
        items = "  ".join(f"{TODO_MARKS[t.status]} {t.content}" for t in event.todos)
        return f"step {event.step}: todos {items}"
    if isinstance(event, ContextEdited):
        return (
            f"step {event.step}: context edit cleared {len(event.cleared_tool_call_ids)} "
            f"tool result(s), {event.tokens_before} -> {event.tokens_after} tokens"
        )
    if isinstance(event, ApprovalRequested):
        return _approval(event)
    if isinstance(event, ToolInterrupted) and event.error:
        return f"step {event.step}: decision for call {event.call.id} REFUSED: {event.error}"
    if isinstance(event, TaskCompleted):
        return f"done after {event.steps} step(s)"
    if isinstance(event, TaskFailed):
        return f"FAILED at step {event.step}: {event.reason}"
    return None


def _approval(event: ApprovalRequested) -> str:
    if not is_hitl(event.request):  # a user's own interrupt(): its value
        where = f" at {event.node}" if event.node else ""
        return (
            f"step {event.step}: WAITING{where} for an answer to interrupt "
            f"{event.interrupt_id}: {json.dumps(event.request)[:80]}"
        )
    if event.request.get("type") == "tool_approval":
        req = event.request  # per-call mode: one ToolApprovalRequest
        call = call_summary(str(req.get("name")), req.get("args"))
        return f"step {event.step}: WAITING for approval of call {req.get('tool_call_id')}: {call}"
    actions = ", ".join(
        call_summary(str(a.get("name")), a.get("args"))
        for a in event.request.get("action_requests", [])
    )
    return f"step {event.step}: WAITING for approval of {actions}"


def is_hitl(request: Any) -> bool:
    """HumanInTheLoopMiddleware's request: a HITLRequest or a ToolApprovalRequest."""
    return isinstance(request, dict) and (
        request.get("type") == "tool_approval" or "action_requests" in request
    )


def json_line(entry_id: str, event: AnyEvent | DeadLettered) -> str:
    """An event (or dead letter) as one JSON line, with its stream entry id."""
    return json.dumps({"id": entry_id, **event.model_dump(mode="json")})


def run_result(
    task_id: str,
    final: TaskCompleted | TaskFailed | ApprovalRequested | None,
    messages: list[Message],
    todos: Any,
) -> str:
    """``loopline run --json``: one JSON object saying how the task ended."""
    if isinstance(final, TaskCompleted):
        status = "completed"
    elif isinstance(final, ApprovalRequested):
        status = "waiting"
    else:
        status = "failed"
    result: dict[str, Any] = {
        "task_id": task_id,
        "status": status,
        "answer": final.answer if isinstance(final, TaskCompleted) else None,
        "error": final.reason if isinstance(final, TaskFailed) else None,
        "messages": [m.model_dump(mode="json") for m in messages],
        "todos": todos,
    }
    if isinstance(final, TaskCompleted) and final.structured_response is not None:
        result["structured_response"] = final.structured_response  # response_format's
    return json.dumps(result)


def dead_letter_line(entry_id: str, letter: DeadLettered) -> str:
    """``loopline dlq list``: one dead letter, its error cut short."""
    return f"{entry_id}  {letter.stream}  x{letter.deliveries}  {clip(letter.error, 90)}"

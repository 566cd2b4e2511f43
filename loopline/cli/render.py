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


def describe(event: AnyEvent) -> str | None:
    """One human line per event of a task's log."""
    if isinstance(event, TaskSubmitted):
        return f"task {event.task_id} submitted (agent {event.agent_name})"
    if isinstance(event, StepStarted):
        return f"step {event.step}: calling the model"
    if isinstance(event, ModelResponded):
        calls = ", ".join(f"{c.name}({json.dumps(c.args)[:60]})" for c in event.message.tool_calls)
        return f"step {event.step}: model asked for {calls}" if calls else None
    if isinstance(event, ToolCompleted):
        text = event.message.text().replace("\n", " ")
        mark = "error" if event.message.status == "error" else "ok"
        return f"step {event.step}:   {event.message.tool_call_id} {mark}: {text[:80]}"
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
        args = json.dumps(req.get("args"))[:60]
        return (
            f"step {event.step}: WAITING for approval of call {req.get('tool_call_id')}: "
            f"{req.get('name')}({args})"
        )
    actions = ", ".join(
        f"{a.get('name')}({json.dumps(a.get('args'))[:60]})"
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


def stats_lines(stats: dict[str, dict[str, Any]]) -> list[str]:
    """``loopline stats``: each agent's counts, then its stage latencies."""
    lines: list[str] = []
    for name, row in stats.items():
        lines.append(f"agent {name}")
        for key, value in row.items():
            if key != "latency_ms":
                lines.append(f"  {key:14} {value}")
        for stage, p in dict(row["latency_ms"]).items():
            lines.append(
                f"  latency {stage:6} p50 {p['p50']} ms  p90 {p['p90']} ms  p99 {p['p99']} ms"
            )
    return lines


def dead_letter_line(entry_id: str, letter: DeadLettered) -> str:
    """``loopline dlq list``: one dead letter, its error cut short."""
    return f"{entry_id}  {letter.stream}  x{letter.deliveries}  {letter.error[:90]}"

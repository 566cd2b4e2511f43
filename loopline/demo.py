"""The built-in demo: a research task with a todo list and context editing, run against a
scripted model (a local OpenAI-compatible server replaying a fixed script), so a newcomer
sees the pipeline at work with no API key."""

from __future__ import annotations

from typing import Any

from contracts.replies import Reply, ScriptedToolCall

DEMO_PROMPT = "Research how Redis Streams consumer groups recover lost work, then summarize."

_NOTES = {
    "consumer groups": (
        "A consumer group lets several consumers share one stream: each entry goes to one "
        "consumer, which acknowledges it with XACK once processed. "
    ),
    "pending entries": (
        "Entries delivered but not yet acknowledged stay in the group's pending entries list "
        "(PEL) with their consumer, idle time and delivery count. "
    ),
    "xautoclaim": (
        "XAUTOCLAIM transfers pending entries idle longer than a threshold to another "
        "consumer, so work held by a dead consumer is picked up again. "
    ),
}


def lookup(query: str) -> str:
    """Look up reference notes about a Redis topic."""
    asked = " ".join(query.lower().split())
    topic = next((t for t in _NOTES if t in asked), None)
    note = _NOTES[topic] if topic else f"No notes about {query!r}. "
    return (note * 6).strip()  # long enough that old results are worth clearing


def _todos(*states: tuple[str, str]) -> dict[str, Any]:
    return {"todos": [{"content": c, "status": s} for c, s in states]}


RESEARCH, SUMMARY = "Research consumer groups and recovery", "Write the summary"

DEMO_TURNS: tuple[Reply, ...] = (
    Reply(
        tool_calls=(
            ScriptedToolCall(
                "write_todos", _todos((RESEARCH, "in_progress"), (SUMMARY, "pending"))
            ),
            ScriptedToolCall("lookup", {"query": "consumer groups"}),
            ScriptedToolCall("lookup", {"query": "pending entries"}),
        )
    ),
    Reply(tool_calls=(ScriptedToolCall("lookup", {"query": "xautoclaim"}),)),
    Reply(
        tool_calls=(
            ScriptedToolCall(
                "write_todos", _todos((RESEARCH, "completed"), (SUMMARY, "in_progress"))
            ),
        )
    ),
    Reply(
        tool_calls=(
            ScriptedToolCall(
                "write_todos", _todos((RESEARCH, "completed"), (SUMMARY, "completed"))
            ),
        )
    ),
    Reply(
        content=(
            "Consumer groups share a stream among consumers; every delivered entry stays in "
            "the pending entries list until XACK. When a consumer dies, XAUTOCLAIM hands its "
            "idle pending entries to a live consumer, so no work is lost."
        )
    ),
)

DEMO_AGENT: dict[str, Any] = {
    "name": "demo-researcher",
    "model": "gpt-4o-mini",
    "tools": ["loopline.demo:lookup"],
    "system_prompt": "You are a careful research assistant.",
    "middleware": [
        {"type": "TodoListMiddleware"},
        {
            "type": "ContextEditingMiddleware",
            "edits": [{"type": "ClearToolUsesEdit", "trigger": 600, "keep": 1}],
        },
    ],
}

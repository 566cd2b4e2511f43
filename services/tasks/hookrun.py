"""The loop's side of middleware: ``before_agent`` / ``before_model`` when a step starts,
``after_model`` / ``after_agent`` when the model answers. Pure computation over the
transcript and the task's extra state; the handlers apply the outcome atomically."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contracts.messages import AIMessage, Message, ToolMessage, from_langchain, to_langchain
from services.hooks import HookSet, run_state_hooks
from services.interrupts import Answers


@dataclass
class StepStart:
    """What before_agent/before_model decided for a step."""

    append: list[Message] = field(default_factory=list)
    rewrite: list[Message] | None = None
    extra: dict[str, Any] | None = None
    end: bool = False
    answer: str = ""


def _diff(before: list[Any], after: list[Any]) -> tuple[list[Message], list[Message] | None]:
    """A pure append, or the whole new list when earlier messages changed."""
    if len(after) >= len(before) and all(a == b for a, b in zip(before, after, strict=False)):
        return [from_langchain(m) for m in after[len(before) :]], None
    return [], [from_langchain(m) for m in after]


def _answer(messages: list[Any]) -> str:
    for message in reversed(messages):
        converted = from_langchain(message)
        if isinstance(converted, AIMessage):
            return converted.text()
    return ""


async def start_step(
    hooks: HookSet,
    step: int,
    transcript: list[Message],
    extra: dict[str, Any],
    answers: Answers | None = None,
) -> StepStart:
    """before_agent (at step 1), before_model, and after_agent when they jump to the end;
    ``answers``: for their interrupts (``services.interrupts``)."""
    original = [to_langchain(m) for m in transcript]
    messages, state, jump, changed = original, dict(extra), None, False
    if step == 1 and hooks.with_hook("before_agent"):
        result = await run_state_hooks(
            hooks, "before_agent", messages, state, answers, stored=transcript
        )
        messages, state, jump, changed = (
            result.messages,
            result.extra,
            result.jump_to,
            result.changed,
        )
    if jump not in ("end", "model", "tools") and hooks.with_hook("before_model"):
        stored = None if changed else transcript
        result = await run_state_hooks(
            hooks, "before_model", messages, state, answers, stored=stored
        )
        messages, state, jump = result.messages, result.extra, result.jump_to
        changed = changed or result.changed
    end = jump == "end"
    if end and hooks.with_hook("after_agent"):
        result = await run_state_hooks(hooks, "after_agent", messages, state, answers)
        messages, state = result.messages, result.extra
        changed = changed or result.changed
    if not changed and not end:
        return StepStart()
    append, rewrite = _diff(original, messages)
    return StepStart(append, rewrite, state if state != extra else None, end, _answer(messages))


@dataclass
class ModelTurn:
    """What after_model (and, when the task ends, after_agent) decided for a reply."""

    ai: AIMessage
    after_ai: list[Message] = field(default_factory=list)
    decided: dict[str, ToolMessage] = field(default_factory=dict)
    extra: dict[str, Any] | None = None
    end: bool = False
    end_after_tools: bool = False
    """The task ends once the reply's calls ran (a structured response was given)."""
    ran: list[tuple[str, dict[str, Any] | None]] = field(default_factory=list)
    """The hook nodes that ran on the reply, with their updates (``Answers.ran``)."""
    again: bool = False
    """An ``after_agent`` hook jumped back to the model: the task does not end, the next
    step calls the model (LangChain's edge from after_agent to the loop's entry)."""


async def model_turn(
    hooks: HookSet,
    transcript: list[Message],
    ai: AIMessage,
    extra: dict[str, Any],
    answers: Answers | None = None,
) -> ModelTurn:
    """Run after_model hooks on the transcript with the reply appended. Tool messages they
    add for the reply's calls answer those calls (the tools do not run them). ``answers``:
    for their interrupts (``services.interrupts``)."""
    base = [to_langchain(m) for m in transcript]
    with_ai = [*base, to_langchain(ai)]
    result = await run_state_hooks(
        hooks, "after_model", with_ai, extra, answers, stored=[*transcript, ai]
    )
    messages, state = result.messages, result.extra
    end = result.jump_to == "end"
    new_ai = ai
    if len(messages) > len(base) and isinstance(from_langchain(messages[len(base)]), AIMessage):
        converted = from_langchain(messages[len(base)])
        if isinstance(converted, AIMessage):
            new_ai = converted  # a hook may rewrite the reply (redaction, say)
    added = [from_langchain(m) for m in messages[len(base) + 1 :]]
    call_ids = {c.id for c in new_ai.tool_calls}
    decided = {
        m.tool_call_id: m
        for m in added
        if isinstance(m, ToolMessage) and m.tool_call_id in call_ids
    }
    # LangChain ends the loop on a jump to end or a reply without tool calls; when hooks
    # answered every call, the model is called again.
    finishing = end or not new_ai.tool_calls
    again = False
    if finishing and hooks.with_hook("after_agent"):
        final = await run_state_hooks(hooks, "after_agent", messages, state, answers)
        state = final.extra
        added.extend(from_langchain(m) for m in final.messages[len(messages) :])
        again = final.jump_to == "model"
    after_ai = [m for m in added if not (isinstance(m, ToolMessage) and m.tool_call_id in decided)]
    if finishing:
        after_ai = added  # nothing will be joined: keep every message in order
        decided = {}
    changed = state if state != extra else None
    return ModelTurn(new_ai, after_ai, decided, changed, finishing and not again, again=again)

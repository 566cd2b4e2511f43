"""Answering the malformed tool calls of a run's starting messages, as LangChain does.

An AI message may carry ``invalid_tool_calls`` (arguments the provider could not parse,
or a transcript brought in from elsewhere). LangChain's model node answers each one that
has no tool message yet with an error tool message right after its AI message, and
writes the repaired history to the state (``_patch_invalid_tool_calls`` and
``_build_commands(repaired_messages=...)`` in ``langchain.agents.factory``). loopline
repairs a run's starting messages (its input, and a thread's history) once, when the
run starts, so the transcript, the model's requests and the result are LangChain's.
"""

from __future__ import annotations

from collections.abc import Sequence

from contracts.messages import MESSAGE_ADAPTER, AIMessage, Message, ToolMessage

INVALID_TOOL_CALL_MESSAGE = (
    "Tool call {name} with id {tool_call_id} could not be executed - "
    "arguments were malformed or truncated."
)
"""LangChain's text (``_invalid_tool_call_message``)."""


def answered(messages: Sequence[Message]) -> list[Message]:
    """``messages`` with an error tool message after every unanswered invalid call."""
    answered_ids = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    repaired: list[Message] = []
    for message in messages:
        repaired.append(message)
        if not isinstance(message, AIMessage):
            continue
        for call in message.invalid_tool_calls:
            call_id = call.get("id")
            if call_id is None or call_id in answered_ids:
                continue
            name = call.get("name") or "unknown"
            content = INVALID_TOOL_CALL_MESSAGE.format(name=name, tool_call_id=call_id)
            repaired.append(
                ToolMessage(content=content, name=name, tool_call_id=call_id, status="error")
            )
            answered_ids.add(call_id)
    return repaired


def may_need_answers(stored: Sequence[str]) -> bool:
    """Whether a stored transcript (compact JSON per message, as pydantic writes it) may
    hold an invalid call: a text test, so a thread's history is parsed only when it
    might."""
    return any('"invalid_tool_calls":[{' in m for m in stored)


def answered_stored(stored: list[str]) -> list[str]:
    """``answered`` for a stored transcript; unchanged (the same list) when no call is
    invalid."""
    if not may_need_answers(stored):
        return stored
    messages = [MESSAGE_ADAPTER.validate_json(m) for m in stored]
    repaired = answered(messages)
    if len(repaired) == len(messages):
        return stored
    return [m.model_dump_json() for m in repaired]

"""The context-editing engine: LangChain's ``ClearToolUsesEdit`` without its quadratic cost.

``edit_context`` decides, for a transcript prefix, which tool results the model should
not see; ``apply_edits`` rebuilds that same view later from the compact ``AppliedEdit``
list that travels on the ``ModelRequested`` event. Both are pure: no Redis, no I/O.

The result is the message list LangChain's middleware would hand to the model, message
for message, including its quirks (see ``_View.first_equal``). What differs is cost:
LangChain re-tokenizes the whole conversation after every cleared result when
``clear_at_least`` is set; here each message is counted once, when it arrives (the
caller's ``counts``), and a clear adjusts the running total by the difference between the
old and the new message's count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain.agents.middleware.context_editing import DEFAULT_TOOL_PLACEHOLDER

from contracts.events import AppliedEdit
from contracts.messages import AIMessage, Message, ToolCall, ToolMessage
from services.editing.counting import TokenCounter

STRATEGY = "clear_tool_uses"


@dataclass(frozen=True, slots=True)
class ClearToolUses:
    """``ClearToolUsesEdit``'s parameters, plus an allow-list LangChain lacks.

    ``include_tools`` narrows clearing to the named tools (``None``: every tool); a tool
    must pass both it and ``exclude_tools`` to be cleared.
    """

    trigger: int = 100_000
    clear_at_least: int = 0
    keep: int = 3
    clear_tool_inputs: bool = False
    exclude_tools: tuple[str, ...] = ()
    placeholder: str = DEFAULT_TOOL_PLACEHOLDER
    include_tools: tuple[str, ...] | None = None


@dataclass(frozen=True)
class EditReport:
    """What one edit that changed the view did, for the ``ContextEdited`` event."""

    strategy: str
    tokens_before: int
    tokens_after: int
    cleared_tool_call_ids: list[str]
    cleared_inputs: bool


@dataclass(frozen=True)
class EditResult:
    """The model's view, plus how to rebuild it and what it cost."""

    messages: list[Message]
    applied: list[AppliedEdit]
    reports: list[EditReport]
    tokens: int


def base_tokens_for(counter: TokenCounter, system_message: Message | None) -> int:
    """The constant part of every total LangChain's middleware computes.

    The ``model`` method counts ``[system_message] + messages`` plus 3 for reply
    priming; the ``approximate`` method counts the messages alone.
    """
    base = counter.overhead
    if counter.method == "model" and system_message is not None:
        base += counter.count_message(system_message)
    return base


def _is_cleared(message: ToolMessage) -> bool:
    return bool(message.response_metadata.get("context_editing", {}).get("cleared"))


def _cleared_tool_message(message: ToolMessage, placeholder: str) -> ToolMessage:
    # model_copy skips validation; measured cheaper than either constructor (~3.6 µs).
    return message.model_copy(
        update={
            "artifact": None,
            "content": placeholder,
            "response_metadata": {
                **message.response_metadata,
                "context_editing": {"cleared": True, "strategy": STRATEGY},
            },
        }
    )


def _cleared_input_message(message: AIMessage, tool_call_id: str) -> AIMessage:
    """LangChain's ``_build_cleared_tool_input_message`` on loopline messages."""
    calls: list[ToolCall] = []
    cleared_any = False
    for call in message.tool_calls:
        if call.id == tool_call_id:
            call = call.model_copy(update={"args": {}})
            cleared_any = True
        calls.append(call)
    metadata = dict(message.response_metadata)
    entry = dict(metadata.get("context_editing", {}))
    if cleared_any:
        ids = set(entry.get("cleared_tool_inputs", []))
        ids.add(tool_call_id)
        entry["cleared_tool_inputs"] = sorted(ids)
        metadata["context_editing"] = entry
    return message.model_copy(update={"tool_calls": calls, "response_metadata": metadata})


def _ai_key(message: AIMessage) -> tuple[Any, ...]:
    # Equal messages have equal keys, and clearing inputs never changes a key, so a
    # message's group is fixed for the life of a view.
    content = message.content if isinstance(message.content, str) else None
    return (message.id, content, tuple(call.id for call in message.tool_calls))


class _View:
    """A mutable copy of the transcript with the lookups every clear needs, precomputed.

    Message types never change under an edit, so which AI message precedes each tool
    message is fixed up front instead of scanned for per candidate, as LangChain does.
    """

    __slots__ = ("_groups", "messages", "prev_ai", "tool_positions")

    def __init__(self, messages: Sequence[Message]) -> None:
        self.messages: list[Message] = list(messages)
        self.prev_ai: dict[int, int] = {}
        self.tool_positions: list[int] = []
        last_ai = -1
        for index, message in enumerate(self.messages):
            if isinstance(message, AIMessage):
                last_ai = index
            elif isinstance(message, ToolMessage):
                self.tool_positions.append(index)
                self.prev_ai[index] = last_ai
        self._groups: dict[tuple[Any, ...], list[int]] | None = None

    def first_equal(self, position: int) -> int:
        """``messages.index(messages[position])``: the first message equal to it.

        LangChain locates the AI message whose inputs it clears by value, so with
        duplicate AI messages an earlier copy is the one rewritten. Grouping AI
        messages by a hashable key keeps that lookup O(duplicates) instead of O(n).
        """
        if self._groups is None:
            groups: dict[tuple[Any, ...], list[int]] = {}
            for index, message in enumerate(self.messages):
                if isinstance(message, AIMessage):
                    groups.setdefault(_ai_key(message), []).append(index)
            self._groups = groups
        target = self.messages[position]
        assert isinstance(target, AIMessage)
        for index in self._groups[_ai_key(target)]:
            if index == position or self.messages[index] == target:
                return index
        raise AssertionError("unreachable: a message equals itself")

    def clearable_name(self, index: int) -> str | None:
        """``tool_message.name or tool_call["name"]`` if LangChain may clear this result.

        None when it is already cleared or is an orphan: no AI message precedes it, or
        the nearest one has no call with its id (LangChain looks no further back).
        """
        message = self.messages[index]
        assert isinstance(message, ToolMessage)
        ai_index = self.prev_ai[index]
        if ai_index < 0 or _is_cleared(message):
            return None
        ai_message = self.messages[ai_index]
        assert isinstance(ai_message, AIMessage)
        for call in ai_message.tool_calls:
            if call.id == message.tool_call_id:
                return message.name or call.name
        return None

    def clear(self, index: int, placeholder: str, clear_inputs: bool) -> tuple[int, ...]:
        """Clear a clearable result (and its call's inputs); the positions that changed."""
        message = self.messages[index]
        ai_message = self.messages[self.prev_ai[index]]
        assert isinstance(message, ToolMessage) and isinstance(ai_message, AIMessage)
        self.messages[index] = _cleared_tool_message(message, placeholder)
        if not clear_inputs:
            return (index,)
        target = self.first_equal(self.prev_ai[index])
        self.messages[target] = _cleared_input_message(ai_message, message.tool_call_id)
        return (index, target)


def _candidates(tool_positions: list[int], keep: int) -> list[int]:
    # Verbatim LangChain slicing, including what it does with keep < 0.
    if keep >= len(tool_positions):
        return []
    if keep:
        return tool_positions[:-keep]
    return tool_positions


def _ranges(indices: list[int]) -> list[tuple[int, int]]:
    ranges: list[tuple[int, int]] = []
    for index in indices:
        if ranges and ranges[-1][1] == index:
            ranges[-1] = (ranges[-1][0], index + 1)
        else:
            ranges.append((index, index + 1))
    return ranges


def _clear(
    edit: ClearToolUses,
    view: _View,
    counter: TokenCounter,
    message_counts: list[int],
    tokens_before: int,
) -> tuple[list[int], int]:
    """One edit's clears on the view, oldest first: the positions cleared and the total
    after them (``message_counts`` kept current)."""
    whole = getattr(counter, "count_list", None)
    excluded = set(edit.exclude_tools)
    included = None if edit.include_tools is None else set(edit.include_tools)
    total = tokens_before
    cleared: list[int] = []
    for index in _candidates(view.tool_positions, edit.keep):
        name = view.clearable_name(index)
        if name is None:
            continue
        if name in excluded or (included is not None and name not in included):
            continue
        cleared.append(index)
        for position in view.clear(index, edit.placeholder, edit.clear_tool_inputs):
            new_count = counter.count_message(view.messages[position])
            total += new_count - message_counts[position]
            message_counts[position] = new_count
        if whole is not None and edit.clear_at_least > 0:
            total = whole(view.messages)  # LangChain counts again only to stop early
        if edit.clear_at_least > 0 and max(0, tokens_before - total) >= edit.clear_at_least:
            break
    return cleared, total


def edit_context(
    messages: Sequence[Message],
    edits: Sequence[ClearToolUses],
    counter: TokenCounter,
    *,
    counts: Sequence[int] | None = None,
    base_tokens: int = 0,
) -> EditResult:
    """Apply ``edits`` in order, exactly as ``ContextEditingMiddleware`` would.

    ``counts[i]`` must be ``counter.count_message(messages[i])``; the context service keeps
    them per message so a step never re-tokenizes history (computed here when omitted).
    ``base_tokens`` is added to every total so triggers compare against LangChain's
    numbers: pass ``base_tokens_for(counter, system_message)``, i.e. ``counter.overhead``
    plus, for the ``model`` method only, the system message's count (LangChain's model
    counter sees ``[system_message] + messages``; its approximate counter does not).
    """
    view = _View(messages)
    if counts is None:
        message_counts = [counter.count_message(message) for message in view.messages]
    else:
        if len(counts) != len(view.messages):
            raise ValueError(f"{len(counts)} counts for {len(view.messages)} messages")
        message_counts = list(counts)
    total = base_tokens + sum(message_counts)
    applied: list[AppliedEdit] = []
    reports: list[EditReport] = []

    whole = getattr(counter, "count_list", None)  # a custom counter counts the whole list
    for edit in edits:
        if whole is not None:
            total = whole(view.messages)  # as LangChain counts at each edit's start
        tokens_before = total
        if tokens_before <= edit.trigger:
            continue
        cleared, total = _clear(edit, view, counter, message_counts, tokens_before)
        if whole is not None and cleared:
            total = whole(view.messages)  # the report's tokens_after, as the counter says
        if not cleared:
            continue
        applied.append(
            AppliedEdit(
                placeholder=edit.placeholder,
                cleared=_ranges(cleared),
                clear_inputs=edit.clear_tool_inputs,
            )
        )
        cleared_ids: list[str] = []
        for index in cleared:
            tool_message = view.messages[index]
            assert isinstance(tool_message, ToolMessage)
            cleared_ids.append(tool_message.tool_call_id)
        reports.append(
            EditReport(
                strategy=STRATEGY,
                tokens_before=tokens_before,
                tokens_after=total,
                cleared_tool_call_ids=cleared_ids,
                cleared_inputs=edit.clear_tool_inputs,
            )
        )
    return EditResult(messages=view.messages, applied=applied, reports=reports, tokens=total)


def apply_edits(messages: Sequence[Message], applied: Sequence[AppliedEdit]) -> list[Message]:
    """Rebuild ``edit_context``'s view from the transcript and its ``applied`` list.

    Replaying the same clears in the same order through the same ``_View`` reproduces
    even the order-dependent duplicate-AI-message quirk, with no token counting at all.
    """
    view = _View(messages)
    for edit in applied:
        for start, end in edit.cleared:
            for index in range(start, end):
                if index not in view.prev_ai or view.clearable_name(index) is None:
                    raise ValueError(f"transcript index {index} is not a clearable tool result")
                view.clear(index, edit.placeholder, edit.clear_inputs)
    return view.messages

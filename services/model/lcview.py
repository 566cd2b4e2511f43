"""The LangChain messages a model call gets, converted once per message and task.

The transcript is append-only (a rewrite by middleware bumps its revision), and
``Runtime.transcript`` hands out the same message objects every step, so a message's
LangChain form can be kept and reused: converting the whole history on every call was
most of the model service's CPU on long tasks (57% at ~800 steps), and made a step's cost
grow with the conversation. Messages a context edit changed are new objects: they are
converted per call and not kept.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import BaseMessage

from contracts.messages import AIMessage, Message, to_langchain


def with_invalid_calls_answered(messages: list[Any]) -> list[Any]:
    """The model's view with an error tool message after every AI message's invalid tool
    call (malformed arguments) that has no answer: LangChain's model node patches its
    request so (``_patch_invalid_tool_calls``); the state keeps the messages as they are."""
    from langchain.agents.factory import _patch_invalid_tool_calls

    return _patch_invalid_tool_calls(messages)


def has_invalid_calls(message: Message) -> bool:
    return isinstance(message, AIMessage) and bool(message.invalid_tool_calls)


class LangChainViews:
    def __init__(self, max_tasks: int) -> None:
        self.max_tasks = max_tasks
        # (task, rev) -> the converted messages of the transcript, in order, with the
        # source objects (identity says whether a view's message is the stored one)
        self._tasks: OrderedDict[tuple[str, int], tuple[list[Message], list[BaseMessage]]] = (
            OrderedDict()
        )
        self._invalid: set[tuple[str, int]] = set()
        """Transcripts with an AI message whose tool calls were malformed."""

    def convert(
        self,
        task_id: str,
        rev: int,
        transcript: Sequence[Message],
        view: Sequence[Message],
        system: Message | None = None,
    ) -> list[BaseMessage]:
        """``view`` (the transcript, or an edited copy of it) as LangChain messages, the
        system message first, invalid tool calls answered (``with_invalid_calls_answered``)."""
        out = self._converted(task_id, rev, transcript, view, system)
        if (task_id, rev) in self._invalid:
            return with_invalid_calls_answered(out)
        return out

    def _converted(
        self,
        task_id: str,
        rev: int,
        transcript: Sequence[Message],
        view: Sequence[Message],
        system: Message | None,
    ) -> list[BaseMessage]:
        key = (task_id, rev)
        found = self._tasks.get(key)
        if found is None:
            found = ([], [])
            self._tasks[key] = found
            if len(self._tasks) > self.max_tasks:
                dropped, _ = self._tasks.popitem(last=False)
                self._invalid.discard(dropped)
        else:
            self._tasks.move_to_end(key)
        sources, converted = found
        for message in transcript[len(sources) :]:
            sources.append(message)
            converted.append(to_langchain(message))
            if has_invalid_calls(message):
                self._invalid.add(key)
        out: list[BaseMessage] = [to_langchain(system)] if system is not None else []
        if view is transcript:  # unedited: no per-message work in Python
            out.extend(converted[: len(view)])
            return out
        for i, message in enumerate(view):
            if i < len(sources) and sources[i] is message:
                out.append(converted[i])
            else:  # edited by context editing (or not the cached object): convert it
                out.append(to_langchain(message))
        return out

    def forget(self, task_id: str) -> None:
        for key in [k for k in self._tasks if k[0] == task_id]:
            del self._tasks[key]
            self._invalid.discard(key)

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

from langchain_core.messages import BaseMessage

from contracts.messages import Message, to_langchain


class LangChainViews:
    def __init__(self, max_tasks: int) -> None:
        self.max_tasks = max_tasks
        # (task, rev) -> the converted messages of the transcript, in order, with the
        # source objects (identity says whether a view's message is the stored one)
        self._tasks: OrderedDict[tuple[str, int], tuple[list[Message], list[BaseMessage]]] = (
            OrderedDict()
        )

    def convert(
        self,
        task_id: str,
        rev: int,
        transcript: Sequence[Message],
        view: Sequence[Message],
        system: Message | None = None,
    ) -> list[BaseMessage]:
        """``view`` (the transcript, or an edited copy of it) as LangChain messages, the
        system message first."""
        key = (task_id, rev)
        found = self._tasks.get(key)
        if found is None:
            found = ([], [])
            self._tasks[key] = found
            if len(self._tasks) > self.max_tasks:
                self._tasks.popitem(last=False)
        else:
            self._tasks.move_to_end(key)
        sources, converted = found
        for message in transcript[len(sources) :]:
            sources.append(message)
            converted.append(to_langchain(message))
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

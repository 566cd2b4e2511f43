"""Chat models written as LangChain users write their own: one that implements
``_generate`` alone (no ``_stream``/``_astream``), one that streams its reply word by
word, and one whose stream yields nothing. Each answers from its script in order and
records what it was sent, so a parity test can run the same model class through
LangChain's ``create_agent`` and loopline's."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from pydantic import Field


class InvokeOnlyModel(BaseChatModel):
    """Implements ``_generate`` alone: LangChain never streams it."""

    script: list[AIMessage]
    sent: list[list[dict[str, Any]]] = Field(default_factory=list)
    """What each call was sent: the messages as dicts, without their ids."""

    @property
    def _llm_type(self) -> str:
        return "invoke-only"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[Any, AIMessage]:
        return self  # the script holds the tool calls

    def _next(self, messages: list[BaseMessage]) -> AIMessage:
        self.sent.append([m.model_dump(exclude={"id"}) for m in messages])
        return self.script[len(self.sent) - 1].model_copy()

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._next(messages))])


class WordStreamModel(InvokeOnlyModel):
    """Streams its reply word by word (its tool calls with the last word)."""

    @property
    def _llm_type(self) -> str:
        return "word-stream"

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        reply = self._next(messages)
        words = str(reply.content).split(" ")
        for n, word in enumerate(words):
            last = n == len(words) - 1
            chunk = AIMessageChunk(
                content=word if last else f"{word} ",
                tool_call_chunks=[
                    {"name": c["name"], "args": json.dumps(c["args"]), "id": c["id"], "index": i}
                    for i, c in enumerate(reply.tool_calls)
                ]
                if last
                else [],
            )
            yield ChatGenerationChunk(message=chunk)


class SilentStreamModel(InvokeOnlyModel):
    """Its stream yields no chunk (its ``_generate`` answers)."""

    @property
    def _llm_type(self) -> str:
        return "silent-stream"

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        self._next(messages)
        yield from ()

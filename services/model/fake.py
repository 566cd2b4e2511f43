"""A scripted chat model that runs inside the model consumer: for benchmarks that must
measure loopline, not HTTP, and for trying a deployment without any endpoint.

Selected by the model name ``fake`` with ``params: {"turns": [...], "latency": 0.0}``
(turns in the scripted server's JSON format). Like the scripted server, the reply is
picked by how many AI messages the conversation already has, so any number of concurrent
tasks following one script each get the right turn.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from pydantic import Field

from contracts.replies import Reply, replies_from_json


class ScriptedChatModel(BaseChatModel):
    # The script is not model configuration: kept out of the parameters LangChain
    # serializes on every call (as a real model's few settings are), or a long script
    # would cost more per call than the call itself.
    turns: list[dict[str, Any]] = Field(default_factory=list, exclude=True)
    latency: float = 0.0

    @property
    def _llm_type(self) -> str:
        return "loopline-fake"

    def _replies(self) -> tuple[Reply, ...]:
        cached: tuple[Reply, ...] | None = self.__dict__.get("_parsed")
        if cached is None:
            cached = replies_from_json(self.turns)
            self.__dict__["_parsed"] = cached
        return cached

    def reply_for(self, messages: Sequence[BaseMessage]) -> AIMessage:
        replies = self._replies()
        turn = sum(1 for m in messages if isinstance(m, AIMessage))
        if turn < len(replies):
            reply = replies[turn]
        else:
            reply = next((r for r in reversed(replies) if not r.tool_calls), Reply("done"))
        calls = [
            {"id": c.id or f"call_{turn}_{i}_{c.name}", "name": c.name, "args": dict(c.args)}
            for i, c in enumerate(reply.tool_calls)
        ]
        return AIMessage(content=reply.content, tool_calls=calls)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.latency:
            time.sleep(self.latency)
        return ChatResult(generations=[ChatGeneration(message=self.reply_for(messages))])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.latency:
            await asyncio.sleep(self.latency)
        return ChatResult(generations=[ChatGeneration(message=self.reply_for(messages))])

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[Any, Any]:
        return self  # the script decides the calls; schemas are not needed

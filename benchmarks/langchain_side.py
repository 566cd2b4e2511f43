"""The anchor: LangChain's ``create_agent`` in-process, with the same scripted replies.

The chat model is loopline's own scripted model (``services.model.fake.ScriptedChatModel``,
a plain ``BaseChatModel`` whose ``bind_tools`` returns itself), so both sides get
byte-identical replies and tool calls; the tools are the same functions
(``benchmarks.tools``). The subclass below only records when each model call starts.
"""

from __future__ import annotations

import json
import time
from typing import Any

from langchain_core.messages import BaseMessage, messages_to_dict

from benchmarks import tools
from benchmarks.stack import scripted_turns
from services.model.fake import ScriptedChatModel


class CallTimes:
    """Mixed into a chat model: records ``perf_counter()`` at the start of every model call
    (one list per task, keyed by the task's first message: the human message's content)."""

    def _record(self, messages: list[BaseMessage]) -> None:
        key = str(messages[0].content) if messages else ""
        calls: dict[str, list[float]] = self.__dict__.setdefault("_calls", {})
        calls.setdefault(key, []).append(time.perf_counter())

    def call_times(self) -> dict[str, list[float]]:
        return dict(self.__dict__.get("_calls", {}))


class TimedScriptedModel(CallTimes, ScriptedChatModel):
    """The scripted model, recording when each call starts."""

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self._record(messages)
        return super()._generate(messages, *args, **kwargs)

    async def _agenerate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self._record(messages)
        return await super()._agenerate(messages, *args, **kwargs)

    def reset(self) -> None:
        self.__dict__["_calls"] = {}


def make_agent(
    steps: int, *, latency: float = 0.0, tool: str = "noop", args: dict[str, Any] | None = None
) -> tuple[Any, TimedScriptedModel]:
    from langchain.agents import create_agent

    model = TimedScriptedModel(turns=scripted_turns(steps, tool=tool, args=args), latency=latency)
    agent = create_agent(model, tools=[tools.noop, tools.blob])
    return agent, model


def run_config(steps: int) -> dict[str, Any]:
    # LangGraph counts supersteps: two per agent step (model, tools) plus a few.
    return {"recursion_limit": 2 * steps + 10}


def state_bytes(messages: list[BaseMessage]) -> int:
    """What "ship the whole history every step" carries: the serialized message list."""
    return len(json.dumps(messages_to_dict(messages)).encode())


def make_http_agent(base_url: str) -> tuple[Any, Any]:
    """``create_agent`` with the real ``ChatOpenAI`` against the scripted HTTP server (the
    end-to-end variant of the step latency); the model records when each call starts."""
    from langchain.agents import create_agent
    from langchain_openai import ChatOpenAI

    class TimedChatOpenAI(CallTimes, ChatOpenAI):
        async def _agenerate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
            self._record(messages)
            return await super()._agenerate(messages, *args, **kwargs)

    model = TimedChatOpenAI(model="scripted", base_url=base_url, api_key="unused")
    return create_agent(model, tools=[tools.noop, tools.blob]), model

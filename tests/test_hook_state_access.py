"""Middleware hooks read and write the state through LangGraph's config as tools do
(deepagents' ``StateBackend`` from ``MemoryMiddleware.before_agent``, its summarization's
and filesystem's ``wrap_model_call``): ``get_config()["configurable"][CONFIG_KEY_READ]``
gives the state as the node sees it (``fresh=True``: with the node's own writes),
``[CONFIG_KEY_SEND]`` takes writes that join the state through the key's reducer before
the node's returned update. The ``wrap_model_call`` chain is eight sync layers deep, as
deepagents' stack is: deeper than the executor's threads, which a thread per layer
deadlocked. Next to LangChain's ``create_agent`` on twin scripted servers, ``invoke`` and
``ainvoke``, embedded."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from langchain.agents import create_agent as lc_create_agent
from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_openai import ChatOpenAI
from langgraph._internal._constants import CONFIG_KEY_READ, CONFIG_KEY_SEND
from langgraph.config import get_config

from contracts.replies import Reply
from loopline import create_agent
from loopline.testing.scripted import ScriptedOpenAIServer
from tests.config_tools import FilesState

SCRIPTS = {"hooked notes": [Reply(content="noted")]}
LAYERS = 8


def _read_and_send() -> tuple[Any, Any]:
    configurable = get_config()["configurable"]
    return configurable[CONFIG_KEY_READ], configurable[CONFIG_KEY_SEND]


def _note(text: str) -> dict[str, Any]:
    return {"content": text}


class NoteKeeper(AgentMiddleware[Any, Any, Any]):
    """Writes notes from ``before_agent`` (sent, then returned) and from
    ``wrap_model_call`` (sent after the model answered), each saying what it read."""

    state_schema = FilesState

    def _before(self) -> dict[str, Any]:
        read, send = _read_and_send()
        seen = sorted(read("files") or {})
        send([("files", {"agent.txt": _note(f"saw {seen}")})])
        fresh = sorted(read("files", True) or {})
        return {"files": {"returned.txt": _note(f"then {fresh}")}}

    def before_agent(self, state: Any, runtime: Any) -> dict[str, Any]:
        return self._before()

    async def abefore_agent(self, state: Any, runtime: Any) -> dict[str, Any]:
        return self._before()

    def _after_model(self, response: ModelResponse) -> ModelResponse:
        read, send = _read_and_send()
        seen = sorted(read("files") or {})
        send([("files", {"model.txt": _note(f"{response.result[-1].content} after {seen}")})])
        return response

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        return self._after_model(handler(request))

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        return self._after_model(await handler(request))


class Layer(AgentMiddleware[Any, Any, Any]):
    """A sync-only ``wrap_model_call`` layer that passes the call on."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    @property
    def name(self) -> str:
        return f"Layer{self.n}"

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        return handler(request)


def middleware(sync: bool) -> list[Any]:
    # an async run cannot take sync-only layers (LangChain's NotImplementedError)
    return [NoteKeeper(), *(Layer(n) for n in range(LAYERS) if sync)]


def the_input() -> Any:
    return {
        "messages": [{"role": "user", "content": "hooked notes"}],
        "files": {"seed.txt": _note("seed")},
    }


async def run(make: Any, server: ScriptedOpenAIServer, sync: bool) -> dict[str, Any]:
    model = ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="test")
    agent = make(model, [], middleware=middleware(sync), state_schema=FilesState)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if sync:
            result: dict[str, Any] = await asyncio.to_thread(agent.invoke, the_input())
        else:
            result = await agent.ainvoke(the_input())
    return result


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sync", [True, False], ids=["invoke", "ainvoke"])
async def test_hooks_read_and_send_state_as_langchain(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer], sync: bool
) -> None:
    lc = await run(lc_create_agent, servers[0], sync)
    ours = await run(create_agent, servers[1], sync)
    # what the test claims, read from LangChain's side
    assert lc["files"] == {
        "seed.txt": _note("seed"),
        "agent.txt": _note("saw ['seed.txt']"),
        "returned.txt": _note("then ['agent.txt', 'seed.txt']"),
        "model.txt": _note("noted after ['agent.txt', 'returned.txt', 'seed.txt']"),
    }
    assert ours["files"] == lc["files"]
    assert [m.content for m in ours["messages"]] == [m.content for m in lc["messages"]]
    assert servers[1].chat_requests() == servers[0].chat_requests()

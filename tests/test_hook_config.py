"""Hooks that declare a ``config`` parameter get LangGraph's ``RunnableConfig``, as
LangGraph's node passes it by the hook's signature (deepagents' MemoryMiddleware and
SkillsMiddleware declare ``before_agent(self, state, runtime, config)``): the run's
thread in ``configurable``, its tags, metadata and recursion limit, LangGraph's
``langgraph_*`` metadata of the node; a hook that declares ``config`` and no ``runtime``
gets the config only. Next to LangChain's ``create_agent`` on twin scripted servers,
deployed (every service its own process) and embedded."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

from langchain.agents import create_agent as lc_create_agent
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver

from contracts.replies import Reply
from loopline import create_agent
from loopline.testing.scripted import ScriptedOpenAIServer
from services.settings import Settings
from tests.config_tools import ConfigReader, ConfigState
from tests.support import EMBEDDED_PREFIX, ServiceProcesses, unique_prefix

PROMPT = "hook config"
SCRIPTS = {PROMPT: [Reply(content="configured")]}


def chat_model(server: ScriptedOpenAIServer) -> ChatOpenAI:
    return ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="test")


def run_config(where: str) -> Any:
    return {
        "configurable": {"thread_id": f"t-{where}-{unique_prefix()}"},
        "metadata": {"team": "blue", "where": where},
        "tags": ["second", "first"],  # in the order given, as LangGraph keeps them
        "recursion_limit": 40,
    }


def the_input(where: str) -> Any:
    return {"messages": [{"role": "user", "content": f"{PROMPT} {where}"}]}


def run_langchain(server: ScriptedOpenAIServer, where: str, config: Any) -> dict[str, Any]:
    agent = lc_create_agent(
        chat_model(server),
        [],
        state_schema=ConfigState,
        middleware=[ConfigReader()],
        checkpointer=InMemorySaver(),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result: dict[str, Any] = agent.invoke(the_input(where), config)
    return result


def expected_shape(configs: list[dict[str, Any]], config: Any) -> None:
    """What the test claims, read from LangChain's side."""
    thread = config["configurable"]["thread_id"]
    nodes = ["ConfigReader.before_agent", "ConfigReader.before_model"]
    assert [c["node"] for c in configs] == nodes
    assert [c["runtime"] for c in configs] == ["Runtime", None]
    for seen in configs:
        assert seen["thread_id"] == thread and seen["ns"] == seen["node"]
        assert seen["tags"] == ["second", "first"] and seen["recursion_limit"] == 40
        assert seen["metadata"]["team"] == "blue" and seen["metadata"]["thread_id"] == thread


def check_same(where: str, lc: dict[str, Any], ours: dict[str, Any], config: Any) -> None:
    expected_shape(lc["configs"], config)
    assert ours["configs"] == lc["configs"]
    assert [m.content for m in ours["messages"]] == [m.content for m in lc["messages"]]


async def test_deployed_hooks_get_the_config_as_langchain_gives_it(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    config = run_config("deployed")
    lc = await asyncio.to_thread(run_langchain, servers[0], "deployed", config)
    agent = create_agent(
        "gpt-4o-mini",
        [],
        state_schema=ConfigState,
        middleware=[ConfigReader()],
        settings=Settings(redis_url=stack.redis_url, prefix=stack.prefix),
    )
    ours = await agent.ainvoke(the_input("deployed"), config)
    check_same("deployed", lc, ours, config)


async def test_embedded_hooks_get_the_config_as_langchain_gives_it(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    config = run_config("embedded")
    lc = await asyncio.to_thread(run_langchain, servers[0], "embedded", config)
    agent = create_agent(
        chat_model(servers[1]),
        [],
        state_schema=ConfigState,
        middleware=[ConfigReader()],
        settings=Settings(prefix=EMBEDDED_PREFIX),
    )
    # sync, as deepagents' callers run it: the sync variants of the hooks
    ours = await asyncio.to_thread(agent.invoke, the_input("embedded"), config)
    check_same("embedded", lc, ours, config)

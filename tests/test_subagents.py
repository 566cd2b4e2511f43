"""Agents inside tools (sub-agents): a tool of one agent runs another agent, three levels
deep, as deepagents' ``task`` tool does. Each level's tools are its own (two agents' tools
of one name stay two tools), and a deployment whose every tool thread or consumer slot
holds a parent waiting for its child still finishes them all: the waiting call lends its
capacity back (``services.lending``). The same nesting through LangChain's
``create_agent``: the same model requests."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from langchain.agents import create_agent as lc_create_agent
from langchain.tools import ToolRuntime
from langchain_core.tools import StructuredTool

from contracts.replies import Reply, ScriptedToolCall
from loopline import create_agent
from loopline.testing.scripted import ScriptedOpenAIServer
from tests.error_cases import model_for

DEPTH = 3


def level_of(body: dict[str, Any]) -> int:
    return int(str(body["messages"][0]["content"]).split()[1])


def respond(body: dict[str, Any]) -> Reply:
    """Levels above the deepest delegate once, then answer."""
    level = level_of(body)
    answered = any(m["role"] == "assistant" for m in body["messages"])
    if level < DEPTH and not answered:
        asked = next(m["content"] for m in body["messages"] if m["role"] == "user")
        return Reply(tool_calls=(ScriptedToolCall("delegate", {"q": f"{asked}>{level}"}),))
    tool_says = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    return Reply(content=f"level {level} done {tool_says}")


RESPONDER = respond


def nested(make: Any, server: ScriptedOpenAIServer, *, sync: bool) -> Any:
    """Agents of levels DEPTH..0, each level's ``delegate`` tool running the next."""
    agents: dict[int, Any] = {}
    for level in range(DEPTH, -1, -1):

        def run_child(q: str, level: int = level) -> str:
            result = agents[level + 1].invoke({"messages": [{"role": "user", "content": q}]})
            return str(result["messages"][-1].content)

        async def arun_child(q: str, level: int = level) -> str:
            given = {"messages": [{"role": "user", "content": q}]}
            result = await agents[level + 1].ainvoke(given)
            return str(result["messages"][-1].content)

        delegate = StructuredTool.from_function(
            func=run_child if sync else None,
            coroutine=None if sync else arun_child,
            name="delegate",
            description="Ask the next agent.",
        )
        agents[level] = make(model_for(server), [delegate], system_prompt=f"level {level}")
    return agents[0]


def requests_by_prompt(server: ScriptedOpenAIServer, prefix: str) -> list[Any]:
    return sorted(
        (r["messages"] for r in server.chat_requests() if prefix in str(r["messages"])), key=str
    )


def test_nested_agents_run_their_own_tools_as_langchains(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    given = {"messages": [{"role": "user", "content": "parity"}]}
    lc = nested(lc_create_agent, servers[0], sync=True).invoke(given)
    ours = nested(create_agent, servers[1], sync=True).invoke(given)
    assert ours["messages"][-1].content == lc["messages"][-1].content
    assert "level 2 done" in str(lc["messages"][-1].content)
    sent = requests_by_prompt(servers[0], "parity")
    assert len(sent) == 2 * DEPTH + 1
    assert requests_by_prompt(servers[1], "parity") == sent


def test_parents_holding_every_tool_thread_still_finish(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    """Sync tools: a tool thread per waiting parent, more parents than threads."""
    top = nested(create_agent, servers[1], sync=True)
    runs = 4  # x DEPTH waiting parents: more than the tool threads (cpus + 4, at most 32)
    with ThreadPoolExecutor(runs) as pool:
        futures = [
            pool.submit(top.invoke, {"messages": [{"role": "user", "content": f"thread {i}"}]})
            for i in range(runs)
        ]
        answers = [f.result(timeout=120)["messages"][-1].content for f in futures]
    assert all(str(a).startswith("level 0 done") for a in answers)


@pytest.mark.timeout(240)
async def test_parents_holding_every_consumer_slot_still_finish(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    """Async tools: a tools-consumer slot per waiting parent, more parents than slots."""
    from services.settings import Settings

    top = nested(create_agent, servers[1], sync=False)
    runs = Settings().concurrency_tools // DEPTH + 2  # more waiting parents than slots
    given = [{"messages": [{"role": "user", "content": f"slot {i}"}]} for i in range(runs)]
    results = await asyncio.wait_for(asyncio.gather(*(top.ainvoke(g) for g in given)), 200)
    assert all(str(r["messages"][-1].content).startswith("level 0 done") for r in results)


def inheriting_respond(body: dict[str, Any]) -> Reply:
    """The parent delegates; the child asks who it runs for, then says it."""
    system = str(body["messages"][0]["content"])
    tool_says = [str(m["content"]) for m in body["messages"] if m["role"] == "tool"]
    if tool_says:
        return Reply(content=f"{system}: {tool_says[-1]}")
    if system == "parent":
        return Reply(tool_calls=(ScriptedToolCall("delegate", {"q": "who?"}),))
    return Reply(tool_calls=(ScriptedToolCall("whoami", {}),))


def whoami(runtime: ToolRuntime) -> str:
    """Say whose run this is."""
    metadata = (runtime.config or {}).get("metadata") or {}
    return f"context={runtime.context} team={metadata.get('team')}"


def inheriting(make: Any, server: ScriptedOpenAIServer) -> Any:
    child = make(model_for(server), [whoami], system_prompt="child")

    def delegate(q: str) -> str:
        """Ask the child agent."""
        result = child.invoke({"messages": [{"role": "user", "content": q}]})
        return str(result["messages"][-1].content)

    return make(model_for(server), [delegate], system_prompt="parent")


def test_a_sub_agent_takes_its_parents_context_and_metadata_as_langgraphs(
    embedded: None,
) -> None:
    given = {"messages": [{"role": "user", "content": "inherit"}]}
    config: Any = {"metadata": {"team": "blue"}}
    with (
        ScriptedOpenAIServer(responder=inheriting_respond) as lc_server,
        ScriptedOpenAIServer(responder=inheriting_respond) as ll_server,
    ):
        lc = inheriting(lc_create_agent, lc_server).invoke(
            given, config, context={"user": "ada"}
        )
        ours = inheriting(create_agent, ll_server).invoke(
            given, config, context={"user": "ada"}
        )
        assert "team=blue" in str(lc["messages"][-1].content)
        assert "'user': 'ada'" in str(lc["messages"][-1].content)
        assert ours["messages"][-1].content == lc["messages"][-1].content
        assert ll_server.chat_requests() == lc_server.chat_requests()

"""Human in the loop on the bus: a gated call waits with nothing in flight, survives
restarts of the loop and model services, and resumes from a CLI decision exactly as
LangChain's HumanInTheLoopMiddleware resumes from ``Command(resume=...)``."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from langchain.agents import create_agent as lc_create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware as LcHITL
from langchain_core.messages import HumanMessage as LcHumanMessage
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from contracts import ApprovalRequested, HumanMessage, TaskCompleted
from contracts.streams import GROUPS, Names
from loopline.agentfile import agent_from_dict
from loopline.client import Client
from loopline.testing.scripted import Reply, ScriptedOpenAIServer, ScriptedToolCall
from tests import tooling
from tests.support import ServiceProcesses, restart, run_cli

pytestmark = pytest.mark.asyncio(loop_scope="module")

TURNS = [
    Reply(
        tool_calls=(
            ScriptedToolCall("add", {"a": 1, "b": 2}),
            ScriptedToolCall("big_output", {"n": 3}),
        )
    ),
    Reply(content="the sum is what the tool said"),
]
SCRIPTS = {"gated": TURNS}
EDIT = {"name": "add", "args": {"a": 10, "b": 20}}


async def langchain_run(server: ScriptedOpenAIServer, prompt: str) -> dict[str, Any]:
    agent = lc_create_agent(
        ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="test"),
        tools=[tooling.add, tooling.big_output],
        middleware=[LcHITL(interrupt_on={"add": True})],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "t1"}}
    first = await agent.ainvoke({"messages": [LcHumanMessage(content=prompt)]}, config)
    assert "__interrupt__" in first
    resumed: dict[str, Any] = await agent.ainvoke(
        Command(resume={"decisions": [{"type": "edit", "edited_action": EDIT}]}), config
    )
    return resumed


async def test_gated_call_waits_survives_restarts_and_resumes_edited(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    prompt = f"gated {uuid.uuid4()}"
    lc_result = await langchain_run(servers[0], prompt)

    spec, _ = agent_from_dict(
        {
            "model": "gpt-4o-mini",
            "tools": ["tests.tooling:add", "tests.tooling:big_output"],
            "middleware": [{"type": "HumanInTheLoopMiddleware", "interrupt_on": {"add": True}}],
        }
    )
    names = Names(stack.prefix)
    async with Client(stack.redis_url, stack.prefix) as client:
        task_id = await client.submit(spec, [HumanMessage(content=prompt)])
        _, outcome = await client.outcome(task_id)
        assert isinstance(outcome, ApprovalRequested)
        actions = outcome.request["action_requests"]
        assert [(a["name"], a["args"]) for a in actions] == [("add", {"a": 1, "b": 2})]

        # waiting holds nothing: no entry pending anywhere, no tool ran
        for service in ("loop", "context", "model", "tools", "todos"):
            for stream in names.inputs_of(service):
                pending: Any = await client.redis.xpending(stream, GROUPS[service])
                assert pending["pending"] == 0
        assert await client.messages(task_id) == (await client.messages(task_id))[:1]

        restart(stack, "loop")
        restart(stack, "model")

        listed = run_cli(stack, "approvals", "--json")
        assert task_id in listed.stdout, listed.stderr
        decided = run_cli(stack, "decide", task_id, "--edit", json.dumps(EDIT["args"]))
        assert decided.returncode == 0, decided.stderr
        assert "the sum is what the tool said" in decided.stdout

        done = await client.wait(task_id)
        assert isinstance(done, TaskCompleted)
        messages = await client.messages(task_id)

    tool_results = {m.tool_call_id: m.text() for m in messages if m.type == "tool"}
    lc_tools = {m.tool_call_id: m.content for m in lc_result["messages"] if m.type == "tool"}
    assert tool_results == lc_tools
    assert any("30" in text and "Executed instead" in text for text in tool_results.values())
    # the model saw the same conversation after the decision as LangChain's did
    lc_last = servers[0].chat_requests()[-1]["messages"]
    ll_last = [r for r in servers[1].chat_requests() if prompt in str(r["messages"])][-1]
    assert ll_last["messages"] == lc_last

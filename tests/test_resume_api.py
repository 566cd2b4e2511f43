"""``agent.resume`` / ``agent.aresume`` (the Python API, not the CLI) for a call gated by
HumanInTheLoopMiddleware: approve, edit, reject and respond, each against LangChain's
agent resumed with ``Command(resume=...)`` on the same scripted conversation. The
interrupt each side raises, the messages each run ends with and every request its model
received must be the same."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from langchain.agents import create_agent as lc_create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware as LcHITL
from langchain_core.messages import HumanMessage as LcHumanMessage
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from contracts.messages import to_langchain
from loopline.agent import Agent, create_agent
from loopline.client import Client
from loopline.middleware import HumanInTheLoopMiddleware
from loopline.testing.scripted import (
    Reply,
    ScriptedOpenAIServer,
    ScriptedToolCall,
    first_user_text,
)
from services.settings import Settings
from tests import tooling
from tests.support import ServiceProcesses, wait_for

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
SCRIPTS: dict[str, Sequence[Reply]] = {}
GATE: dict[str, Any] = {"add": True}


def new_prompt() -> str:
    key = f"[{uuid.uuid4().hex[:12]}]"
    SCRIPTS[key] = TURNS
    return f"{key} add one and two"


async def langchain_run(
    server: ScriptedOpenAIServer, prompt: str, decision: dict[str, Any]
) -> tuple[Any, dict[str, Any]]:
    """(LangChain's interrupt value, its result after resuming with the decision)."""
    agent = lc_create_agent(
        ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="test", max_retries=0),
        tools=[tooling.add, tooling.big_output],
        middleware=[LcHITL(interrupt_on=GATE)],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": uuid.uuid4().hex}}
    first = await agent.ainvoke({"messages": [LcHumanMessage(content=prompt)]}, config)
    (interrupt,) = first["__interrupt__"]
    resumed = await agent.ainvoke(Command(resume={"decisions": [decision]}), config)
    return interrupt.value, resumed


def loopline_agent(stack: ServiceProcesses) -> Agent:
    return create_agent(
        "gpt-4o-mini",
        tools=[tooling.add, tooling.big_output],
        middleware=[HumanInTheLoopMiddleware(interrupt_on=GATE)],
        redis_url=stack.redis_url,
        settings=Settings(prefix=stack.prefix),
    )


def view(messages: list[Any]) -> list[tuple[Any, ...]]:
    out = []
    for m in messages:
        calls = [(c["name"], c["args"], c["id"]) for c in getattr(m, "tool_calls", [])]
        out.append(
            (
                m.type,
                str(m.text),
                calls,
                getattr(m, "tool_call_id", None),
                getattr(m, "status", None),
            )
        )
    return out


def requests_for(server: ScriptedOpenAIServer, prompt: str) -> list[dict[str, Any]]:
    return [r for r in server.chat_requests() if first_user_text(r) == prompt]


def tool_results(messages: list[Any]) -> dict[str, tuple[str, str]]:
    return {m.tool_call_id: (str(m.text), m.status) for m in messages if m.type == "tool"}


EDIT: dict[str, Any] = {
    "type": "edit",
    "edited_action": {"name": "add", "args": {"a": 10, "b": 20}},
}
CASES: dict[str, tuple[dict[str, Any], tuple[str, str] | None]] = {
    "approve": ({"type": "approve"}, ("3", "success")),
    "edit": (EDIT, None),
    "reject": (
        {"type": "reject", "message": "not now"},
        ("User rejected the tool call for `add` with reason: not now", "error"),
    ),
    "respond": ({"type": "respond", "message": "it is 3"}, ("it is 3", "success")),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_aresume_matches_langchain(
    stack: ServiceProcesses,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    case: str,
) -> None:
    decision, expected_add = CASES[case]
    prompt = new_prompt()
    lc_request, lc_result = await langchain_run(servers[0], prompt, decision)

    agent = loopline_agent(stack)
    first = await agent.ainvoke({"messages": prompt})
    assert first["__interrupt__"] == [lc_request]  # the same HITLRequest, as plain data
    assert [(a["name"], a["args"]) for a in lc_request["action_requests"]] == [
        ("add", {"a": 1, "b": 2})
    ]
    assert not any(m.type == "tool" for m in first["messages"])  # nothing ran yet

    result = await agent.aresume(first["task_id"], [decision])
    assert "__interrupt__" not in result
    assert result["task_id"] == first["task_id"]
    assert view(result["messages"]) == view(lc_result["messages"])
    assert result["messages"][-1].text == "the sum is what the tool said"
    ours = tool_results(result["messages"])
    assert ours["call_0_1_big_output"] == ("xxx", "success")  # ungated: ran as asked
    if expected_add is not None:
        assert ours["call_0_0_add"] == expected_add
    else:  # the edited call ran with the edited arguments, and the model is told
        text, status = ours["call_0_0_add"]
        assert status == "success" and "30" in text and "Executed instead" in text
    # the model saw the same conversations, before and after the decision
    lc_sent, ll_sent = requests_for(servers[0], prompt), requests_for(servers[1], prompt)
    assert len(ll_sent) == 2
    assert ll_sent == lc_sent


async def test_sync_invoke_and_resume(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    """``invoke`` / ``resume`` as a script without an event loop calls them."""
    decision = EDIT
    prompt = new_prompt()
    _, lc_result = await langchain_run(servers[0], prompt, decision)
    agent = loopline_agent(stack)

    def script() -> tuple[dict[str, Any], dict[str, Any]]:
        first = agent.invoke({"messages": prompt})
        return first, agent.resume(first["task_id"], [decision])

    first, result = await asyncio.to_thread(script)
    assert "__interrupt__" in first
    assert view(result["messages"]) == view(lc_result["messages"])
    assert requests_for(servers[1], prompt) == requests_for(servers[0], prompt)


async def test_a_task_that_is_not_waiting_is_not_resumed(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    """Decisions for a task that waits for none change nothing: the finished task keeps
    its messages and its model is not called again."""
    prompt = new_prompt()
    agent = loopline_agent(stack)
    first = await agent.ainvoke({"messages": prompt})
    task_id = first["task_id"]
    done = await agent.aresume(task_id, [{"type": "approve"}])
    assert "__interrupt__" not in done
    before = view(done["messages"])
    async with Client(stack.redis_url, stack.prefix) as client:
        assert await client.waiting(task_id) is None
        await client.decide(task_id, [{"type": "approve"}])  # a second, late answer

        async def refused() -> list[str]:
            return [e.error for _, e in await client.dead_letters() if e.task_id == task_id]

        (error,) = await wait_for(refused, timeout=15)  # the loop handled it: refused
        assert "is not waiting for a decision" in error
        stored = [to_langchain(m) for m in await client.messages(task_id)]
        assert view(stored) == before
    assert len(requests_for(servers[1], prompt)) == 2

"""HumanInTheLoopMiddleware's reviews where LangChain 1.5 is particular about them, the
same agent through LangChain's ``create_agent`` (an ``InMemorySaver``) and through
loopline, embedded (every service in this process) and deployed (each service its own
process), against twin scripted servers:

- per call, a decision that does not fit the call's ``response_schema`` raises LangGraph's
  own pydantic ``ValidationError`` from the resume (``invoke`` and ``stream``), with the
  same text; nothing runs and
  the call still waits, so a decision that fits runs it once;
- batched, an edit naming another of the agent's tools runs that tool (LangChain looks it
  up in ``request.runtime.tools``); the model is told what ran instead;
- a later step's call reusing an edited call's id (models do reuse ids) runs with its
  own arguments, without the earlier edit or the earlier call's result.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langchain.agents import create_agent as lc_create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from pydantic import ValidationError

from loopline import create_agent
from loopline.testing.scripted import Reply, ScriptedOpenAIServer, ScriptedToolCall
from services.settings import Settings
from tests import tooling
from tests.support import ServiceProcesses, embedded_agent

SCRIPTS: dict[str, list[Reply]] = {
    "per call refused": [
        Reply(tool_calls=(ScriptedToolCall("add", {"a": 1, "b": 2}),)),
        Reply(content="added"),
    ],
    "redirect": [
        Reply(tool_calls=(ScriptedToolCall("add", {"a": 3, "b": 4}),)),
        Reply(content="the reviewer chose another tool"),
    ],
    "reused id": [
        Reply(tool_calls=(ScriptedToolCall("add", {"a": 1, "b": 1}, id="same"),)),
        # the same id on a tool that is not gated: nothing to review this turn
        Reply(tool_calls=(ScriptedToolCall("big_output", {"n": 2}, id="same"),)),
        Reply(content="both ran"),
    ],
}
TOOLS: list[Any] = [tooling.add, tooling.big_output]
TOOL_PATHS = ["tests.tooling:add", "tests.tooling:big_output"]
NOT_AN_EDIT = {"type": "edit"}  # no edited_action: the schema refuses it
EDIT_ADD = {"type": "edit", "edited_action": {"name": "add", "args": {"a": 10, "b": 20}}}
REDIRECT = {"type": "edit", "edited_action": {"name": "big_output", "args": {"n": 3}}}


def per_call() -> HumanInTheLoopMiddleware:
    return HumanInTheLoopMiddleware(interrupt_on={"add": True}, interrupt_mode="per_call")


def batched() -> HumanInTheLoopMiddleware:
    return HumanInTheLoopMiddleware(
        interrupt_on={"add": {"allowed_decisions": ["approve", "edit"]}}
    )


def langchain_agent(server: ScriptedOpenAIServer, middleware: Any) -> Any:
    model = ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="test")
    return lc_create_agent(
        model, tools=TOOLS, middleware=[middleware], checkpointer=InMemorySaver()
    )


def deployed_agent(stack: ServiceProcesses, middleware: Any) -> Any:
    return create_agent(
        "gpt-4o-mini",
        TOOL_PATHS,
        middleware=[middleware],
        checkpointer=InMemorySaver(),
        settings=Settings(redis_url=stack.redis_url, prefix=stack.prefix),
    )


def refused_then_fitting(agent: Any, prompt: str) -> dict[str, Any]:
    """Pause at the call, answer it badly (the error's class and text), then well."""
    config: Any = {"configurable": {"thread_id": f"t-{uuid.uuid4().hex[:8]}"}}
    [asked] = agent.invoke({"messages": [{"role": "user", "content": prompt}]}, config)[
        "__interrupt__"
    ]
    with pytest.raises(ValidationError) as raised:
        agent.invoke(Command(resume={asked.id: NOT_AN_EDIT}), config)
    with pytest.raises(ValidationError) as streamed:  # stream raises as invoke does
        list(agent.stream(Command(resume={asked.id: NOT_AN_EDIT}), config, stream_mode="updates"))
    assert str(streamed.value) == str(raised.value)
    [still] = agent.get_state(config).interrupts
    final = agent.invoke(Command(resume={asked.id: EDIT_ADD}), config)
    return {
        "error": (type(raised.value), str(raised.value), raised.value.errors()),
        "still_waits": (still.id == asked.id, still.value),
        "messages": [(m.type, m.content) for m in final["messages"]],
    }


def redirected(agent: Any, prompt: str) -> list[tuple[str, Any, Any]]:
    config: Any = {"configurable": {"thread_id": f"t-{uuid.uuid4().hex[:8]}"}}
    agent.invoke({"messages": [{"role": "user", "content": prompt}]}, config)
    final = agent.invoke(Command(resume={"decisions": [REDIRECT]}), config)
    return [(m.type, m.content, getattr(m, "name", None)) for m in final["messages"]]


def requests_of(server: ScriptedOpenAIServer, prompt: str) -> list[Any]:
    return [r["messages"] for r in server.chat_requests() if prompt in str(r["messages"])]


def check_refused(lc: dict[str, Any], ours: dict[str, Any]) -> None:
    assert ours == lc
    cls, text, errors = lc["error"]
    assert cls is ValidationError and "edit.edited_action" in text
    assert errors[0]["type"] == "missing"
    assert lc["messages"][2][1].endswith("30")  # the edited call ran, once


def test_a_refused_per_call_decision_raises_langgraphs_error_embedded(
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
) -> None:
    lc_server, ll_server = servers
    prompt = "per call refused"
    lc = refused_then_fitting(langchain_agent(lc_server, per_call()), prompt)
    agent = embedded_agent(redis_url, monkeypatch, ll_server, tools=TOOLS, middleware=[per_call()])
    check_refused(lc, refused_then_fitting(agent, prompt))
    assert requests_of(ll_server, prompt) == requests_of(lc_server, prompt)


def test_a_refused_per_call_decision_raises_langgraphs_error_deployed(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    lc_server, ll_server = servers
    prompt = "per call refused"
    before = len(requests_of(ll_server, prompt))
    lc = refused_then_fitting(langchain_agent(lc_server, per_call()), prompt)
    check_refused(lc, refused_then_fitting(deployed_agent(stack, per_call()), prompt))
    assert requests_of(ll_server, prompt)[before:] == requests_of(lc_server, prompt)[-2:]


def check_redirected(lc: list[tuple[str, Any, Any]], ours: list[tuple[str, Any, Any]]) -> None:
    assert ours == lc
    tool_type, content, name = lc[2]
    assert tool_type == "tool" and name == "big_output"
    assert "Executed instead: big_output" in content and content.endswith("x" * 3)


def test_an_edit_to_another_tool_runs_that_tool_embedded(
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
) -> None:
    lc_server, ll_server = servers
    lc = redirected(langchain_agent(lc_server, batched()), "redirect")
    agent = embedded_agent(redis_url, monkeypatch, ll_server, tools=TOOLS, middleware=[batched()])
    check_redirected(lc, redirected(agent, "redirect"))
    assert requests_of(ll_server, "redirect") == requests_of(lc_server, "redirect")


def test_an_edit_to_another_tool_runs_that_tool_deployed(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    lc_server, ll_server = servers
    before = len(requests_of(ll_server, "redirect"))
    lc = redirected(langchain_agent(lc_server, batched()), "redirect")
    check_redirected(lc, redirected(deployed_agent(stack, batched()), "redirect"))
    assert requests_of(ll_server, "redirect")[before:] == requests_of(lc_server, "redirect")[-2:]


def reused(agent: Any, prompt: str) -> list[tuple[str, Any]]:
    config: Any = {"configurable": {"thread_id": f"t-{uuid.uuid4().hex[:8]}"}}
    agent.invoke({"messages": [{"role": "user", "content": prompt}]}, config)
    final = agent.invoke(Command(resume={"decisions": [EDIT_ADD]}), config)
    return [(m.type, m.content) for m in final["messages"]]


def check_reused(lc: list[tuple[str, Any]], ours: list[tuple[str, Any]]) -> None:
    assert ours == lc
    assert lc[2][1].endswith("30") and lc[4] == ("tool", "xx")  # edited add, then its own


def test_a_reused_call_id_runs_its_own_call_embedded(
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
) -> None:
    lc_server, ll_server = servers
    lc = reused(langchain_agent(lc_server, batched()), "reused id")
    agent = embedded_agent(redis_url, monkeypatch, ll_server, tools=TOOLS, middleware=[batched()])
    check_reused(lc, reused(agent, "reused id"))
    assert requests_of(ll_server, "reused id") == requests_of(lc_server, "reused id")


def test_a_reused_call_id_runs_its_own_call_deployed(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    lc_server, ll_server = servers
    before = len(requests_of(ll_server, "reused id"))
    lc = reused(langchain_agent(lc_server, batched()), "reused id")
    check_reused(lc, reused(deployed_agent(stack, batched()), "reused id"))
    assert requests_of(ll_server, "reused id")[before:] == requests_of(lc_server, "reused id")[-3:]

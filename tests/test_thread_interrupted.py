"""A new input on a thread whose run waits for a human runs, as in LangGraph: the run
stopped at its interrupt has ended there (its checkpoint holds the model's reply with
the unanswered tool call), and the new run starts from it, so the model is sent the
unanswered call followed by the new human message; nothing waits any more. Side by side
with LangChain's ``create_agent`` + ``InMemorySaver`` on twin scripted servers, loopline
embedded (every service in this process), whatever the double-texting strategy."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent as lc_create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver

from loopline import create_agent
from loopline.testing.scripted import Reply, ScriptedOpenAIServer, ScriptedToolCall
from services.settings import Settings
from tests import tooling
from tests.interrupt_tooling import ask_human
from tests.support import EMBEDDED_PREFIX

pytestmark = pytest.mark.fast


def RESPONDER(body: dict[str, Any]) -> Reply:
    """``gated ...`` asks for ``add``, ``ask ...`` for ``ask_human`` (both wait for a
    human); anything else is answered with what the model was sent, in order."""
    last = body["messages"][-1]
    text = str(last.get("content") or "")
    if last["role"] == "user" and text.startswith("gated"):
        return Reply(tool_calls=(ScriptedToolCall("add", {"a": 1, "b": 2}),))
    if last["role"] == "user" and text.startswith("ask"):
        return Reply(tool_calls=(ScriptedToolCall("ask_human", {"question": "which?"}),))
    return Reply(content=f"after {len(body['messages'])} messages: {text}")


def chat_model(server: ScriptedOpenAIServer) -> ChatOpenAI:
    return ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="test")


def shape(messages: list[Any]) -> list[tuple[Any, ...]]:
    return [
        (m.type, m.content, [(c["name"], c["args"], c["id"]) for c in getattr(m, "tool_calls", [])])
        for m in messages
    ]


def new_input_while_waiting(
    agent: Any, server: ScriptedOpenAIServer, first: str, **kwargs: Any
) -> tuple[Any, ...]:
    """``first`` stops at an interrupt; a new human message on the thread, then its
    model request, the result and the state after it."""
    config = {"configurable": {"thread_id": "t"}}
    waiting = agent.invoke({"messages": first}, config)
    assert "__interrupt__" in waiting
    before = len(server.chat_requests())
    result = agent.invoke({"messages": "something else"}, config, **kwargs)
    requests = [r["messages"] for r in server.chat_requests()[before:]]
    return requests, shape(result["messages"]), agent.get_state(config)


@pytest.fixture
def loopline_settings(embedded: None) -> Settings:
    return Settings(prefix=EMBEDDED_PREFIX)


CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "hitl": ("gated one", {"middleware": [HumanInTheLoopMiddleware(interrupt_on={"add": True})]}),
    "tool": ("ask one", {"tools": [ask_human]}),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("strategy", ["reject", "enqueue", "rollback"])
def test_a_new_input_on_a_waiting_thread_runs_as_in_langgraph(
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    loopline_settings: Settings,
    case: str,
    strategy: str,
) -> None:
    lc_server, ll_server = servers
    first, kwargs = CASES[case]
    kwargs = {"tools": [tooling.add], **kwargs}  # the case may name its own tools
    lc = lc_create_agent(chat_model(lc_server), checkpointer=InMemorySaver(), **kwargs)
    ll = create_agent(
        chat_model(ll_server), checkpointer=InMemorySaver(), settings=loopline_settings, **kwargs
    )
    theirs = new_input_while_waiting(lc, lc_server, first)
    ours = new_input_while_waiting(ll, ll_server, first, multitask_strategy=strategy)

    assert ours[0] == theirs[0]  # the model requests
    assert ours[1] == theirs[1]  # the result's messages
    assert ours[2].next == theirs[2].next == ()
    assert ours[2].interrupts == theirs[2].interrupts == ()
    assert shape(ours[2].values["messages"]) == shape(theirs[2].values["messages"])
    # what LangGraph sends: the unanswered call, then the new message
    sent = ours[0][0]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[1]["tool_calls"] and sent[2]["content"] == "something else"

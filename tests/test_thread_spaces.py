"""The checkpointer decides where a thread lives, as in LangGraph: two agents each with
its own ``InMemorySaver`` and one thread id hold two independent threads; one saver
shared by two agents holds one. Side by side with LangChain's ``create_agent`` on twin
scripted servers (the same replies, each side's model requests recorded), loopline
embedded (every service in this process, on the session's Redis). Callers see their own
thread id everywhere (results, ``get_state``'s config, stream metadata); without a
checkpointer, a thread is the deployment's, which any client of it reads by its id."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langchain.agents import create_agent as lc_create_agent
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver

from contracts.streams import shown_thread_id
from loopline import create_agent
from loopline.client import Client
from loopline.testing.scripted import Reply, ScriptedOpenAIServer
from loopline.threads import DEPLOYMENT, space_of
from services.settings import Settings
from tests.support import EMBEDDED_PREFIX

pytestmark = pytest.mark.fast


def RESPONDER(body: dict[str, Any]) -> Reply:
    """Says what the model was sent: the user messages in order, so a thread that holds
    another's turns shows in the reply as well as in the request."""
    users = [str(m["content"]) for m in body["messages"] if m.get("role") == "user"]
    return Reply(content="heard: " + " | ".join(users))


def chat_model(server: ScriptedOpenAIServer) -> ChatOpenAI:
    return ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="test")


def say(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def conversation(
    make: Any, server: ScriptedOpenAIServer, savers: tuple[Any, Any], thread: str
) -> tuple[list[list[Any]], list[dict[str, Any]], list[Any]]:
    """Two agents (``make(model, saver)``), each on its saver of ``savers``, take turns
    on one thread id: a1, a2, a1. The model requests' messages per turn, the results and
    each agent's state at the end."""
    agents = [make(chat_model(server), savers[0]), make(chat_model(server), savers[1])]
    config = {"configurable": {"thread_id": thread}}
    requests, results = [], []
    for turn, which in enumerate((0, 1, 0)):
        before = len(server.chat_requests())
        results.append(agents[which].invoke(say(f"turn {turn} to agent {which}"), config))
        requests.append([r["messages"] for r in server.chat_requests()[before:]])
    return requests, results, [a.get_state(config) for a in agents]


def texts(messages: list[Any]) -> list[str]:
    return [str(m.content) for m in messages]


@pytest.fixture
def loopline_agent(embedded: None) -> Any:
    settings = Settings(prefix=EMBEDDED_PREFIX)

    def make(model: ChatOpenAI, saver: Any) -> Any:
        return create_agent(model, checkpointer=saver, settings=settings)

    return make


def langchain_agent(model: ChatOpenAI, saver: Any) -> Any:
    return lc_create_agent(model, checkpointer=saver)


@pytest.mark.parametrize("shared", [False, True], ids=["own-savers", "one-saver"])
def test_a_thread_lives_in_its_checkpointer_as_in_langgraph(
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer], loopline_agent: Any, shared: bool
) -> None:
    lc_server, ll_server = servers
    thread = "t"  # one id for every test: each saver is its own space
    lc_saver, ll_saver = InMemorySaver(), InMemorySaver()
    lc_savers = (lc_saver, lc_saver) if shared else (lc_saver, InMemorySaver())
    ll_savers = (ll_saver, ll_saver) if shared else (ll_saver, InMemorySaver())
    theirs = conversation(langchain_agent, lc_server, lc_savers, thread)
    ours = conversation(loopline_agent, ll_server, ll_savers, thread)

    assert ours[0] == theirs[0]  # every model request, turn by turn
    assert [texts(r["messages"]) for r in ours[1]] == [texts(r["messages"]) for r in theirs[1]]
    for mine, lcs in zip(ours[2], theirs[2], strict=True):
        assert texts(mine.values["messages"]) == texts(lcs.values["messages"])
        assert mine.config["configurable"]["thread_id"] == thread  # the caller's id
    # what each case means, so the comparison cannot pass on two wrong sides
    last = ours[1][2]["messages"][-1].content
    if shared:
        assert last == "heard: turn 0 to agent 0 | turn 1 to agent 1 | turn 2 to agent 0"
    else:
        assert last == "heard: turn 0 to agent 0 | turn 2 to agent 0"
        assert texts(ours[2][1].values["messages"]) == [
            "turn 1 to agent 1",
            "heard: turn 1 to agent 1",
        ]


def test_stream_metadata_names_the_callers_thread(
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer], loopline_agent: Any
) -> None:
    agent = loopline_agent(chat_model(servers[1]), InMemorySaver())
    config = {"configurable": {"thread_id": "mine"}}
    items = list(agent.stream(say("stream it"), config, stream_mode="messages"))
    assert items and all(meta["thread_id"] == "mine" for _, meta in items)
    assert agent.get_state(config).values["messages"][-1].content == "heard: stream it"


async def test_without_a_checkpointer_a_thread_is_the_deployments(
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    loopline_agent: Any,
    redis_url: str,
) -> None:
    """Agents without a checkpointer share the deployment's threads (any client reads
    them by their id); an in-memory saver's thread of the same id is apart from them."""
    thread = f"deployed-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread}}
    model = chat_model(servers[1])
    first, second = loopline_agent(model, None), loopline_agent(model, None)
    await first.ainvoke(say("one"), config)
    result = await second.ainvoke(say("two"), config)
    assert result["messages"][-1].content == "heard: one | two"
    apart = loopline_agent(model, InMemorySaver())
    assert (await apart.ainvoke(say("three"), config))["messages"][-1].content == "heard: three"
    async with Client(redis_url, EMBEDDED_PREFIX) as client:
        state = await client.threads().current(thread)
    assert texts(state.messages) == ["one", "heard: one", "two", "heard: one | two"]


def test_savers_map_to_spaces() -> None:
    saver = InMemorySaver()
    assert space_of(None) is DEPLOYMENT and space_of(True) is DEPLOYMENT
    assert space_of(saver) == space_of(saver) != space_of(InMemorySaver())
    space = space_of(saver)
    assert space.thread_id(space.key("a/b")) == "a/b"  # any id, slashes included
    assert space.thread_id("a/b") is None and DEPLOYMENT.key("x") == "x"
    # what a caller reads in a refusal's text: its own id
    assert shown_thread_id(space.key("a/b")) == "a/b" and shown_thread_id("x/y") == "x/y"

"""The checkpointer is the record of a thread, in LangGraph's own format: a thread that
loopline runs is continued by LangChain's ``create_agent`` on the same saver, and the
other way round, turn after turn, with the model sent the whole conversation each time:
the same requests as LangChain's agent alone on a saver of its own. Loopline embedded
(every service in this process), twin scripted servers; LangGraph's ``InMemorySaver``
and, where the packages and a local PostgreSQL are there, ``PostgresSaver``."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis as syncredis
from langchain.agents import create_agent as lc_create_agent
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver

from contracts.streams import Names
from loopline import create_agent
from loopline.testing.scripted import Reply, ScriptedOpenAIServer
from services.settings import Settings
from tests.support import EMBEDDED_PREFIX

pytestmark = pytest.mark.fast

POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"


def RESPONDER(body: dict[str, Any]) -> Reply:
    users = [str(m["content"]) for m in body["messages"] if m.get("role") == "user"]
    return Reply(content="heard: " + " | ".join(users))


def chat_model(server: ScriptedOpenAIServer) -> ChatOpenAI:
    return ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="test")


def need_postgres() -> None:
    """Skip, saying why, where no PostgreSQL answers at ``POSTGRES_URL``;
    ``LOOPLINE_TEST_POSTGRES=1`` (set by CI) asks for these tests: then it fails them."""
    import psycopg

    try:
        psycopg.connect(POSTGRES_URL, connect_timeout=3).close()
    except psycopg.OperationalError as exc:
        if os.environ.get("LOOPLINE_TEST_POSTGRES") == "1":
            pytest.fail(f"LOOPLINE_TEST_POSTGRES=1 but no PostgreSQL at {POSTGRES_URL}: {exc}")
        pytest.skip(f"no PostgreSQL at {POSTGRES_URL}: {exc}")


def postgres_saver() -> Iterator[Any]:
    need_postgres()
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(POSTGRES_URL) as saver:
        saver.setup()
        yield saver


@pytest.fixture(params=["memory", "postgres"])
def saver(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "memory":
        yield InMemorySaver()
    else:
        yield from postgres_saver()


def turns(agents: list[Any], servers: list[ScriptedOpenAIServer], thread: str) -> list[Any]:
    """One turn by each agent in order on one thread: the messages of each turn's model
    request."""
    config = {"configurable": {"thread_id": thread}}
    sent = []
    for turn, (agent, server) in enumerate(zip(agents, servers, strict=True)):
        before = len(server.chat_requests())
        agent.invoke({"messages": f"turn {turn}"}, config)
        sent.append([r["messages"] for r in server.chat_requests()[before:]])
    return sent


@pytest.mark.parametrize("first", ["loopline", "langchain"])
def test_a_thread_goes_back_and_forth_between_loopline_and_langgraph(
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    embedded: None,
    saver: Any,
    first: str,
) -> None:
    lc_server, ll_server = servers
    thread = f"both-{uuid.uuid4().hex[:8]}"
    reference = turns(
        [lc_create_agent(chat_model(lc_server), checkpointer=InMemorySaver())] * 4,
        [lc_server] * 4,
        thread,
    )

    lc = lc_create_agent(chat_model(lc_server), checkpointer=saver)
    ll = create_agent(
        chat_model(ll_server), checkpointer=saver, settings=Settings(prefix=EMBEDDED_PREFIX)
    )
    order = [(ll, ll_server), (lc, lc_server)] * 2
    if first == "langchain":
        order = order[1:] + order[:1]
    got = turns([a for a, _ in order], [s for _, s in order], thread)

    assert got == reference  # every turn's model saw the whole conversation
    assert len(got[3][0]) == 7  # 3 turns, their answers, and the 4th turn's input
    config: Any = {"configurable": {"thread_id": thread}}
    theirs = [m.content for m in lc.get_state(config).values["messages"]]
    assert theirs[-2:] == ["turn 3", "heard: turn 0 | turn 1 | turn 2 | turn 3"]
    assert [m.content for m in ll.get_state(config).values["messages"]] == theirs


def test_an_in_process_savers_thread_comes_back_from_the_saver_once_redis_let_it_go(
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer], embedded: None, redis_url: str
) -> None:
    """Redis holds a working copy of an ``InMemorySaver``'s thread, which expires once
    idle for the retention time (the threads of a process that is gone do not stay there
    for ever); the saver holds the record, and the next run starts from it."""
    settings = Settings(prefix=EMBEDDED_PREFIX)
    ll = create_agent(chat_model(servers[1]), checkpointer=InMemorySaver(), settings=settings)
    config = {"configurable": {"thread_id": "kept-by-its-saver"}}
    ll.invoke({"messages": "turn 0"}, config)
    names, key = Names(EMBEDDED_PREFIX), ll.thread_space.key("kept-by-its-saver")
    r = syncredis.Redis.from_url(redis_url)
    deadline = time.monotonic() + 10
    while r.hget(names.thread_state(key), "active") != b"" and time.monotonic() < deadline:
        time.sleep(0.02)  # the run's end is written back just after it
    assert 0 < r.ttl(names.thread_state(key)) <= settings.retention_s
    r.delete(*names.thread_keys(key))  # as its expiry does
    result = ll.invoke({"messages": "turn 1"}, config)
    assert result["messages"][-1].content == "heard: turn 0 | turn 1"


async def test_a_thread_goes_back_and_forth_on_an_async_postgres_saver(
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer], embedded: None
) -> None:
    """``AsyncPostgresSaver`` (async only): LangChain's ``ainvoke``, then loopline's, then
    LangChain's again, each turn's model sent the whole conversation."""
    need_postgres()
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    lc_server, ll_server = servers
    config = {"configurable": {"thread_id": f"async-{uuid.uuid4().hex[:8]}"}}
    async with AsyncPostgresSaver.from_conn_string(POSTGRES_URL) as saver:
        await saver.setup()
        lc = lc_create_agent(chat_model(lc_server), checkpointer=saver)
        ll = create_agent(
            chat_model(ll_server), checkpointer=saver, settings=Settings(prefix=EMBEDDED_PREFIX)
        )
        answers = []
        agents: list[Any] = [lc, ll, lc]
        for turn, agent in enumerate(agents):
            result = await agent.ainvoke({"messages": f"turn {turn}"}, config)
            answers.append(result["messages"][-1].content)
    assert answers == [
        "heard: turn 0",
        "heard: turn 0 | turn 1",
        "heard: turn 0 | turn 1 | turn 2",
    ]

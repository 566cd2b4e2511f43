"""The gateway's deployment keeps its threads in a real PostgreSQL
(``LOOPLINE_CHECKPOINT_POSTGRES_URL``): a thread run through ``loopline serve api``
(the real ``langgraph_sdk``, the services as processes: ``test_http_gateway``'s
fixtures) is written there in LangGraph's format, a checkpoint per superstep, which
LangChain's own ``create_agent`` reads back with the history the gateway shows; and a
thread whose working copy left Redis continues from PostgreSQL on its next run, the
model sent the whole conversation.

The local PostgreSQL (``tests.test_thread_checkpoints.POSTGRES_URL``); each thread id is
new and the deployment's prefix is the test's own, so the saver's threads
(``<prefix>:<thread id>``) are too."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import pytest
import redis.asyncio as aioredis
from langchain.agents import create_agent as lc_create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langgraph_sdk import get_client

from contracts.streams import Names
from loopline.testing.processes import GatewayProcess, ServiceProcesses
from loopline.testing.scripted import ScriptedOpenAIServer
from tests import test_http_gateway as shared
from tests import tooling
from tests.test_http_gateway import ANSWER, hello
from tests.test_thread_checkpoints import POSTGRES_URL, need_postgres

scripted = shared.scripted
deployment = shared.deployment

RECORDED_WITHIN_S = 30.0
"""How long a run that ended may take to be in PostgreSQL (the recorder looks four
times a second; the machine may be loaded)."""


GATEWAYS: list[GatewayProcess] = []
"""The module's gateway (its output explains a run that was not recorded)."""


@pytest.fixture(scope="module")
def gateway(deployment: ServiceProcesses) -> Iterator[GatewayProcess]:
    need_postgres()
    env = {"LOOPLINE_CHECKPOINT_POSTGRES_URL": POSTGRES_URL}
    with GatewayProcess(deployment.redis_url, deployment.prefix, env=env) as api:
        GATEWAYS[:] = [api]
        yield api


@pytest.fixture
async def sdk(gateway: GatewayProcess) -> AsyncIterator[Any]:
    client = get_client(url=gateway.url, api_key=None)
    yield client
    await client.http.client.aclose()


@pytest.fixture(scope="module")
def saver() -> Iterator[Any]:
    need_postgres()
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(POSTGRES_URL) as found:
        yield found


def reader(saver: Any, middleware: Sequence[Any] = ()) -> Any:
    """LangChain's agent of the deployed agent's shape (``test_http_gateway``'s ``agent``;
    with ``TodoListMiddleware``, its ``planner``; with ``HumanInTheLoopMiddleware``, its
    ``gated``) on the deployment's saver (it only reads here)."""
    model = GenericFakeChatModel(messages=iter(()))
    planner = any(type(m).__name__ == "TodoListMiddleware" for m in middleware)
    tools = [] if planner else [tooling.add, tooling.hang]
    return lc_create_agent(model, tools=tools, middleware=middleware, checkpointer=saver)


def saved_config(prefix: str, thread_id: str) -> Any:
    return {"configurable": {"thread_id": f"{prefix}:{thread_id}"}}


async def recorded(
    saver: Any, prefix: str, thread_id: str, last: str, middleware: Sequence[Any] = ()
) -> Any:
    """The saver's newest state of the thread once its last message is ``last`` (the
    gateway's output, with what its recorder logged, in the failure)."""
    agent, config = reader(saver, middleware), saved_config(prefix, thread_id)
    deadline = time.monotonic() + RECORDED_WITHIN_S
    while True:
        state = await asyncio.to_thread(agent.get_state, config)
        messages = state.values.get("messages") or []
        if messages and messages[-1].content == last:
            return state
        assert time.monotonic() < deadline, (
            f"thread {thread_id} not in PostgreSQL: {state}\n{GATEWAYS[0].output()}"
        )
        await asyncio.sleep(0.2)


async def test_a_thread_run_through_the_gateway_is_in_postgresql_as_langgraph_keeps_it(
    sdk: Any, saver: Any, deployment: ServiceProcesses
) -> None:
    thread = await sdk.threads.create()
    thread_id = thread["thread_id"]
    await sdk.runs.wait(thread_id, "agent", input=hello("gated"))  # a tool call, an answer

    state = await recorded(saver, deployment.prefix, thread_id, "2 + 3 is 5.")
    config = saved_config(deployment.prefix, thread_id)
    kept = await asyncio.to_thread(lambda: list(reader(saver).get_state_history(config)))
    shown = await sdk.threads.get_history(thread_id, limit=100)

    assert [s.next for s in kept] == [(), ("model",), ("tools",), ("model",), ("__start__",)]
    assert [s.metadata["source"] for s in kept] == ["loop"] * 4 + ["input"]
    assert_same_history(kept, shown)
    assert [m.type for m in state.values["messages"]] == ["human", "ai", "tool", "ai"]
    assert state.values["messages"][2].content == "5"


def assert_same_history(kept: list[Any], shown: list[dict[str, Any]]) -> None:
    """The history LangGraph reads from PostgreSQL is the one the gateway shows: the
    same checkpoint ids, ``next``, sources and messages."""

    def outline(ids: Any, next: Any, source: Any, messages: list[Any]) -> tuple[Any, ...]:
        return (ids, tuple(next), source, messages)

    from_saver = [
        outline(
            s.config["configurable"]["checkpoint_id"],
            s.next,
            s.metadata["source"],
            [(m.type, m.content) for m in s.values.get("messages", [])],
        )
        for s in kept
    ]
    from_gateway = [
        outline(
            s["checkpoint"]["checkpoint_id"],
            s["next"],
            s["metadata"]["source"],
            [(m["type"], m["content"]) for m in (s["values"] or {}).get("messages", [])],
        )
        for s in shown
    ]
    assert from_saver == from_gateway


async def test_a_planners_todos_are_in_postgresql_as_the_gateway_shows_them(
    sdk: Any, saver: Any, deployment: ServiceProcesses
) -> None:
    """The deployed ``planner`` (``TodoListMiddleware``: ``write_todos`` run by the todos
    service): its todo list and every checkpoint in PostgreSQL as the gateway shows them."""
    from langchain.agents.middleware import TodoListMiddleware

    thread = await sdk.threads.create()
    thread_id = thread["thread_id"]
    await sdk.runs.wait(thread_id, "planner", input=hello("plan"))

    middleware = [TodoListMiddleware()]
    state = await recorded(saver, deployment.prefix, thread_id, "Planned.", middleware)
    config = saved_config(deployment.prefix, thread_id)
    agent = reader(saver, middleware)
    kept = await asyncio.to_thread(lambda: list(agent.get_state_history(config)))
    shown = await sdk.threads.get_history(thread_id, limit=100)

    assert state.values["todos"] == [{"content": "a", "status": "pending"}]
    assert ("tools",) in [s.next for s in kept]  # write_todos ran as a tools superstep
    assert_same_history(kept, shown)


async def test_a_thread_whose_working_copy_left_redis_continues_from_postgresql(
    sdk: Any, saver: Any, deployment: ServiceProcesses, scripted: ScriptedOpenAIServer
) -> None:
    thread = await sdk.threads.create()
    thread_id = thread["thread_id"]
    await sdk.runs.wait(thread_id, "agent", input=hello("hello"))
    await recorded(saver, deployment.prefix, thread_id, ANSWER)

    redis = aioredis.Redis.from_url(deployment.redis_url)
    try:
        assert await redis.delete(*Names(deployment.prefix).thread_keys(thread_id))
    finally:
        await redis.aclose()

    before = len(scripted.chat_requests())
    result = await sdk.runs.wait(thread_id, "agent", input=hello("again"))

    sent = [m["content"] for m in scripted.chat_requests()[before]["messages"]]
    assert sent == ["hello", ANSWER, "again"]  # the model saw the whole conversation
    assert [m["content"] for m in result["messages"]] == [
        "hello",
        ANSWER,
        "again",
        "answer to again",
    ]
    state = await recorded(saver, deployment.prefix, thread_id, "answer to again")
    assert [m.content for m in state.values["messages"]][:2] == ["hello", ANSWER]


async def test_a_deleted_thread_is_gone_from_postgresql_too(
    sdk: Any, saver: Any, deployment: ServiceProcesses
) -> None:
    """``DELETE /threads/{id}`` (and a TTL's sweep, the same removal) takes the thread
    out of its record as well: it does not come back from there."""
    from langgraph_sdk.errors import NotFoundError

    thread = await sdk.threads.create()
    thread_id = thread["thread_id"]
    await sdk.runs.wait(thread_id, "agent", input=hello("hello"))
    await recorded(saver, deployment.prefix, thread_id, ANSWER)

    await sdk.threads.delete(thread_id)

    config = saved_config(deployment.prefix, thread_id)
    assert await asyncio.to_thread(saver.get_tuple, config) is None
    with pytest.raises(NotFoundError):
        await sdk.threads.get(thread_id)


async def test_a_run_approved_by_a_human_is_in_postgresql_once_it_ended(
    sdk: Any, saver: Any, deployment: ServiceProcesses
) -> None:
    """The deployed ``gated`` agent asks a human before ``add``; the run waits, then is
    approved (``command.resume``): once it ended, PostgreSQL holds its history as the
    gateway shows it, the question on the task that asked."""
    from langchain.agents.middleware import HumanInTheLoopMiddleware

    thread = await sdk.threads.create()
    thread_id = thread["thread_id"]
    await sdk.runs.wait(thread_id, "gated", input=hello("gated"))
    approve = {"resume": {"decisions": [{"type": "approve"}]}}
    await sdk.runs.wait(thread_id, "gated", command=approve)

    middleware = [HumanInTheLoopMiddleware(interrupt_on={"add": True})]
    await recorded(saver, deployment.prefix, thread_id, "2 + 3 is 5.", middleware)
    config = saved_config(deployment.prefix, thread_id)
    agent = reader(saver, middleware)
    kept = await asyncio.to_thread(lambda: list(agent.get_state_history(config)))
    shown = await sdk.threads.get_history(thread_id, limit=100)

    assert_same_history(kept, shown)
    asked = [t for s in kept for t in s.tasks if t.interrupts]
    assert [t.name for t in asked] == ["HumanInTheLoopMiddleware.after_model"]


async def test_an_expired_thread_is_not_brought_back_from_postgresql(
    sdk: Any, saver: Any, deployment: ServiceProcesses
) -> None:
    """``LOOPLINE_THREAD_TTL_S`` lets a thread's keys and the gateway's record of it
    expire together: with the record gone, the thread is not taken back in from
    PostgreSQL (only a working copy that left Redis while the gateway knows the thread
    is)."""
    from langgraph_sdk.errors import NotFoundError

    thread = await sdk.threads.create()
    thread_id = thread["thread_id"]
    await sdk.runs.wait(thread_id, "agent", input=hello("hello"))
    await recorded(saver, deployment.prefix, thread_id, ANSWER)

    names = Names(deployment.prefix)
    redis = aioredis.Redis.from_url(deployment.redis_url)
    try:  # as their expiry does
        assert await redis.delete(*names.thread_keys(thread_id), names.api_thread(thread_id))
    finally:
        await redis.aclose()

    with pytest.raises(NotFoundError):
        await sdk.threads.get(thread_id)

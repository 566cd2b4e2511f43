"""Nothing silently gone: a thread lasts until it is deleted, also past the retention of
its runs' records; expiry is opt-in (``thread_ttl_s``), and a thread that expired is gone
(its keys, its listing; a new run on its id starts empty). Every service in this process
(``ServiceThread``) on the session's Redis, the model the scripted server over HTTP."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_openai import ChatOpenAI

from contracts import HumanMessage, TaskCompleted
from contracts.agent import AgentSpec
from contracts.streams import Names
from loopline import create_agent
from loopline.client import Client
from loopline.embedded import ServiceThread
from loopline.testing.scripted import Reply, ScriptedOpenAIServer
from services.settings import Settings
from tests.support import EMBEDDED_PREFIX, unique_prefix, wait_for

pytestmark = pytest.mark.fast

SPEC = AgentSpec.model_validate({"model": {"name": "gpt-4o-mini"}})
TTL_S = 2


def RESPONDER(body: dict[str, Any]) -> Reply:
    users = [str(m["content"]) for m in body["messages"] if m.get("role") == "user"]
    return Reply(content="heard: " + " | ".join(users))


@pytest.fixture(scope="module")
def ttl_deployment(redis_url: str) -> Iterator[str]:
    """A deployment in this process whose threads expire ``TTL_S`` after their last
    run; its prefix."""
    prefix = unique_prefix()
    with (
        ScriptedOpenAIServer(responder=RESPONDER) as server,
        pytest.MonkeyPatch.context() as env,
    ):
        env.setenv("OPENAI_BASE_URL", server.url)
        env.setenv("OPENAI_API_KEY", "test")
        stack = ServiceThread(redis_url, Settings(prefix=prefix, thread_ttl_s=TTL_S)).start()
        try:
            yield prefix
        finally:
            stack.stop()


async def turn(client: Client, thread: str, text: str) -> str:
    task_id = await client.submit(SPEC, [HumanMessage(content=text)], thread_id=thread)
    done = await asyncio.wait_for(client.wait(task_id), 30)
    assert isinstance(done, TaskCompleted)
    return task_id


async def written_back(client: Client, names: Names, thread: str) -> None:
    """The thread's run has ended on the thread too (just after the run's own end)."""

    async def idle() -> bool:
        fields = await client.redis.hmget(names.thread_state(thread), "active", "last_run")
        return fields[0] == b"" and bool(fields[1])

    await wait_for(idle)


async def test_a_thread_lasts_past_its_runs_records_by_default(
    redis_url: str, embedded: None
) -> None:
    """The embedded deployment, with the default settings (no ``thread_ttl_s``)."""
    assert Settings().thread_ttl_s is None
    thread = f"kept-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread}}
    with ScriptedOpenAIServer(responder=RESPONDER) as server:
        model = ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="test")
        agent = create_agent(model, settings=Settings(prefix=EMBEDDED_PREFIX))
        first = await agent.ainvoke({"messages": "one"}, config)
        names = Names(EMBEDDED_PREFIX)
        async with Client(redis_url, EMBEDDED_PREFIX) as client:
            await written_back(client, names, thread)
            assert await client.redis.ttl(names.thread_state(thread)) == -1
            assert await client.redis.ttl(names.thread_messages(thread)) == -1
            # the run's own records go when their retention ends; the thread stays
            run = (await client.threads().info(thread) or pytest.fail("no thread")).last_run
            assert await client.redis.ttl(names.task_state(run)) > 0
            await client.redis.delete(names.task_state(run), names.task_messages(run))
            state = await client.threads().current(thread)
        assert [m.text() for m in state.messages] == ["one", "heard: one"]
        second = await agent.ainvoke({"messages": "two"}, config)
    assert first["messages"][-1].content == "heard: one"
    assert second["messages"][-1].content == "heard: one | two"


async def test_a_thread_with_a_ttl_is_gone_after_it(redis_url: str, ttl_deployment: str) -> None:
    prefix = ttl_deployment
    names, thread = Names(prefix), f"brief-{uuid.uuid4().hex[:8]}"
    async with Client(redis_url, prefix) as client:
        await turn(client, thread, "one")
        await written_back(client, names, thread)
        assert 0 < await client.redis.ttl(names.thread_state(thread)) <= TTL_S
        second = await turn(client, thread, "two")  # within the TTL: the thread goes on
        assert (await client.messages(second))[-1].text() == "heard: one | two"
        reader = client.threads()
        assert thread in [t.thread_id for t in await reader.list()]

        async def gone() -> bool:
            return int(await client.redis.exists(*names.thread_keys(thread))) == 0

        await wait_for(gone, timeout=TTL_S + 5)
        assert await reader.info(thread) is None
        assert thread not in [t.thread_id for t in await reader.list()]
        third = await turn(client, thread, "three")  # what expired is gone
        assert [m.text() for m in await client.messages(third)] == ["three", "heard: three"]


async def test_a_thread_with_a_ttl_is_gone_from_its_saver_too(
    redis_url: str, ttl_deployment: str
) -> None:
    """An agent whose checkpointer is the record of its threads, on the deployment whose
    threads expire: within the TTL the saver's thread goes on; after it, the thread is
    gone from Redis and from the saver (a new run starts empty, the saver holds only
    that run's checkpoints), where before the saver's state came back into Redis."""
    from langgraph.checkpoint.memory import InMemorySaver

    saver = InMemorySaver()
    settings = Settings(prefix=ttl_deployment, thread_ttl_s=TTL_S)
    model = ChatOpenAI(model="gpt-4o-mini", api_key="test")
    agent = create_agent(model, checkpointer=saver, redis_url=redis_url, settings=settings)
    thread = f"saved-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread}}
    await agent.ainvoke({"messages": "one"}, config)
    per_run = len(list(saver.list(config)))  # one checkpoint per superstep
    second = await agent.ainvoke({"messages": "two"}, config)
    assert second["messages"][-1].content == "heard: one | two"
    assert per_run == 3 and len(list(saver.list(config))) == 2 * per_run

    async with Client(redis_url, ttl_deployment) as client:

        async def gone() -> bool:  # every key of the thread (its bus key holds its id)
            pattern = f"{ttl_deployment}:thread:*{thread}*"
            return not [k async for k in client.redis.scan_iter(match=pattern)]

        await wait_for(gone, timeout=TTL_S + 5)
    third = await agent.ainvoke({"messages": "three"}, config)
    assert [m.content for m in third["messages"]] == ["three", "heard: three"]
    assert len(list(saver.list(config))) == per_run  # the expired thread's checkpoints went

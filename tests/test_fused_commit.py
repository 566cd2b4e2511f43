"""Fused transitions (services/tasks/lua/fused.lua) on a real Redis: a loop transition that lands in
the predicted state publishes what comes next, applies the entry's writes and acks the
entry in one script; anything else leaves the entry to the usual commit."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from contracts.agent import AgentSpec
from contracts.events import (
    ModelRequested,
    ModelResponded,
    StepStarted,
    TaskSubmitted,
    ToolCompleted,
    ToolRequested,
    dump_event,
    parse_event,
)
from contracts.messages import AIMessage, HumanMessage, ToolCall, ToolMessage
from contracts.streams import DATA_FIELD, GROUPS
from services.entry import CURRENT, PendingCommit
from services.runtime import Runtime
from services.settings import Settings
from services.tasks.loop import Loop
from services.tasks.store import TaskStore
from services.tasks.transitions import StartTask

pytestmark = pytest.mark.fast

SPEC = AgentSpec(model={"name": "fake", "params": {}}, tools=["tests.tooling:add"])  # type: ignore[arg-type]


@pytest.fixture
async def rt(redis_url: str, prefix: str) -> AsyncIterator[Runtime]:
    runtime = Runtime(redis_url, Settings(prefix=prefix))
    for service in ("model", "tools"):
        stream = runtime.names.inputs_of(service)[0]
        await runtime.redis.xgroup_create(stream, GROUPS[service], id="0", mkstream=True)
    yield runtime
    await runtime.close()


async def deliver(rt: Runtime, service: str, data: bytes) -> PendingCommit:
    """Put an entry on the service's stream, read it in its group: it is pending now."""
    stream = rt.names.inputs_of(service)[0]
    await rt.redis.xadd(stream, {DATA_FIELD: data})
    reply: Any = await rt.redis.xreadgroup(GROUPS[service], "test", {stream: ">"}, count=1)
    entry_id = reply[0][1][0][0].decode()
    return PendingCommit(stream, GROUPS[service], entry_id)


async def pending(rt: Runtime, service: str) -> int:
    stream = rt.names.inputs_of(service)[0]
    info: Any = await rt.redis.xpending(stream, GROUPS[service])
    return int(info["pending"])


async def events_on(redis: aioredis.Redis, stream: str, kind: type | None = None) -> list[Any]:
    """The stream's events (of one kind: the test's own delivered entries are there too)."""
    found = [parse_event(f[DATA_FIELD.encode()]) for _, f in await redis.xrange(stream)]
    return [e for e in found if kind is None or isinstance(e, kind)]


async def start_task(rt: Runtime, task_id: str, max_steps: int = 5) -> None:
    agent_id = await rt.save_agent(SPEC)
    store = TaskStore(rt.redis, rt.names, rt.register_script)
    await store.apply(
        task_id,
        StartTask(
            agent_id=agent_id,
            max_steps=max_steps,
            submitted_event=dump_event(
                TaskSubmitted(task_id=task_id, agent=SPEC, messages=[HumanMessage(content="hi")])
            ),
            step_event=dump_event(StepStarted(task_id=task_id, step=1)),
            retention=3600,
            messages=[HumanMessage(content="hi", id=f"{task_id}:in:0").model_dump_json()],
        ),
    )


async def handle(entry: PendingCommit, call: Any) -> None:
    token = CURRENT.set(entry)
    try:
        await call
    finally:
        CURRENT.reset(token)


def reply_with_calls(task_id: str, n: int) -> ModelResponded:
    calls = [ToolCall(id=f"c{i}", name="add", args={"a": i, "b": 1}) for i in range(n)]
    return ModelResponded(
        task_id=task_id,
        step=1,
        agent_id=SPEC.agent_id,
        message=AIMessage(content="", tool_calls=calls),
        transcript_len=1,
    )


def result(task_id: str, call_id: str) -> ToolCompleted:
    return ToolCompleted(
        task_id=task_id,
        step=1,
        agent_id=SPEC.agent_id,
        message=ToolMessage(content="ok", tool_call_id=call_id, name="add"),
    )


async def test_a_model_reply_publishes_its_calls_and_acks_in_one_script(rt: Runtime) -> None:
    loop = Loop(rt)
    await start_task(rt, "t1")
    reply = reply_with_calls("t1", 2)

    entry = await deliver(rt, "model", dump_event(reply))
    await handle(entry, loop.model_responded(reply))
    assert entry.committed and entry.outbox == []
    assert await pending(rt, "model") == 0
    sent = await events_on(rt.redis, rt.names.tools, ToolRequested)
    assert [type(e) for e in sent] == [ToolRequested, ToolRequested]
    assert [e.call.id for e in sent] == ["c0", "c1"]
    # human + AI now, + 2 results at the join: what the tools service needs to publish the
    # next step's request without reading the state
    assert {e.join_len for e in sent} == {4}

    # The same reply delivered again: the transition does not apply, nothing is acked by
    # the script; the usual path re-publishes the outputs with the entry's own commit.
    again = await deliver(rt, "model", dump_event(reply))
    await handle(again, loop.model_responded(reply))
    assert not again.committed
    assert [type(e) for e in (parse_event(d) for _, d in again.outbox)] == [ToolRequested] * 2
    assert await pending(rt, "model") == 1
    assert len(await events_on(rt.redis, rt.names.tools, ToolRequested)) == 2


async def test_tool_results_ack_alone_until_the_last_publishes_the_next_request(
    rt: Runtime,
) -> None:
    loop = Loop(rt)
    await start_task(rt, "t2")
    reply = reply_with_calls("t2", 2)
    await handle(await deliver(rt, "model", dump_event(reply)), loop.model_responded(reply))
    calls_key = rt.names.task_calls("t2")

    first = await deliver(rt, "tools", dump_event(result("t2", "c1")))
    first.writes.append((calls_key, "c1", json.dumps({"state": "done"})))
    await handle(first, loop.tool_completed(result("t2", "c1"), 4))
    assert first.committed
    assert await rt.redis.hget(calls_key, "c1") is not None  # the write went with the ack
    assert await events_on(rt.redis, rt.names.model, ModelRequested) == []  # the step waits for c0

    last = await deliver(rt, "tools", dump_event(result("t2", "c0")))
    await handle(last, loop.tool_completed(result("t2", "c0"), 4))
    assert last.committed
    assert await pending(rt, "tools") == 0
    (request,) = await events_on(rt.redis, rt.names.model, ModelRequested)
    assert isinstance(request, ModelRequested)
    assert (request.step, request.transcript_len) == (2, 4)
    assert await rt.redis.llen(rt.names.task_messages("t2")) == 4
    messages = [json.loads(m) for m in await rt.redis.lrange(rt.names.task_messages("t2"), 2, 3)]
    assert [m["tool_call_id"] for m in messages] == ["c0", "c1"]  # call order, not arrival


async def test_a_wrong_prediction_commits_nothing_and_the_usual_path_takes_over(
    rt: Runtime,
) -> None:
    loop = Loop(rt)
    await start_task(rt, "t3")
    reply = reply_with_calls("t3", 1)
    await handle(await deliver(rt, "model", dump_event(reply)), loop.model_responded(reply))

    entry = await deliver(rt, "tools", dump_event(result("t3", "c0")))
    await handle(entry, loop.tool_completed(result("t3", "c0"), 99))  # not the real length
    assert not entry.committed
    assert await events_on(rt.redis, rt.names.model, ModelRequested) == []
    (queued,) = [parse_event(d) for _, d in entry.outbox]
    assert isinstance(queued, ModelRequested) and queued.transcript_len == 3


async def test_the_step_limit_ends_the_task_and_clears_its_deadline_in_the_script(
    rt: Runtime,
) -> None:
    loop = Loop(rt)
    await start_task(rt, "t4", max_steps=1)
    await rt.redis.zadd(rt.names.deadlines, {"t4": 1e12})
    reply = reply_with_calls("t4", 1)
    await handle(await deliver(rt, "model", dump_event(reply)), loop.model_responded(reply))

    entry = await deliver(rt, "tools", dump_event(result("t4", "c0")))
    await handle(entry, loop.tool_completed(result("t4", "c0"), 3))
    assert entry.committed
    assert await rt.redis.hget(rt.names.task_state("t4"), "status") == b"failed"
    assert await rt.redis.zscore(rt.names.deadlines, "t4") is None
    assert await events_on(rt.redis, rt.names.model, ModelRequested) == []
    log = await events_on(rt.redis, rt.names.task_log("t4"))
    assert log[-1].type == "TaskFailed" and "step limit" in log[-1].reason


async def test_retention_expires_only_the_tasks_own_keys(rt: Runtime) -> None:
    """A task that ends in a fused commit gets its retention TTL on its own keys; the
    shared streams and the deadline set the same script touched keep none."""
    loop = Loop(rt)
    await rt.redis.zadd(rt.names.deadlines, {"someone-else": 1e12})
    await start_task(rt, "t5", max_steps=1)
    reply = reply_with_calls("t5", 1)
    await handle(await deliver(rt, "model", dump_event(reply)), loop.model_responded(reply))
    entry = await deliver(rt, "tools", dump_event(result("t5", "c0")))
    await handle(entry, loop.tool_completed(result("t5", "c0"), 3))
    assert entry.committed  # the step limit ended it in the fused script

    for key in (rt.names.task_state("t5"), rt.names.task_messages("t5"), rt.names.task_log("t5")):
        assert 0 < await rt.redis.ttl(key) <= 3600
    for shared in (rt.names.tools, rt.names.model, rt.names.deadlines):
        assert await rt.redis.exists(shared) == 1
        assert await rt.redis.ttl(shared) == -1, shared

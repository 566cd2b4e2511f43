"""Fused transitions (services/tasks/lua/fused.lua) on a real Redis: a loop transition that
lands in the predicted state publishes what comes next, applies the entry's writes and
acks the entry in one script, before its handler returns; anything else leaves the entry
to the usual commit when its handler returns. Entries run through the services' entry
runner in this process (``tests.support.run_entry``)."""

from __future__ import annotations

import json

import pytest

from contracts.events import (
    ModelRequested,
    ToolCompleted,
    ToolRequested,
)
from services.runtime import Runtime
from services.tasks.loop import Loop
from tests.support import (
    completed,
    events_on,
    pending_on,
    replied,
    reply_with_calls,
    result,
    run_entry,
    start_task,
)

pytestmark = pytest.mark.fast


async def test_a_model_reply_publishes_its_calls_and_acks_in_one_script(rt: Runtime) -> None:
    loop = Loop(rt)
    await start_task(rt, "t1")
    reply = reply_with_calls("t1", 2)

    async def calls_out() -> int:
        return len(await events_on(rt.redis, rt.names.tools, ToolRequested))

    handled = await run_entry(rt, "model", reply, loop.model_responded, probe=calls_out)
    # acked, and both calls out, by the transition itself: nothing was left to commit
    assert handled.acked_by_handler and handled.seen == 2
    assert await pending_on(rt.redis, rt.names.model, "model") == 0
    sent = await events_on(rt.redis, rt.names.tools, ToolRequested)
    assert [e.call.id for e in sent] == ["c0", "c1"]
    # human + AI now, + 2 results at the join: what the tools service needs to publish the
    # next step's request without reading the state
    assert {e.join_len for e in sent} == {4}

    # The same reply delivered again: the transition does not apply, so its script acks
    # nothing and publishes nothing; the usual path re-publishes the outputs with the
    # entry's own commit once the handler returns.
    again = await run_entry(rt, "model", reply, loop.model_responded, probe=calls_out)
    assert not again.acked_by_handler and again.seen == 2
    assert await pending_on(rt.redis, rt.names.model, "model") == 0
    resent = await events_on(rt.redis, rt.names.tools, ToolRequested)
    assert [e.call.id for e in resent] == ["c0", "c1", "c0", "c1"]
    assert await rt.redis.llen(rt.names.task_messages("t1")) == 2  # the reply joined once


async def test_tool_results_ack_alone_until_the_last_publishes_the_next_request(
    rt: Runtime,
) -> None:
    loop = Loop(rt)
    await start_task(rt, "t2")
    await replied(rt, loop, reply_with_calls("t2", 2))
    calls_key = rt.names.task_calls("t2")

    async def recorded_and_requested() -> tuple[bytes | None, int]:
        requests = await events_on(rt.redis, rt.names.model, ModelRequested)
        return await rt.redis.hget(calls_key, "c1"), len(requests)

    async def record_then_apply(done: ToolCompleted) -> None:
        # as the tools service records a call's outcome: a write committed with the entry
        await rt.write(calls_key, "c1", json.dumps({"state": "done"}))
        await loop.tool_completed(done, 4)

    first = await run_entry(
        rt, "tools", result("t2", "c1"), record_then_apply, probe=recorded_and_requested
    )
    assert first.acked_by_handler
    record, requests = first.seen
    assert record is not None  # the write went with the ack, in the transition's script
    assert requests == 0  # the step waits for c0

    last = await completed(rt, loop, result("t2", "c0"), 4)
    assert last.acked_by_handler
    assert await pending_on(rt.redis, rt.names.tools, "tools") == 0
    (request,) = await events_on(rt.redis, rt.names.model, ModelRequested)
    assert (request.step, request.transcript_len) == (2, 4)
    assert await rt.redis.llen(rt.names.task_messages("t2")) == 4
    messages = [json.loads(m) for m in await rt.redis.lrange(rt.names.task_messages("t2"), 2, 3)]
    assert [m["tool_call_id"] for m in messages] == ["c0", "c1"]  # call order, not arrival


async def test_a_wrong_prediction_commits_nothing_and_the_usual_path_takes_over(
    rt: Runtime,
) -> None:
    loop = Loop(rt)
    await start_task(rt, "t3")
    await replied(rt, loop, reply_with_calls("t3", 1))

    async def requests() -> list[ModelRequested]:
        return await events_on(rt.redis, rt.names.model, ModelRequested)

    done = result("t3", "c0")
    handled = await run_entry(
        rt, "tools", done, lambda ev: loop.tool_completed(ev, 99), probe=requests
    )  # 99: not the real length
    assert not handled.acked_by_handler and handled.seen == []
    # the entry's own commit published the request the state asks for, and acked it
    (request,) = await requests()
    assert (request.step, request.transcript_len) == (2, 3)
    assert await pending_on(rt.redis, rt.names.tools, "tools") == 0


async def test_the_step_limit_ends_the_task_and_clears_its_deadline_in_the_script(
    rt: Runtime,
) -> None:
    loop = Loop(rt)
    await start_task(rt, "t4", max_steps=1)
    await rt.redis.zadd(rt.names.deadlines, {"t4": 1e12})
    await replied(rt, loop, reply_with_calls("t4", 1))

    handled = await completed(rt, loop, result("t4", "c0"), 3)
    assert handled.acked_by_handler
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
    await replied(rt, loop, reply_with_calls("t5", 1))
    handled = await completed(rt, loop, result("t5", "c0"), 3)
    assert handled.acked_by_handler  # the step limit ended it in the fused script

    for key in (rt.names.task_state("t5"), rt.names.task_messages("t5"), rt.names.task_log("t5")):
        assert 0 < await rt.redis.ttl(key) <= 3600
    for shared in (rt.names.tools, rt.names.model, rt.names.deadlines):
        assert await rt.redis.exists(shared) == 1
        assert await rt.redis.ttl(shared) == -1, shared

"""The run parameters LangGraph's server has beyond a graph's ``stream``, through the real
``langgraph_sdk`` client against ``loopline serve api`` with the services as processes
(the fixtures of ``test_http_gateway``):

- the stream modes ``events``, ``debug``, ``checkpoints`` and ``tasks``, frame by frame
  in the shapes ``langgraph dev`` (langgraph-api 0.16.7) sent for a run with one tool
  call, recorded by ``python -m benchmarks.stream_frames --langgraph ...`` in
  ``benchmarks/results/stream_frames_reference.json``; the checkpoints streamed are the
  thread's (the ids ``/threads/{id}/history`` lists);
- ``after_seconds``: the run is pending (its thread busy) until due, then runs; it is
  kept in Redis, so a gateway that stops before it is due leaves it to another.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable
from typing import Any

import pytest
import redis.asyncio as aioredis
from langgraph_sdk import get_client
from langgraph_sdk.errors import ConflictError

from benchmarks.report import RESULTS_DIR
from contracts.streams import Names
from loopline.testing.processes import GatewayProcess
from tests import test_http_gateway as shared
from tests.support import ServiceProcesses
from tests.test_http_gateway import collect, hello

scripted = shared.scripted
deployment = shared.deployment
gateway = shared.gateway
sdk = shared.sdk

REFERENCE = json.loads((RESULTS_DIR / "stream_frames_reference.json").read_text())
ONE_TOOL_CALL = "gated"  # the prompt the scripted model answers with add(2, 3), then text


def signature(event: str, data: Any) -> tuple[Any, ...]:
    """What a client of a frame relies on: the event name, the payload's keys and the
    fields that say what it is (its kind, node, step, what runs next)."""
    if event == "events":
        return (event, data["event"], data["name"], sorted(data), sorted(data["data"]))
    if event == "debug":
        return (event, data["type"], data["step"], sorted(data), sorted(data["payload"]))
    if event == "tasks":
        return (event, data["name"], sorted(data))
    if event == "checkpoints":
        tasks = [sorted(t) for t in data["tasks"]]
        meta = data["metadata"]
        return (
            event,
            data["next"],
            meta["step"],
            meta["source"],
            sorted(data),
            sorted(meta),
            tasks,
        )
    return (event,)


def signatures(frames: Iterable[tuple[str, Any]]) -> list[tuple[Any, ...]]:
    """The frames' signatures; a model's streamed chunks count once (how a model's reply
    is cut into chunks is the model client's, not the server's)."""
    out: list[tuple[Any, ...]] = []
    for event, data in frames:
        if event == "end":  # loopline ends with it; LangGraph's in-memory server closes
            continue
        found = signature(event, data)
        if out and found == out[-1] and event == "events" and "stream" in data["event"]:
            continue
        out.append(found)
    return out


def reference(name: str) -> list[tuple[Any, ...]]:
    return signatures((event, data) for event, data in REFERENCE[name])


async def _stream(sdk: Any, thread_id: str | None, modes: list[str]) -> list[tuple[str, Any]]:
    parts = sdk.runs.stream(thread_id, "agent", input=hello(ONE_TOOL_CALL), stream_mode=modes)
    return [(p.event, p.data) for p in await collect(parts)]


@pytest.mark.parametrize("mode", ["events", "debug", "checkpoints", "tasks"])
async def test_a_thread_run_streams_each_server_mode_as_langgraph_dev(sdk: Any, mode: str) -> None:
    tid = (await sdk.threads.create())["thread_id"]
    frames = await _stream(sdk, tid, [mode])
    assert signatures(frames) == reference(f"thread {mode}")


@pytest.mark.parametrize("mode", ["events", "debug", "checkpoints", "tasks"])
async def test_a_stateless_run_streams_each_server_mode_as_langgraph_dev(
    sdk: Any, mode: str
) -> None:
    frames = await _stream(sdk, None, [mode])
    assert signatures(frames) == reference(f"stateless {mode}")  # no thread: no checkpoint


async def test_the_streamed_checkpoints_are_the_threads_and_the_tasks_what_ran(sdk: Any) -> None:
    tid = (await sdk.threads.create())["thread_id"]
    frames = await _stream(sdk, tid, ["checkpoints", "tasks", "debug"])
    streamed = [data for event, data in frames if event == "checkpoints"]
    history = await sdk.threads.get_history(tid, limit=20)
    assert [c["config"]["configurable"]["checkpoint_id"] for c in streamed] == [
        h["checkpoint"]["checkpoint_id"] for h in reversed(history)
    ]
    assert [len(c["values"]["messages"]) for c in streamed] == [0, 1, 2, 3, 4]
    assert [c["next"] for c in streamed] == [["__start__"], ["model"], ["tools"], ["model"], []]
    parents = [
        c["parent_config"] and c["parent_config"]["configurable"]["checkpoint_id"] for c in streamed
    ]
    ids = [c["config"]["configurable"]["checkpoint_id"] for c in streamed]
    assert parents == [None, *ids[:-1]]
    tasks = [data for event, data in frames if event == "tasks"]
    tool_call = tasks[2]["input"][0]
    assert (tool_call["name"], tool_call["args"]) == ("add", {"a": 2, "b": 3})
    assert tasks[3]["result"]["messages"][0]["content"] == "5"
    assert tasks[4]["input"]["messages"][-1]["type"] == "tool"  # the model reads the state
    assert tasks[5]["result"]["messages"][0]["content"] == "2 + 3 is 5."
    # debug: the same checkpoints and tasks, each at its superstep
    debug = [(d["type"], d["step"]) for event, d in frames if event == "debug"]
    assert debug == [
        ("checkpoint", -1),
        ("checkpoint", 0),
        ("task", 1),
        ("task_result", 1),
        ("checkpoint", 1),
        ("task", 2),
        ("task_result", 2),
        ("checkpoint", 2),
        ("task", 3),
        ("task_result", 3),
        ("checkpoint", 3),
    ]


async def test_events_tell_the_graphs_run_the_model_and_the_tool(sdk: Any) -> None:
    frames = await _stream(sdk, None, ["events"])
    events = [data for event, data in frames if event == "events"]
    root = events[0]
    assert (root["event"], root["name"], root["parent_ids"]) == ("on_chain_start", "agent", [])
    assert events[-1]["event"] == "on_chain_end" and events[-1]["run_id"] == root["run_id"]
    final = events[-1]["data"]["output"]["messages"]
    assert [m["type"] for m in final] == ["human", "ai", "tool", "ai"]
    tool_end = next(e for e in events if e["event"] == "on_tool_end")
    assert tool_end["name"] == "add" and tool_end["data"]["output"]["content"] == "5"
    streamed = "".join(
        str(e["data"]["chunk"]["content"]) for e in events if e["event"] == "on_chat_model_stream"
    )
    assert streamed == "2 + 3 is 5."
    # the graph's own stream events are the other modes' frames, never ``events``
    assert not [e for e in events if e["event"] == "on_chain_stream" and e["name"] == "agent"]


async def test_a_delayed_run_is_pending_then_runs(sdk: Any) -> None:
    tid = (await sdk.threads.create())["thread_id"]
    asked = time.monotonic()
    run = await sdk.runs.create(tid, "agent", input=hello(ONE_TOOL_CALL), after_seconds=1.5)
    assert run["status"] == "pending"
    assert (await sdk.runs.get(tid, run["run_id"]))["status"] == "pending"
    assert (await sdk.threads.get(tid))["status"] == "busy"
    with pytest.raises(ConflictError):  # the thread is busy with it (reject)
        await sdk.runs.create(tid, "agent", input=hello())
    values = await sdk.runs.join(tid, run["run_id"])
    assert time.monotonic() - asked >= 1.5
    assert [m["type"] for m in values["messages"]] == ["human", "ai", "tool", "ai"]
    assert (await sdk.runs.get(tid, run["run_id"]))["status"] == "success"
    assert (await sdk.threads.get(tid))["status"] == "idle"


async def test_a_delayed_run_outlives_the_gateway_that_took_it(
    deployment: ServiceProcesses,
) -> None:
    with GatewayProcess(deployment.redis_url, deployment.prefix) as first:
        client = get_client(url=first.url, api_key=None)
        tid = (await client.threads.create())["thread_id"]
        run = await client.runs.create(tid, "agent", input=hello(), after_seconds=6)
        await client.http.client.aclose()
    # the gateway stopped before the run was due: the run waits in Redis for another
    redis = aioredis.from_url(deployment.redis_url)
    try:
        due = await redis.zscore(Names(deployment.prefix).api_delayed, run["run_id"])
    finally:
        await redis.aclose()
    assert due is not None and due / 1000 > time.time()
    with GatewayProcess(deployment.redis_url, deployment.prefix) as second:
        client = get_client(url=second.url, api_key=None)
        try:
            values = await asyncio.wait_for(client.runs.join(tid, run["run_id"]), 60)
            assert values["messages"][-1]["content"] == shared.ANSWER
            assert (await client.runs.get(tid, run["run_id"]))["status"] == "success"
        finally:
            await client.http.client.aclose()


async def test_a_resume_streams_the_checkpoints_it_makes(sdk: Any) -> None:
    tid = (await sdk.threads.create())["thread_id"]
    asked = await sdk.runs.wait(tid, "gated", input=hello(ONE_TOOL_CALL))
    assert asked["__interrupt__"]
    before = {h["checkpoint"]["checkpoint_id"] for h in await sdk.threads.get_history(tid)}
    approve = {"resume": {"decisions": [{"type": "approve"}]}}
    parts = sdk.runs.stream(tid, "gated", command=approve, stream_mode=["checkpoints", "tasks"])
    frames = [(p.event, p.data) for p in await collect(parts)]
    streamed = [
        d["config"]["configurable"]["checkpoint_id"] for e, d in frames if e == "checkpoints"
    ]
    history = await sdk.threads.get_history(tid, limit=50)
    made = [h["checkpoint"]["checkpoint_id"] for h in reversed(history)]
    assert streamed == [c for c in made if c not in before] and streamed
    final = [d for e, d in frames if e == "checkpoints"][-1]
    assert final["next"] == [] and final["values"]["messages"][-1]["content"] == "2 + 3 is 5."
    ran = [(d["name"], "input" in d) for e, d in frames if e == "tasks"]
    hitl = "HumanInTheLoopMiddleware.after_model"  # it resumes, then runs on the answer
    each = [hitl, "tools", "model", hitl]
    assert ran == [(node, started) for node in each for started in (True, False)]


async def test_a_reconnect_gets_the_rest_of_the_server_modes_once(sdk: Any) -> None:
    tid = (await sdk.threads.create())["thread_id"]
    modes = ["checkpoints", "tasks", "events"]
    seen: list[Any] = []
    stream = sdk.runs.stream(tid, "agent", input=hello("slow"), stream_mode=modes)
    async for part in stream:
        seen.append(part)
        if part.event == "tasks" and part.data["name"] == "tools":  # the slow tool runs
            break
    await stream.aclose()
    run_id = seen[0].data["run_id"]
    rest = await collect(
        sdk.runs.join_stream(tid, run_id, stream_mode=modes, last_event_id=seen[-1].id)
    )
    whole = await collect(sdk.runs.join_stream(tid, run_id, stream_mode=modes))
    shown = [(p.event, p.id, p.data) for p in whole]
    assert [(p.event, p.id, p.data) for p in seen] == shown[: len(seen)]  # the same frames
    # a reconnect goes on after the item whose frames the client saw last (they share
    # its id), with no frame twice and none missing
    after = max(i for i, (_, frame_id, _) in enumerate(shown) if frame_id == seen[-1].id)
    assert [(p.event, p.id, p.data) for p in rest] == shown[after + 1 :]
    assert rest[0].event != "metadata" and rest[-1].event == "end"


async def test_a_delayed_run_cancelled_before_it_starts_never_runs(sdk: Any, scripted: Any) -> None:
    tid = (await sdk.threads.create())["thread_id"]
    run = await sdk.runs.create(tid, "agent", input=hello("never asked"), after_seconds=1)
    joined = asyncio.ensure_future(sdk.runs.join(tid, run["run_id"]))  # waits meanwhile
    await sdk.runs.cancel(tid, run["run_id"])
    assert await asyncio.wait_for(joined, 10) == {}  # the thread has no state: nothing ran
    assert (await sdk.runs.get(tid, run["run_id"]))["status"] == "interrupted"
    await asyncio.sleep(1.5)  # past when it was due
    assert (await sdk.runs.get(tid, run["run_id"]))["status"] == "interrupted"
    assert (await sdk.threads.get(tid))["status"] == "idle"
    asked = [str(r["messages"][-1]["content"]) for r in scripted.requests]
    assert "never asked" not in asked
    frames = await collect(sdk.runs.join_stream(tid, run["run_id"]))
    assert [p.event for p in frames] == ["metadata", "end"]


async def test_a_delayed_stateless_run_runs_when_due(sdk: Any) -> None:
    run = await sdk.runs.create(None, "agent", input=hello(), after_seconds=1)
    assert run["status"] == "pending" and run["thread_id"]
    values = await sdk.runs.join(run["thread_id"], run["run_id"])
    assert values["messages"][-1]["content"] == shared.ANSWER

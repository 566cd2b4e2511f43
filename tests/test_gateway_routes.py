"""The gateway's parameters and its thin routes, through the real ``langgraph_sdk`` client
against ``loopline serve api`` with the services as processes (the fixtures of
``test_http_gateway``): every parameter loopline does not implement is refused with 422
and its name, never ignored; the ones it implements cheaply (assistant search by metadata,
sorted, selected; ``runs.list(select=)``) act; and the routes ``/assistants/count``,
``/assistants/{id}/graph``, ``/assistants/{id}/subgraphs``, ``DELETE`` a run and
``POST /runs/cancel``.

What LangGraph's own server (``langgraph dev``, langgraph-api 0.16.7 in memory) answered
to the same calls for the same agents is kept below as data (``REFERENCE_*``).
"""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

import httpx
import pytest
from langgraph_sdk.errors import NotFoundError

from loopline.testing.processes import GatewayProcess, free_port
from loopline.testing.scripted import Reply, ScriptedToolCall
from tests import test_http_gateway as shared
from tests.test_http_gateway import _until_status, collect, hello

# the deployment, gateway and client of the HTTP gateway's tests (same agents and script)
scripted = shared.scripted
deployment = shared.deployment
gateway = shared.gateway
sdk = shared.sdk

# `GET /assistants/{id}/graph` of create_agent(model, tools=[add, hang]) and of the same
# with HumanInTheLoopMiddleware(interrupt_on={"add": True}), as langgraph dev answered
REFERENCE_PLAIN_GRAPH = {
    "nodes": [
        {"id": "__start__", "type": "runnable", "data": {"name": "__start__"}},
        {"id": "model", "type": "runnable", "data": {"name": "model"}},
        {
            "id": "tools",
            "type": "runnable",
            "data": {"name": "tools"},
            "metadata": {"__tools": ["add", "hang"]},
        },
        {"id": "__end__"},
    ],
    "edges": [
        {"source": "__start__", "target": "model"},
        {"source": "model", "target": "__end__", "conditional": True},
        {"source": "model", "target": "tools", "conditional": True},
        {"source": "tools", "target": "model", "conditional": True},
    ],
}
HITL = "HumanInTheLoopMiddleware.after_model"
REFERENCE_GATED_GRAPH = {
    "nodes": [
        {"id": "__start__", "type": "runnable", "data": {"name": "__start__"}},
        {"id": "model", "type": "runnable", "data": {"name": "model"}},
        {
            "id": "tools",
            "type": "runnable",
            "data": {"name": "tools"},
            "metadata": {"__tools": ["add", "hang"]},
        },
        {"id": HITL, "type": "runnable", "data": {"name": HITL}},
        {"id": "__end__"},
    ],
    "edges": [
        {"source": HITL, "target": "__end__", "conditional": True},
        {"source": HITL, "target": "model", "conditional": True},
        {"source": HITL, "target": "tools", "conditional": True},
        {"source": "__start__", "target": "model"},
        {"source": "model", "target": HITL},
        {"source": "tools", "target": "model", "conditional": True},
    ],
}
REFERENCE_SUBGRAPHS: dict[str, Any] = {}  # for each of those agents
REFERENCE_NOTHING_TO_CANCEL = "No runs found to cancel."  # POST /runs/cancel, 404
REFERENCE_STATUS_WITH_THREAD = (  # POST /runs/cancel {"thread_id", "status"}, 422
    "When providing a 'status', 'thread_id' and 'run_ids' must be omitted. The 'status' "
    "parameter cancels all runs with the given status, regardless of thread or run ID."
)


async def _refused(call: Any, *names: str) -> str:
    """The 422 a call gets; its detail names each of ``names`` (the SDK raises
    ``UnprocessableEntityError``, or httpx's error from calls it retries, e.g. ``wait``)."""
    with pytest.raises(httpx.HTTPStatusError) as refused:
        result = call()
        if hasattr(result, "__aiter__"):
            await collect(result)
        else:
            await result
    assert refused.value.response.status_code == 422
    detail = str(refused.value.response.json()["detail"])
    for name in names:
        assert name in detail, detail
    return detail


async def test_parameters_loopline_does_not_implement_are_refused_not_ignored(sdk: Any) -> None:
    tid = (await sdk.threads.create())["thread_id"]
    runs = sdk.runs
    await _refused(
        lambda: runs.create(tid, "agent", input=hello(), interrupt_before=["tools"]),
        "interrupt_before",
    )
    await _refused(
        lambda: runs.create(tid, "agent", input=hello(), interrupt_after="*"), "interrupt_after"
    )
    # a webhook the operator's policy refuses (loopback, by default) is refused with why
    await _refused(
        lambda: runs.create(tid, "agent", input=hello(), webhook="http://127.0.0.1:9/hook"),
        "loopback",
    )
    await _refused(  # a resume starts now
        lambda: runs.create(tid, "agent", command={"resume": 1}, after_seconds=5), "after_seconds"
    )
    earlier = {"configurable": {"checkpoint_id": "1"}}  # run from an earlier state
    await _refused(
        lambda: runs.create(tid, "agent", input=hello(), config=earlier), "checkpoint_id"
    )
    made_up = {"assistant_id": "agent", "input": hello(), "stream_mode": "made-up"}
    await _refused(lambda: sdk.http.post("/runs/wait", json=made_up), "made-up")
    await _refused(lambda: runs.wait(tid, "agent", command={"goto": "model"}), "command.goto")
    await _refused(
        lambda: sdk.threads.create(
            supersteps=[{"updates": [{"values": {}, "command": {"goto": "m"}, "as_node": "x"}]}]
        ),
        "superstep's command",
    )
    assert await runs.list(tid) == []  # nothing refused started a run


async def test_a_rollback_cancel_undoes_the_run_and_forgets_it(sdk: Any) -> None:
    """As on LangGraph's server: the cancel answers 202, the run is gone at once (404,
    not listed), and the thread's state is back to before the run, from which the next
    run goes on; with ``wait`` the answer is ``{}`` once the run stopped."""
    tid = (await sdk.threads.create())["thread_id"]
    first = await sdk.runs.create(tid, "agent", input=hello())
    await sdk.runs.join(tid, first["run_id"])
    before = await sdk.threads.get_state(tid)
    run = await sdk.runs.create(tid, "agent", input=hello("slow"))
    await _until_messages(sdk, tid, 4)  # its input and its tool call are the thread's now
    assert await sdk.runs.cancel(tid, run["run_id"], action="rollback") is None
    with pytest.raises(NotFoundError):
        await sdk.runs.get(tid, run["run_id"])
    assert [r["run_id"] for r in await sdk.runs.list(tid)] == [first["run_id"]]
    await _until_thread_status(sdk, tid, "idle")
    after = await sdk.threads.get_state(tid)
    assert after["values"] == before["values"]
    assert after["checkpoint"]["checkpoint_id"] == before["checkpoint"]["checkpoint_id"]
    again = await sdk.runs.wait(tid, "agent", input=hello("again"))
    contents = [m["content"] for m in again["messages"]]
    assert contents == [
        *(m["content"] for m in before["values"]["messages"]),
        "again",
        "answer to again",
    ]

    waited = await sdk.runs.create(tid, "agent", input=hello("slow"))
    await _until_messages(sdk, tid, 6)
    assert await sdk.runs.cancel(tid, waited["run_id"], action="rollback", wait=True) == {}
    assert (await sdk.threads.get(tid))["status"] == "idle"
    assert len((await sdk.threads.get_state(tid))["values"]["messages"]) == 4
    with pytest.raises(NotFoundError):
        await sdk.runs.get(tid, waited["run_id"])


async def _until_messages(sdk: Any, tid: str, count: int, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while len((await sdk.threads.get_state(tid))["values"]["messages"]) < count:
        assert time.monotonic() < deadline, f"the thread never had {count} messages"
        await asyncio.sleep(0.1)


async def _until_thread_status(sdk: Any, tid: str, status: str, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while (await sdk.threads.get(tid))["status"] != status:
        assert time.monotonic() < deadline, f"the thread never became {status}"
        await asyncio.sleep(0.1)


async def test_assistants_search_by_metadata_sorted_selected_and_counted(sdk: Any) -> None:
    gated = await sdk.assistants.search(metadata={"loopline_ref": "gated@1"})
    assert [a["assistant_id"] for a in gated] == ["gated"]
    assert await sdk.assistants.search(metadata={"owner": "nobody"}) == []
    by_name = await sdk.assistants.search(sort_by="name", sort_order="asc", select=["name"])
    assert by_name == [{"name": n} for n in ("agent", "each-gated", "gated", "planner")]
    assert await sdk.assistants.count() == 4
    assert await sdk.assistants.count(graph_id="agent") == 1
    assert await sdk.assistants.count(metadata={"loopline_ref": "gated@1"}) == 1
    assert await sdk.assistants.count(metadata={"owner": "nobody"}) == 0
    await _refused(lambda: sdk.assistants.search(select=["nope"]), "select")


async def test_runs_list_selects_fields(sdk: Any) -> None:
    tid = (await sdk.threads.create())["thread_id"]
    await sdk.runs.wait(tid, "agent", input=hello())
    (run,) = await sdk.runs.list(tid, select=["run_id", "status"])
    assert set(run) == {"run_id", "status"} and run["status"] == "success"
    await _refused(lambda: sdk.runs.list(tid, select=["nope"]), "nope")


async def test_an_agents_graph_is_drawn_as_langgraph_draws_it(gateway: GatewayProcess) -> None:
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        assert (await http.get("/assistants/agent/graph")).json() == REFERENCE_PLAIN_GRAPH
        drawn = await http.get("/assistants/gated/graph", params={"xray": "true"})
        assert drawn.json() == REFERENCE_GATED_GRAPH
        for name in ("agent", "gated"):
            answer = await http.get(f"/assistants/{name}/subgraphs")
            assert answer.json() == REFERENCE_SUBGRAPHS
        assert (await http.get("/assistants/nobody/graph")).status_code == 404
        assert (await http.get("/assistants/agent/graph", params={"xray": "-1"})).status_code == 422


async def test_a_run_that_ended_is_deleted(sdk: Any) -> None:
    tid = (await sdk.threads.create())["thread_id"]
    await sdk.runs.wait(tid, "agent", input=hello())
    (run,) = await sdk.runs.list(tid)
    await sdk.runs.delete(tid, run["run_id"])
    with pytest.raises(NotFoundError):
        await sdk.runs.get(tid, run["run_id"])
    assert await sdk.runs.list(tid) == []
    with pytest.raises(NotFoundError):
        await sdk.runs.delete(tid, run["run_id"])


async def test_cancel_many_stops_the_runs_named_or_of_a_status(sdk: Any) -> None:
    tid = (await sdk.threads.create())["thread_id"]
    first = await sdk.runs.create(tid, "agent", input=hello("slow"))
    await _until_status(sdk, tid, first["run_id"], "running")
    second = await sdk.runs.create(tid, "agent", input=hello(), multitask_strategy="enqueue")
    await sdk.runs.cancel_many(thread_id=tid, run_ids=[first["run_id"]])
    await sdk.runs.join(tid, first["run_id"])
    assert (await sdk.runs.get(tid, first["run_id"]))["status"] == "interrupted"
    await sdk.runs.join(tid, second["run_id"])
    assert (await sdk.runs.get(tid, second["run_id"]))["status"] == "success"

    third = await sdk.runs.create(tid, "agent", input=hello("slow"))
    await _until_status(sdk, tid, third["run_id"], "running")
    await sdk.runs.cancel_many(status="running")  # every thread's, as LangGraph's server
    await sdk.runs.join(tid, third["run_id"])
    assert (await sdk.runs.get(tid, third["run_id"]))["status"] == "interrupted"
    with pytest.raises(NotFoundError) as nothing:
        await sdk.runs.cancel_many(status="all")
    assert nothing.value.response.json()["detail"] == REFERENCE_NOTHING_TO_CANCEL
    detail = await _refused(lambda: sdk.runs.cancel_many(thread_id=tid, status="running"))
    assert detail == REFERENCE_STATUS_WITH_THREAD
    await asyncio.sleep(0)


# -- a clean stop ----------------------------------------------------------------------

HANG_S = 30.0
shared.SCRIPTS.setdefault(  # a run that does not move while the gateway is stopped
    "hang long",
    [Reply(tool_calls=(ScriptedToolCall("hang", {"seconds": HANG_S}),)), Reply(content="woke")],
)


async def _stream_events(url: str, thread_id: str, seen: list[str]) -> None:
    """Follow a run's stream until it ends, noting each event's name."""
    body = {"assistant_id": "agent", "input": hello("hang long"), "stream_mode": "values"}
    async with (
        httpx.AsyncClient(base_url=url, timeout=60) as http,
        http.stream("POST", f"/threads/{thread_id}/runs/stream", json=body) as answer,
    ):
        async for line in answer.aiter_lines():
            if line.startswith("event: "):
                seen.append(line.removeprefix("event: "))


async def test_the_gateway_stops_within_5_s_of_sigterm_while_runs_stream_and_clients_wait(
    deployment: Any, sdk: Any
) -> None:
    """``--port`` over ``LOOPLINE_API_PORT``; then SIGTERM while one client follows a
    stream and another waits on ``/runs/wait`` for a run that does not move: the process
    exits within 5 s, the stream ends (without ``end``: the run goes on, to be resumed
    elsewhere) and the wait is answered 503."""
    port = free_port()
    api = GatewayProcess(
        deployment.redis_url,
        deployment.prefix,
        env={"LOOPLINE_API_PORT": str(free_port())},
        port=port,
        args=["--port", str(port), "--host", "127.0.0.1"],
    )
    with api:
        async with httpx.AsyncClient(base_url=api.url, timeout=60) as http:
            thread_id = (await http.post("/threads", json={})).json()["thread_id"]
            seen: list[str] = []
            streaming = asyncio.ensure_future(_stream_events(api.url, thread_id, seen))
            waited_body = {"assistant_id": "agent", "input": hello("hang long")}
            waiting = asyncio.ensure_future(http.post("/runs/wait", json=waited_body))
            for _ in range(200):
                if "values" in seen:
                    break
                await asyncio.sleep(0.05)
            assert "values" in seen and not waiting.done()
            await asyncio.sleep(0.5)  # the wait is in the gateway, on a run that hangs
            started = time.monotonic()
            api.send_signal(signal.SIGTERM)
            status = await asyncio.to_thread(api.wait, 10)
            stopped_s = time.monotonic() - started
            await asyncio.wait_for(streaming, 5)  # the stream ended
            answered = await asyncio.wait_for(waiting, 5)
    assert stopped_s < 5, f"stopped after {stopped_s:.1f} s"
    print(f"stopped {stopped_s:.2f} s after SIGTERM")
    assert status in (0, -signal.SIGTERM), api.output()  # uvicorn exits by the signal
    assert seen[0] == "metadata" and "end" not in seen
    assert answered.status_code == 503 and "join" in answered.json()["detail"]
    (run,) = await sdk.runs.list(thread_id)  # the run went on, on the bus
    assert run["status"] == "running"
    await sdk.runs.cancel(thread_id, run["run_id"], wait=True)

"""The thread-centric streaming protocol (``client.threads.stream()``), the thread stream
(``threads.join_stream``) and a failed run's error, through the real ``langgraph_sdk``
against ``loopline serve api`` with the services as processes (the fixtures of
``test_http_gateway``), beside the pure translation of a run's items into the protocol's
events.

What LangGraph's own server (``langgraph dev``, langgraph-api 0.16.7 in memory) answered
for the same calls is kept below as data (``REFERENCE_*``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from langchain_core.language_models._compat_bridge import chunks_to_events
from langchain_core.messages import AIMessage, AIMessageChunk, ToolMessage
from langchain_core.outputs import ChatGenerationChunk

from contracts.events import DecisionsRefused, ExceptionInfo, TaskFailed
from loopline.api.protocol_events import RunEvents, Subscription, protocol_state
from loopline.api.run_errors import HIDDEN_MESSAGE, run_error
from loopline.api.wire import jsonable
from loopline.testing.processes import GatewayProcess
from tests import test_http_gateway as shared
from tests.test_http_gateway import ANSWER, hello

scripted = shared.scripted
deployment = shared.deployment
gateway = shared.gateway
sdk = shared.sdk

# what langgraph dev answered (a create_agent graph on the scripted model, no tools)
REFERENCE_COMMAND_ERRORS = {
    "unknown method": (200, "unknown_command", "Unknown protocol command: nope"),
    "no id": (400, "invalid_argument", None),
}
REFERENCE_BAD_CHANNELS = (
    "channels contains unsupported entries: nope. Allowed: values, updates, messages, tools, "
    "custom, lifecycle, input, tasks, or any `custom:<name>`."
)
REFERENCE_NO_CHANNELS = "channels is required and must be a non-empty array"
REFERENCE_RUN_EVENTS = [  # method, and the data's event for lifecycle and messages
    ("lifecycle", "running"),
    ("values", None),
    ("messages", "message-start"),
    ("messages", "content-block-start"),
    ("messages", "content-block-delta"),
    ("messages", "content-block-finish"),
    ("messages", "message-finish"),
    ("values", None),
    ("lifecycle", "completed"),
]
"""Channels values, messages and lifecycle of one run (langgraph dev streamed its reply's
text in two deltas; the count of deltas follows the model's chunks)."""
REFERENCE_RECURSION_ERROR = {
    "error": "GraphRecursionError",
    "message": "Recursion limit of 1 reached without hitting a stop condition. You can "
    "increase the limit by setting the `recursion_limit` config key.\nFor "
    "troubleshooting, visit: "
    "https://docs.langchain.com/oss/python/langgraph/errors/GRAPH_RECURSION_LIMIT",
}
"""The error of a run with ``config={"recursion_limit": 1}``: in the stream's ``error``
event, ``join``'s ``__error__`` and the thread's ``error``."""
REFERENCE_TOOLS = [
    {"event": "tool-started", "tool_call_id": "call_0_0_add", "tool_name": "add"},
    {"event": "tool-finished", "tool_call_id": "call_0_0_add"},
]
"""Channels ``tools``, ``tasks`` of a create_agent run with one ``add`` call: those two
events (``input`` the call's args, ``output`` the tool message), nothing on ``tasks``."""
REFERENCE_MODEL_ERROR = {"error": "OpenAIAPIError", "message": "An internal error occurred"}
"""The error of a run whose model answered 500: the class is named, its message hidden."""


async def _events(
    url: str, thread_id: str, body: dict[str, Any], until: str = "completed", timeout_s: float = 30
) -> list[dict[str, Any]]:
    """The events of ``POST /threads/{id}/stream/events`` until a root lifecycle event
    ``until`` (the stream itself does not end: it follows the thread's next runs)."""
    found: list[dict[str, Any]] = []

    async def read() -> None:
        async with (
            httpx.AsyncClient(base_url=url, timeout=timeout_s) as http,
            http.stream("POST", f"/threads/{thread_id}/stream/events", json=body) as response,
        ):
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    event = json.loads(line[len("data: ") :])
                    found.append(event)
                    data = event["params"]["data"]
                    if event["method"] == "lifecycle" and data["event"] == until:
                        return

    await asyncio.wait_for(read(), timeout_s)
    return found


def _shape(events: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    for event in events:
        data = event["params"]["data"]
        kind = data.get("event") if event["method"] in ("lifecycle", "messages") else None
        if out and out[-1] == (event["method"], kind) == ("messages", "content-block-delta"):
            continue  # one delta per model chunk: as many as the model sent
        out.append((event["method"], kind))
    return out


async def test_threads_stream_runs_on_a_new_thread_and_gives_its_output(
    sdk: Any, gateway: GatewayProcess
) -> None:
    async with sdk.threads.stream(assistant_id="agent") as stream:
        started = await stream.run.start(input=hello())
        output = await stream.output.with_timeout(30)
        thread_id = stream.thread_id
    assert [m["content"] for m in output["messages"]] == ["hello", ANSWER]
    (run,) = await sdk.runs.list(thread_id)
    assert run["run_id"] == started["run_id"] and run["status"] == "success"
    assert run["multitask_strategy"] == "enqueue"  # run.start's default, as langgraph-api's

    # the same run replayed on a stream of its thread, as langgraph dev sends it
    body = {"channels": ["values", "messages", "lifecycle"]}
    events = await _events(gateway.url, thread_id, body)
    assert _shape(events) == REFERENCE_RUN_EVENTS
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(set(seqs)) and seqs[0] == 1  # every event counts, wanted or not
    assert len({e["event_id"] for e in events}) == len(events)
    text = "".join(
        e["params"]["data"]["delta"]["text"]
        for e in events
        if e["params"]["data"].get("event") == "content-block-delta"
    )
    assert text == ANSWER
    final = events[-2]["params"]["data"]["messages"]
    assert [(m["type"], m["content"]) for m in final] == [("human", "hello"), ("ai", ANSWER)]
    # a reconnect with ``since`` skips what the client had, with the same ids
    again = await _events(gateway.url, thread_id, {**body, "since": seqs[3]})
    assert [e["event_id"] for e in again] == [e["event_id"] for e in events[4:]]
    assert [e["seq"] for e in again] == seqs[4:]
    # ``updates`` name their node beside the node's values, as langgraph-api's
    updates = await _events(gateway.url, thread_id, {"channels": ["updates", "lifecycle"]})
    (update,) = [e["params"] for e in updates if e["method"] == "updates"]
    assert update["node"] == "model" and update["data"]["messages"][0]["content"] == ANSWER


async def test_a_tool_call_streams_on_tools_as_langgraph_streams_it(
    sdk: Any, gateway: GatewayProcess
) -> None:
    async with sdk.threads.stream(assistant_id="agent") as stream:
        await stream.run.start(input=hello("gated"))  # the plain agent: add runs at once
        await stream.output.with_timeout(30)
    body = {"channels": ["tools", "tasks", "lifecycle"]}
    events = await _events(gateway.url, stream.thread_id, body)
    assert [e["method"] for e in events] == ["lifecycle", "tools", "tools", "lifecycle"]
    started, finished = (e["params"]["data"] for e in events[1:3])
    assert set(started) == {*REFERENCE_TOOLS[0], "input"}
    assert set(finished) == {*REFERENCE_TOOLS[1], "output"}
    assert (started["event"], started["tool_name"], finished["event"]) == (
        "tool-started",
        "add",
        "tool-finished",
    )
    assert started["tool_call_id"] == finished["tool_call_id"]
    assert started["input"] == {"a": 2, "b": 3} and finished["output"]["content"] == "5"


async def test_an_interrupt_is_announced_and_answered_with_input_respond(
    sdk: Any, gateway: GatewayProcess
) -> None:
    async with sdk.threads.stream(assistant_id="gated") as stream:
        await stream.run.start(input=hello("gated"))
        for _ in range(300):
            if stream.interrupted:
                break
            await asyncio.sleep(0.1)
        assert stream.interrupted
        (asked,) = stream.interrupts
        state = await sdk.threads.get_state(stream.thread_id)
        (waiting,) = state["interrupts"]
        assert asked["interrupt_id"] == waiting["id"] and asked["value"] == waiting["value"]
        assert await stream.run.respond({"decisions": [{"type": "approve"}]}) == {}
        output = await stream.output.with_timeout(30)
    contents = [m["content"] for m in output["messages"]]
    assert contents[0] == "gated" and contents[-2:] == ["5", "2 + 3 is 5."]
    # the resumed run (the thread's newest) ran the approved call: on ``tools``
    body = {"channels": ["tools", "lifecycle"]}
    events = await _events(gateway.url, stream.thread_id, body)
    started, finished = [e["params"]["data"] for e in events if e["method"] == "tools"]
    assert (started["event"], started["tool_name"]) == ("tool-started", "add")
    assert finished["event"] == "tool-finished" and finished["output"]["content"] == "5"


async def test_commands_and_streams_refuse_what_they_cannot_take(
    sdk: Any, gateway: GatewayProcess
) -> None:
    tid = (await sdk.threads.create())["thread_id"]
    async with httpx.AsyncClient(base_url=gateway.url, timeout=10) as http:
        unknown = await http.post(f"/threads/{tid}/commands", json={"id": 1, "method": "nope"})
        no_id = await http.post(f"/threads/{tid}/commands", json={"method": "run.start"})
        for name, response in (("unknown method", unknown), ("no id", no_id)):
            status, code, message = REFERENCE_COMMAND_ERRORS[name]
            assert response.status_code == status
            assert response.json()["type"] == "error" and response.json()["error"] == code
            assert message is None or response.json()["message"] == message
        no_assistant = await http.post(
            f"/threads/{tid}/commands", json={"id": 2, "method": "run.start", "params": {}}
        )
        assert no_assistant.json()["error"] == "invalid_argument"
        for params, named in (
            ({"langsmith_tracer": {"project_name": "p"}}, "langsmith_tracer"),
            ({"checkpoint": {"checkpoint_id": "c"}}, "checkpoint"),
            ({"multitaskStrategy": "bogus"}, "multitaskStrategy"),
        ):
            command = {"method": "run.start", "params": {"assistant_id": "agent", **params}}
            refused = await http.post(f"/threads/{tid}/commands", json={"id": 5, **command})
            assert refused.json()["error"] == "invalid_argument"
            assert named in refused.json()["message"]
        assert await sdk.runs.list(tid) == []  # nothing refused started a run
        nothing_waits = await http.post(
            f"/threads/{tid}/commands",
            json={"id": 3, "method": "input.respond", "params": {"interrupt_id": "x"}},
        )
        assert nothing_waits.json()["error"] == "no_such_run"
        tree = await http.post(
            f"/threads/{tid}/commands", json={"id": 4, "method": "agent.getTree"}
        )
        assert tree.json()["error"] == "unsupported" and "/graph" in tree.json()["message"]
        bad = await http.post(f"/threads/{tid}/stream/events", json={"channels": ["nope"]})
        assert (bad.status_code, bad.json()["detail"]) == (400, REFERENCE_BAD_CHANNELS)
        empty = await http.post(f"/threads/{tid}/stream/events", json={})
        assert (empty.status_code, empty.json()["detail"]) == (400, REFERENCE_NO_CHANNELS)
        unknown_thread = await http.post(
            "/threads/00000000-0000-4000-8000-000000000000/stream/events",
            json={"channels": ["values"]},
        )
        assert unknown_thread.status_code == 404
        bad_mode = await http.get(f"/threads/{tid}/stream", params={"stream_modes": "x"})
        assert bad_mode.status_code == 422


async def test_join_stream_follows_the_threads_next_run(sdk: Any) -> None:
    """Every frame of the run as ``runs.stream`` sends it, then ``metadata`` with
    ``run_done`` (langgraph dev's first event for such a run is its ``metadata``)."""
    tid = (await sdk.threads.create())["thread_id"]
    parts: list[Any] = []

    async def read() -> None:
        async for part in await sdk.threads.join_stream(tid):
            parts.append(part)
            if part.event == "metadata" and part.data.get("status") == "run_done":
                return

    reading = asyncio.ensure_future(asyncio.wait_for(read(), 30))
    await asyncio.sleep(0.5)
    run = await sdk.runs.create(tid, "agent", input=hello(), stream_mode=["values", "updates"])
    await reading
    assert parts[0].event == "metadata" and parts[0].data["run_id"] == run["run_id"]
    assert {p.event for p in parts[1:-1]} == {"values", "updates"}
    assert parts[-1].data == {"status": "run_done", "run_id": run["run_id"]}
    assert parts[-2].data["messages"][-1]["content"] == ANSWER


async def test_a_failed_runs_error_is_named_as_langgraph_names_it(
    sdk: Any, gateway: GatewayProcess
) -> None:
    tid = (await sdk.threads.create())["thread_id"]
    limit = {"recursion_limit": 1}
    parts = [p async for p in sdk.runs.stream(tid, "agent", input=hello("x"), config=limit)]
    (error,) = [p.data for p in parts if p.event == "error"]
    assert error == REFERENCE_RECURSION_ERROR
    (run,) = await sdk.runs.list(tid)
    assert (await sdk.runs.join(tid, run["run_id"]))["__error__"] == REFERENCE_RECURSION_ERROR
    thread = await sdk.threads.get(tid)
    assert thread["status"] == "error" and thread["error"] == REFERENCE_RECURSION_ERROR
    # the protocol's lifecycle says it failed, with the error's message
    events = await _events(gateway.url, tid, {"channels": ["lifecycle"]}, until="failed")
    failed = events[-1]["params"]["data"]
    assert failed == {
        "event": "failed",
        "graph_name": "agent",
        "error": REFERENCE_RECURSION_ERROR["message"],
    }


# -- in process: the rule for errors, the translation of items ---------------------------------


def _failed(cls: str, message: str) -> TaskFailed:
    info = ExceptionInfo(type=cls, message=message)
    return TaskFailed(task_id="t", step=1, reason=f"x: {message}", exception=info)


@pytest.mark.fast
def test_an_errors_message_is_shown_only_for_the_exceptions_langgraph_shows() -> None:
    shown = run_error(_failed("builtins:RuntimeError", "cannot do it"))
    assert shown == {"error": "RuntimeError", "message": "cannot do it"}
    recursion = _failed("langgraph.errors:GraphRecursionError", "Recursion limit of 1")
    assert run_error(recursion) == {
        "error": "GraphRecursionError",
        "message": "Recursion limit of 1",
    }
    model = _failed("langchain_openai.chat_models.base:OpenAIAPIError", "secret url")
    assert run_error(model) == REFERENCE_MODEL_ERROR
    unknown = _failed("some_tool_module:OwnError", "internals")
    assert run_error(unknown) == {"error": "OwnError", "message": HIDDEN_MESSAGE}
    deadline = TaskFailed(task_id="t", step=1, reason="deadline passed")
    assert run_error(deadline) == {"error": "TaskFailed", "message": "deadline passed"}
    refused = DecisionsRefused(task_id="t", step=1, reason="3 decisions for 1 call")
    assert run_error(refused) == {"error": "ValueError", "message": "3 decisions for 1 call"}


@pytest.mark.fast
async def test_a_runs_items_become_the_protocols_events() -> None:
    run = RunEvents("r1", "agent")
    out = run.started()
    human = {"type": "human", "content": "hi", "id": "h1", "additional_kwargs": {}}
    out += await run.item("log:1", ("values", {"messages": [human]}))
    at_model = {"langgraph_node": "model"}
    for k, text in enumerate(("Hel", "lo")):
        out += await run.item(
            f"chunks:{k}", ("messages", (AIMessageChunk(content=text, id="a1"), at_model))
        )
    kinds = [e["params"]["data"].get("event") for e in out if e["method"] == "messages"]
    assert kinds == ["message-start", "content-block-start", *["content-block-delta"] * 2]
    call = {"name": "add", "args": {"a": 2}, "id": "c1"}
    reply = AIMessage("Hello", id="a1", tool_calls=[call])
    out += await run.item("log:2", ("updates", {"model": {"messages": [reply]}}))
    tool = ToolMessage("5", tool_call_id="c1", id="t1")
    at_tools = {"langgraph_node": "tools"}
    out += await run.item("chunks:3", ("messages", (tool, at_tools)))  # not on ``messages``
    interrupt = {"value": {"ask": "ok?"}, "id": "i1"}
    out += await run.item("log:3", ("values", {"messages": [human], "__interrupt__": [interrupt]}))
    out += await run.finished("completed")
    methods = [e["method"] for e in out]
    assert methods == [
        "lifecycle",
        "values",
        *["messages"] * 6,
        "updates",
        "tools",  # the call started (once its result came)
        "tools",  # and finished
        *["messages"] * 5,  # its result as a tool message, under the call's namespace
        "values",
        "input.requested",
        "lifecycle",
    ]
    mirrored = [e for e in out if e["params"]["namespace"]]
    assert {tuple(e["params"]["namespace"]) for e in mirrored} == {("tools:c1",)}
    assert mirrored[0]["params"]["data"] == {
        "event": "message-start",
        "role": "tool",
        "id": "t1",
        "tool_call_id": "c1",
    }
    assert mirrored[2]["params"]["data"]["content"] == {"type": "text", "text": "5"}
    tools = [e["params"]["data"] for e in out if e["method"] == "tools"]
    assert [(t["event"], t["tool_call_id"]) for t in tools] == [
        ("tool-started", "c1"),
        ("tool-finished", "c1"),
    ]
    assert tools[0]["input"] == {"a": 2} and tools[1]["output"]["content"] == "5"
    at_root = [e for e in out if not e["params"]["namespace"]]
    kinds = [e["params"]["data"]["event"] for e in at_root if e["method"] == "messages"]
    assert kinds == [
        "message-start",
        "content-block-start",
        "content-block-delta",
        "content-block-delta",
        "content-block-finish",
        "message-finish",
    ]
    by_method = {e["method"]: e["params"]["data"] for e in out}  # the last of each
    (update,) = [e["params"] for e in out if e["method"] == "updates"]
    assert update["node"] == "model" and update["data"]["messages"][0]["content"] == "Hello"
    assert update["data"]["messages"][0]["tool_calls"] == [{"type": "tool_call", **call}]
    assert "__interrupt__" not in by_method["values"]
    assert by_method["input.requested"] == {
        "interrupt_id": "i1",
        "payload": {"ask": "ok?"},
        "value": {"ask": "ok?"},
    }
    assert out[-1]["params"]["data"] == {"event": "interrupted", "graph_name": "agent"}
    assert len({e["event_id"] for e in out}) == len(out)
    assert protocol_state(human) == {"type": "human", "content": "hi", "id": "h1"}


@pytest.mark.fast
def test_a_subscription_takes_its_channels_at_the_root() -> None:
    event = {"method": "input.requested", "params": {"namespace": []}}
    assert Subscription(frozenset({"input"})).wants(event)
    assert not Subscription(frozenset({"values"})).wants(event)
    assert Subscription(frozenset({"input"}), ((),)).wants(event)
    assert not Subscription(frozenset({"input"}), (("child",),)).wants(event)
    mirrored = {"method": "messages", "params": {"namespace": ["tools:c1"]}}
    assert Subscription(frozenset({"messages"})).wants(mirrored)
    assert Subscription(frozenset({"messages"}), ((),)).wants(mirrored)
    assert not Subscription(frozenset({"messages"}), ((),), depth=0).wants(mirrored)


@pytest.mark.fast
async def test_a_reply_streamed_chunk_by_chunk_has_the_events_of_the_whole_reply() -> None:
    """Fed one chunk at a time, a reply's events are those LangChain's converter makes
    from all its chunks at once: text, then a tool call whose arguments come in pieces."""
    call = {"name": "add", "args": '{"a": ', "id": "c1", "index": 1}
    chunks = [
        AIMessageChunk(content="Let me ", id="a1"),
        AIMessageChunk(content="add.", id="a1"),
        AIMessageChunk(content="", id="a1", tool_call_chunks=[call]),
        AIMessageChunk(
            content="",
            id="a1",
            tool_call_chunks=[{"name": None, "args": "2}", "id": None, "index": 1}],
            response_metadata={"finish_reason": "tool_calls", "model_provider": "openai"},
        ),
    ]
    run = RunEvents("r1", "agent")
    fed = []
    for k, chunk in enumerate(chunks):
        made = await run.item(f"c:{k}", ("messages", (chunk, {})))
        assert made, "every chunk of this reply makes an event at once"
        fed += made
    fed += (await run.finished("completed"))[:-1]
    whole = chunks_to_events(
        iter([ChatGenerationChunk(message=c) for c in chunks]), message_id="a1"
    )
    assert [e["params"]["data"] for e in fed] == jsonable(list(whole))
    assert fed[-2]["params"]["data"]["content"] == {
        "type": "tool_call",
        "id": "c1",
        "name": "add",
        "args": {"a": 2},
    }

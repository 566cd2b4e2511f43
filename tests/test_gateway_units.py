"""The HTTP gateway's pure parts, in this process: API keys and who may call, stream
positions (what a reconnect resumes from), run bodies, and the frames of LangGraph's
older ``messages`` stream mode."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.messages import AIMessageChunk, ToolMessage

from loopline.api.events import Cursor, entry_position
from loopline.api.records import RunRecord
from loopline.api.runs import RunRequest, loopline_modes
from loopline.api.server import tenancy_of
from loopline.api.settings import ApiSettings, BadKeys, Tenancy, parse_keys
from loopline.api.sse import FrameWriter, frame
from loopline.api.thread_ttl import BadThreadTTL, parse_policy
from loopline.api.wire import BadRequest, input_messages
from services.errors import ConfigurationError
from services.settings import Settings

pytestmark = pytest.mark.fast


def test_keys_map_to_prefixes_and_malformed_ones_are_refused() -> None:
    assert parse_keys(" k1=acme, k2=acme ,k3=beta.eu,") == {
        "k1": "acme",
        "k2": "acme",
        "k3": "beta.eu",
    }
    assert parse_keys("") == {}
    for bad in ("secretkey", "=acme", "secretkey=", "secretkey=ac:me", "secretkey=a*"):
        with pytest.raises(BadKeys) as refused:
            parse_keys(bad)
        assert "secretkey" not in str(refused.value)  # the error never shows a key


def test_without_keys_only_local_clients_reach_the_default_prefix() -> None:
    open_locally = Tenancy(keys={}, default_prefix="loopline")
    assert open_locally.prefix_for(None, "127.0.0.1") == "loopline"
    assert open_locally.prefix_for(None, "::1") == "loopline"
    assert open_locally.prefix_for("anything", "10.0.0.7") is None
    keyed = Tenancy(keys={"k1": "acme"}, default_prefix="loopline")
    assert keyed.prefix_for("k1", "10.0.0.7") == "acme"
    assert keyed.prefix_for(None, "127.0.0.1") is None
    assert keyed.prefix_for("k2", "127.0.0.1") is None


def test_a_gateway_without_keys_listens_on_this_machine_only() -> None:
    settings = Settings(prefix="loopline")
    with pytest.raises(ConfigurationError, match="LOOPLINE_API_KEYS"):
        tenancy_of(ApiSettings(host="0.0.0.0", keys=""), settings)
    assert tenancy_of(ApiSettings(host="0.0.0.0", keys="k=acme"), settings).keys == {"k": "acme"}
    assert tenancy_of(ApiSettings(host="127.0.0.1"), settings).open_locally
    with pytest.raises(ConfigurationError, match="KEY=PREFIX"):
        tenancy_of(ApiSettings(host="127.0.0.1", keys="nokey"), settings)


def test_a_cursor_names_what_was_seen_in_both_streams() -> None:
    cursor = Cursor().after("log", entry_position("1700000000000-3", 2))
    cursor = cursor.after("chunks", entry_position("1700000000001-0", 5))
    again = Cursor.decode(cursor.encode())
    assert again == cursor
    assert again.seen("log", entry_position("1700000000000-3", 2))
    assert again.seen("log", entry_position("1699999999999-9", 40))
    assert not again.seen("log", entry_position("1700000000000-3", 3))
    assert not again.seen("log", entry_position("1700000000000-4", 0))
    assert again.seen("chunks", entry_position("1700000000001-0", 0))
    assert not again.seen("chunks", entry_position("1700000000002-0", 0))
    assert not Cursor().seen("log", entry_position("0-0", 0))  # a run's first values
    with pytest.raises(ValueError):
        Cursor.decode("12-0")


def test_run_bodies_are_checked() -> None:
    run = RunRequest.parse(
        {"assistant_id": "agent", "input": {"messages": "hi"}, "stream_mode": "updates"}
    )
    assert run.stream_mode == ["updates"] and run.multitask_strategy == "reject"
    for bad in (
        [],
        {"input": {}},
        {"assistant_id": "a", "multitask_strategy": "later"},
        {"assistant_id": "a", "input": {"messages": "x"}, "command": {"resume": 1}},
    ):
        with pytest.raises(BadRequest):
            RunRequest.parse(bad)
    with pytest.raises(BadRequest):
        input_messages({"messages": []})
    (human,) = input_messages({"messages": [{"role": "user", "content": "hi"}]})
    assert human.type == "human" and human.content == "hi"


def test_modes_map_to_the_stream_mode_layer() -> None:
    assert loopline_modes(["messages-tuple", "values", "messages"]) == ["messages", "values"]
    # the server's modes are made from the stream-mode layer's (loopline.api.run_modes)
    assert loopline_modes(["checkpoints"]) == ["values"]
    assert loopline_modes(["tasks"]) == ["messages", "updates", "values"]
    assert loopline_modes(["events", "values"]) == ["values", "messages", "updates"]


async def test_the_older_messages_mode_sends_the_reply_so_far() -> None:
    record = RunRecord(run_id="r1", task_id="r1", thread_id="t1", assistant_id="agent@2")
    writer = FrameWriter(None, record, ["messages"])  # type: ignore[arg-type]  # no server mode
    meta = {"langgraph_node": "model"}
    first = await writer.frames(("messages", (AIMessageChunk(content="Hel", id="m1"), meta)))
    second = await writer.frames(("messages", (AIMessageChunk(content="lo", id="m1"), meta)))
    assert [e for e, _ in first] == ["messages/metadata", "messages/partial"]
    assert first[0][1]["m1"]["metadata"]["graph_id"] == "agent"
    assert [e for e, _ in second] == ["messages/partial"]
    assert second[0][1][0].content == "Hello" and second[0][1][0].type == "ai"
    tool = ToolMessage(content="5", tool_call_id="c1", id="m2")
    assert [e for e, _ in await writer.frames(("messages", (tool, meta)))] == [
        "messages/metadata",
        "messages/complete",
    ]
    assert await writer.frames(("updates", {"model": {}})) == []  # not asked for
    assert frame("end", None) == b"event: end\ndata: null\n\n"
    assert frame("values", {"a": 1}, "1-0.0|0-0.-1").startswith(b"id: 1-0.0|0-0.-1\n")


def test_browser_pages_of_the_configured_origins_only() -> None:
    from starlette.testclient import TestClient

    from loopline.api.app import create_app

    tenancy = Tenancy(keys={"k": "acme"}, default_prefix="loopline")
    preflight = {"Origin": "https://ui.example.com", "Access-Control-Request-Method": "POST"}
    allowed = create_app("redis://127.0.0.1:1", tenancy, cors_origins=["https://ui.example.com"])
    with TestClient(allowed) as client:
        answer = client.options("/threads", headers=preflight)
        assert answer.headers["access-control-allow-origin"] == "https://ui.example.com"
        other = client.options("/threads", headers={**preflight, "Origin": "https://evil.test"})
        assert "access-control-allow-origin" not in other.headers
    with TestClient(create_app("redis://127.0.0.1:1", tenancy)) as client:
        answer = client.options("/threads", headers=preflight)
        assert "access-control-allow-origin" not in answer.headers
        assert client.get("/ok").json() == {"ok": True}
        assert client.get("/threads/t1", headers={"x-api-key": "wrong"}).status_code == 401


async def test_a_quiet_stream_sends_heartbeats_and_every_frame() -> None:
    import asyncio
    from collections.abc import AsyncIterator

    from loopline.api.sse import HEARTBEAT, with_heartbeats

    async def slow() -> AsyncIterator[bytes]:
        yield b"a"
        await asyncio.sleep(0.35)
        yield b"b"

    got = [chunk async for chunk in with_heartbeats(slow(), every_s=0.1)]
    assert got[0] == b"a" and got[-1] == b"b"
    assert 2 <= got.count(HEARTBEAT) <= 4 and len(got) == got.count(HEARTBEAT) + 2


def test_a_parameter_the_gateway_does_not_implement_is_refused_by_name() -> None:
    from starlette.datastructures import QueryParams

    from loopline.api.params import (
        AssistantSearch,
        CancelQuery,
        HistoryBody,
        JoinQuery,
        RunBody,
        StateUpdate,
        StorePut,
        StoreSearch,
        ThreadCreate,
        ThreadPatch,
        parse,
    )

    run = {"assistant_id": "agent", "input": {"messages": "hi"}}
    refused = {
        RunBody: [
            {**run, "interrupt_before": ["tools"]},
            {**run, "interrupt_after": "*"},
            {**run, "after_seconds": -1},
            {**run, "checkpoint_id": "c1"},
            {**run, "on_disconnect": "cancel"},
            {**run, "on_completion": "never"},
            {**run, "durability": "exit"},
        ],
        ThreadCreate: [
            {"supersteps": [{"updates": [{"values": {}, "command": {"resume": 1}}]}]},
            {"ttl": {"ttl": 5, "strategy": "keep_latest"}},
        ],
        HistoryBody: [{"select": ["values"]}, {"before": {"checkpoint_id": "c1"}}],
        ThreadPatch: [{"ttl": {"ttl": 5, "strategy": "keep_latest"}}],
        StateUpdate: [{"task_id": "t1"}],
        StoreSearch: [{"limit": -1}, {"refresh_ttl": "sometimes"}],
        AssistantSearch: [{"select": ["nope"]}, {"sort_by": "size"}],
    }
    for model, bodies in refused.items():
        for body in bodies:
            (name,) = set(body) - set(run)  # the one parameter refused
            with pytest.raises(BadRequest, match=name):
                parse(model, body)
    with pytest.raises(BadRequest, match="ttl"):  # minutes, more than none
        parse(StorePut, {"namespace": ["a"], "key": "k", "value": {}, "ttl": 0})
    with pytest.raises(BadRequest, match="'made-up' is not supported"):
        parse(RunBody, {**run, "stream_mode": "made-up"})
    for mode in ("events", "debug", "checkpoints", "tasks"):
        assert parse(RunBody, {**run, "stream_mode": mode}).stream_mode == [mode]
    for config, named in (
        ({"configurable": {"checkpoint_id": "c1"}}, "checkpoint_id"),  # time travel
        ({"configurable": {"model": "big"}}, "model"),  # a graph's own config
        ({"callbacks": []}, "config.callbacks"),
    ):
        with pytest.raises(BadRequest, match=named):
            parse(RunBody, {**run, "config": config})
    update = parse(StateUpdate, {"as_node": "tools", "checkpoint": {"checkpoint_id": "c1"}})
    assert update.as_node == "tools" and update.checkpoint == {"checkpoint_id": "c1"}
    older = parse(HistoryBody, {"before": {"configurable": {"checkpoint_id": "c1"}}})
    assert older.before == {"configurable": {"checkpoint_id": "c1"}}
    fine = {"recursion_limit": 5, "tags": ["t"], "configurable": {"thread_id": "t1"}}
    assert parse(RunBody, {**run, "config": fine}).config.recursion_limit == 5
    assert parse(CancelQuery, QueryParams("wait=0&action=rollback")).action == "rollback"
    with pytest.raises(BadRequest, match="action"):
        parse(CancelQuery, QueryParams("action=undo"))
    with pytest.raises(BadRequest, match="cancel_on_disconnect"):
        parse(JoinQuery, QueryParams("cancel_on_disconnect=true"))
    # what langgraph_sdk sends by default is accepted, nulls are parameters left out
    sent = parse(
        RunBody, {**run, "stream_subgraphs": False, "stream_resumable": True, "webhook": None}
    )
    assert sent.stream_mode == ["values"] and sent.stream_resumable
    assert (
        parse(JoinQuery, QueryParams("cancel_on_disconnect=false&stream_mode=")).stream_mode == []
    )
    assert parse(CancelQuery, QueryParams("wait=1&action=interrupt")).wait


def test_an_agent_with_middleware_langchain_does_not_have_is_not_drawn() -> None:
    from contracts.agent import AgentSpec, MiddlewareSpec, ModelSpec
    from loopline.api.graph import NotDrawable, graph_json

    spec = AgentSpec(model=ModelSpec(name="m"), tools=["pkg.tools:add"])
    drawn = graph_json(spec)
    (tools,) = [n for n in drawn["nodes"] if n["id"] == "tools"]
    assert tools["metadata"] == {"__tools": ["add"]} and "id" not in tools["data"]
    custom = spec.model_copy(update={"middleware": [MiddlewareSpec(type="pkg.mw:Audit")]})
    with pytest.raises(NotDrawable, match=r"pkg\.mw:Audit"):
        graph_json(custom)


async def test_a_stream_ends_when_the_gateway_stops() -> None:
    """A stream whose run is quiet ends as soon as the gateway stops (no ``end``: the run
    goes on), instead of holding the process."""
    import asyncio
    from collections.abc import AsyncIterator

    from loopline.api.sse import with_heartbeats

    async def quiet() -> AsyncIterator[bytes]:
        yield b"a"
        await asyncio.sleep(60)
        yield b"never"

    stopping = asyncio.Event()
    asyncio.get_running_loop().call_later(0.2, stopping.set)
    got = await asyncio.wait_for(
        _all(with_heartbeats(quiet(), every_s=10, stopping=stopping)), timeout=5
    )
    assert got == [b"a"]


async def _all(chunks: Any) -> list[bytes]:
    return [chunk async for chunk in chunks]


def test_the_operators_thread_ttl_is_langgraphs_setting() -> None:
    """``LOOPLINE_API_THREAD_TTL`` in the shapes LangGraph reads ``LANGGRAPH_THREAD_TTL``:
    minutes, or ``checkpointer.ttl`` as JSON; none: threads last until deleted."""
    assert parse_policy("").default_expiry(1000.0) is None
    assert parse_policy("").sweep_s(300.0) == 300.0
    assert parse_policy(" 60 ").default_expiry(1000.0) == 1000.0 + 3600
    given = parse_policy(
        '{"strategy": "delete", "default_ttl": 1.5, "sweep_interval_minutes": 2, "sweep_limit": 7}'
    )
    assert given.default_expiry(0.0) == 90.0
    assert given.sweep_s(300.0) == 120.0 and given.sweep_limit == 7
    for bad, why in (
        ('{"strategy": "keep_latest", "default_ttl": 5}', "'keep_latest' is not implemented"),
        ('{"default_ttl": 5, "refresh_on_read": true}', "refresh_on_read"),
        ('{"default_ttl": -1}', "greater than 0"),
        ("soon", "minutes"),
    ):
        with pytest.raises(BadThreadTTL, match=why):
            parse_policy(bad)


def test_a_stream_that_fails_ends_with_an_error_frame_not_a_dropped_connection() -> None:
    """A dropped connection is what the SDKs reconnect to (and the stream failed again
    each time: a refused Redis command made a client loop for ever); LangGraph's server
    sends an ``error`` event and ends."""
    from loopline.api.sse import with_heartbeats

    async def frames() -> Any:
        yield b"event: metadata\ndata: {}\n\n"
        raise PermissionError("NOPERM this user has no permissions to run 'zscore'")

    async def collected() -> list[bytes]:
        return [chunk async for chunk in with_heartbeats(frames(), every_s=5)]

    got = asyncio.run(collected())
    assert got[0].startswith(b"event: metadata")
    assert got[-1].startswith(b"event: error") and b"PermissionError" in got[-1]
    assert b"zscore" in got[-1] and len(got) == 2

"""The per-entry hot path on a real Redis: the lean connection (``services.fastredis``),
a step's one small tool result riding in the next model request, and idempotent tools
running without a lease."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from contracts.agent import AgentSpec
from contracts.events import ModelRequested, ToolRequested
from contracts.messages import AIMessage, ToolCall, ToolMessage
from contracts.streams import DATA_FIELD
from services.fastredis import FastRedis, FastScript, stream_entries
from services.runtime import Runtime
from services.tasks.issued import call_seal, record_field
from services.tasks.loop import LAST_RESULT_MAX_BYTES, Loop
from services.tools.handlers import handlers as tools_handlers
from tests.support import (
    MakeRuntime,
    completed,
    events_on,
    issue_calls,
    pending_on,
    replied,
    reply_with_calls,
    result,
    run_entry,
    start_task,
)

pytestmark = pytest.mark.fast


@pytest.fixture
async def fast(redis_url: str) -> AsyncIterator[FastRedis]:
    client = FastRedis.from_url(redis_url)
    assert client is not None, f"{redis_url} should get the lean connection"
    yield client
    client.close()


# -- the lean connection --


async def test_concurrent_commands_share_one_connection_and_get_their_own_replies(
    fast: FastRedis, prefix: str
) -> None:
    key = f"{prefix}:n"
    replies = await asyncio.gather(*(fast.execute("INCR", key) for _ in range(500)))
    assert sorted(replies) == list(range(1, 501))  # each caller got one distinct reply
    assert await fast.execute("GET", key) == b"500"
    # issued in one turn, they left in one write: Redis saw a single client
    assert await fast.execute("DEL", key) == 1


async def test_an_error_reply_raises_and_the_connection_goes_on(
    fast: FastRedis, prefix: str
) -> None:
    key = f"{prefix}:s"
    await fast.execute("SET", key, "text")
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        await fast.execute("LPUSH", key, "x")
    assert await fast.execute("GET", key) == b"text"
    # an error inside a script's reply array is a value, not a failure of the call
    script = FastScript(fast, "return {1, redis.pcall('LPUSH', KEYS[1], 'x')}")
    one, error = await script(keys=[key])
    assert one == 1 and "WRONGTYPE" in str(error)


async def test_a_script_is_loaded_when_redis_does_not_know_it(
    fast: FastRedis, redis_client: aioredis.Redis
) -> None:
    lua = f"return ARGV[1] .. '-{uuid.uuid4().hex}'"
    script = FastScript(fast, lua)
    assert not (await redis_client.script_exists(script.sha))[0]
    reply = await script(args=["hi"])
    assert reply.startswith(b"hi-")
    assert (await redis_client.script_exists(script.sha))[0]


async def test_a_dropped_connection_fails_its_commands_and_the_next_reconnects(
    fast: FastRedis, redis_client: aioredis.Redis, prefix: str
) -> None:
    name = f"{prefix}-victim"
    await fast.execute("CLIENT", "SETNAME", name)
    blocked = asyncio.ensure_future(fast.execute("BLPOP", f"{prefix}:never", 10))
    await asyncio.sleep(0.1)
    clients = await redis_client.client_list()
    (victim,) = [c for c in clients if c.get("name") == name]
    await redis_client.client_kill_filter(_id=victim["id"])
    with pytest.raises(RedisConnectionError):
        await asyncio.wait_for(blocked, 5)
    assert await fast.execute("PING") == b"PONG"  # a new connection, opened on demand


async def test_user_password_and_database_from_the_url(
    redis_url: str, redis_client: aioredis.Redis, prefix: str
) -> None:
    parts = urlsplit(redis_url)
    if parts.scheme != "redis":
        pytest.fail(f"the test Redis should be reached by redis://, not {redis_url}")
    user, password = f"{prefix}-user", uuid.uuid4().hex
    await redis_client.acl_setuser(
        user, enabled=True, passwords=[f"+{password}"], keys=["*"], commands=["+@all"]
    )
    try:
        netloc = f"{user}:{password}@{parts.hostname}:{parts.port}"
        client = FastRedis.from_url(urlunsplit(("redis", netloc, "/3", "", "")))
        assert client is not None
        try:
            assert await client.execute("ACL", "WHOAMI") == user.encode()
            await client.execute("SET", f"{prefix}:in-db-3", "1")
        finally:
            client.close()
        wrong = FastRedis.from_url(
            urlunsplit(("redis", f"{user}:nope@{parts.netloc.rpartition('@')[2]}", "/3", "", ""))
        )
        assert wrong is not None
        with pytest.raises(ResponseError, match="WRONGPASS"):
            await wrong.execute("PING")
        wrong.close()
        assert await redis_client.exists(f"{prefix}:in-db-3") == 0  # not in database 0
        db3 = aioredis.Redis.from_url(urlunsplit(("redis", parts.netloc, "/3", "", "")))
        assert await db3.getdel(f"{prefix}:in-db-3") == b"1"
        await db3.aclose()
    finally:
        await redis_client.acl_deluser(user)


def test_urls_it_does_not_handle_are_left_to_redis_py() -> None:
    assert FastRedis.from_url("rediss://example:6380") is None
    assert FastRedis.from_url("redis+cluster://a:1,b:2") is None
    assert FastRedis.from_url("redis://localhost:6379/0") is not None
    assert FastRedis.from_url("unix:///tmp/redis.sock") is not None


async def test_a_blocking_read_gets_entries_with_their_fields(
    fast: FastRedis, redis_client: aioredis.Redis, prefix: str
) -> None:
    stream = f"{prefix}:stream"
    await redis_client.xgroup_create(stream, "g", id="0", mkstream=True)
    reader = fast.blocking()
    try:
        read = asyncio.ensure_future(
            reader.execute(
                "XREADGROUP", "GROUP", "g", "c", "COUNT", 10, "BLOCK", 5000, "STREAMS", stream, ">"
            )
        )
        await asyncio.sleep(0.1)
        assert await fast.execute("PING") == b"PONG"  # the blocked read holds only its own
        entry_id = await redis_client.xadd(stream, {DATA_FIELD: b"payload"})
        entries = stream_entries(await asyncio.wait_for(read, 5))
    finally:
        reader.close()
    assert entries == [(entry_id, {DATA_FIELD.encode(): b"payload"})]


# -- the step's one tool result in the next model request --


async def test_a_single_small_result_rides_in_the_model_request(rt: Runtime) -> None:
    assert rt.fast is not None  # the per-entry commands take the lean connection
    loop = Loop(rt)
    await start_task(rt, "r1")
    await rt.transcript("r1", 1)  # as the model service holds it when it calls the model
    await replied(rt, loop, reply_with_calls("r1", 1))
    (requested,) = await events_on(rt.redis, rt.names.tools, ToolRequested)
    assert (requested.result_at, requested.join_len) == (2, 3)
    # the model's own reply joined this process's cache when its transition committed
    cached = await rt.transcript("r1", 2)
    assert isinstance(cached[1], AIMessage) and cached[1].tool_calls[0].id == "c0"

    done = result("r1", "c0")
    await completed(rt, loop, done, 3, 2)
    (request,) = await events_on(rt.redis, rt.names.model, ModelRequested)
    assert request.transcript_len == 3 and request.last_result == done.message

    # A model service holding the first two messages takes the third from the request
    # (the very object), and it is the one stored at that place.
    transcript = await rt.transcript("r1", 3, 0, [request.last_result])
    assert transcript[2] is request.last_result
    stored = await rt.redis.lindex(rt.names.task_messages("r1"), 2)
    assert ToolMessage.model_validate_json(stored) == transcript[2]


async def test_a_model_service_missing_more_reads_the_transcript(
    rt: Runtime, make_runtime: MakeRuntime
) -> None:
    loop = Loop(rt)
    await start_task(rt, "r2")
    await replied(rt, loop, reply_with_calls("r2", 1))
    done = result("r2", "c0")
    await completed(rt, loop, done, 3, 2)
    (request,) = await events_on(rt.redis, rt.names.model, ModelRequested)

    other = await make_runtime()  # another replica: nothing cached
    transcript = await other.transcript("r2", 3, 0, [request.last_result])
    assert [m.type for m in transcript] == ["human", "ai", "tool"]
    assert transcript[2] is not request.last_result  # read from Redis, not taken
    assert transcript[2] == request.last_result


async def test_results_of_a_step_with_several_calls_or_large_ones_are_not_carried(
    rt: Runtime,
) -> None:
    loop = Loop(rt)
    await start_task(rt, "r3")
    await replied(rt, loop, reply_with_calls("r3", 2))
    for call_id, at in (("c0", 2), ("c1", 3)):
        done = result("r3", call_id)
        await completed(rt, loop, done, 4, at)
    (request,) = await events_on(rt.redis, rt.names.model, ModelRequested)
    # c1 completed the step and stands last: it rides along, but a cache ending at the AI
    # message lacks c0 too, so the request's result alone does not fill it
    assert request.last_result is not None and request.last_result.tool_call_id == "c1"
    await rt.transcript("r3", 2)
    transcript = await rt.transcript("r3", 4, 0, [request.last_result])
    assert [m.tool_call_id for m in transcript[2:] if isinstance(m, ToolMessage)] == ["c0", "c1"]

    await start_task(rt, "r4")
    await replied(rt, loop, reply_with_calls("r4", 1))
    big = result("r4", "c0")
    big = big.model_copy(
        update={"message": ToolMessage(content="x" * LAST_RESULT_MAX_BYTES, tool_call_id="c0")}
    )
    await completed(rt, loop, big, 3, 2)
    requests = await events_on(rt.redis, rt.names.model, ModelRequested)
    (r4,) = [r for r in requests if r.task_id == "r4"]
    assert r4.last_result is None and r4.transcript_len == 3


# -- idempotent tools take no lease --

IDEMPOTENT_SPEC = AgentSpec(
    model={"name": "fake", "params": {}},  # type: ignore[arg-type]
    tools=["tests.tooling:slow_idempotent", "tests.tooling:slow_effect"],
)


async def test_an_idempotent_tool_runs_without_a_lease_and_another_with_one(
    rt: Runtime, tmp_path: Any
) -> None:
    (on_tool,) = tools_handlers(rt).values()
    agent_id = await rt.save_agent(IDEMPOTENT_SPEC)
    record = str(tmp_path / "marks.jsonl")
    calls_key = rt.names.task_calls("lease")
    seen: dict[str, Any] = {}

    def state_of(raw: Any) -> str | None:
        """The state a call's record holds (None: no record)."""
        return None if raw is None else str(json.loads(raw)["state"])

    async def run(name: str) -> None:
        call_id = f"{name}-1"
        call = ToolCall(id=call_id, name=name, args={"tag": name, "seconds": 0.3, "record": record})
        event = ToolRequested(task_id="lease", step=1, agent_id=agent_id, call=call)
        await issue_calls(rt.redis, rt.names, "lease", agent_id, [call.id])

        async def outcome() -> Any:
            return await rt.redis.hget(calls_key, record_field(1, call_id))

        running = asyncio.ensure_future(run_entry(rt, "tools", event, on_tool, probe=outcome))
        await asyncio.sleep(0.15)  # the tool sleeps in its thread now
        seen[name] = await outcome()
        handled = await running
        # the outcome is recorded with the entry's commit either way: not yet when the
        # handler returns, "done" once the entry is settled
        assert state_of(handled.seen) == state_of(seen[name])
        assert state_of(await outcome()) == "done"

    await run("slow_idempotent")
    await run("slow_effect")
    assert seen["slow_idempotent"] is None  # no round trip for a lease
    assert state_of(seen["slow_effect"]) == "running"


async def test_a_sealed_idempotent_call_leaves_no_record(rt: Runtime, tmp_path: Any) -> None:
    """A transition's request (sealed) of an idempotent tool runs with no lease and leaves
    no record of its outcome: every delivery of it is sealed and runs it again without
    reading one. The same request unsealed is checked against the task's state, and its
    outcome recorded, so a late copy is told from a forged one."""
    (on_tool,) = tools_handlers(rt).values()
    agent_id = await rt.save_agent(IDEMPOTENT_SPEC)
    marks = tmp_path / "marks.jsonl"
    args = {"tag": "sealed", "seconds": 0, "record": str(marks)}
    for task_id, sealed in (("sealed", True), ("unsealed", False)):
        call = ToolCall(id="c1", name="slow_idempotent", args=args)
        await issue_calls(rt.redis, rt.names, task_id, agent_id, [call.id])
        seal = call_seal(await rt.sealer(), task_id, 1, agent_id, call) if sealed else None
        event = ToolRequested(task_id=task_id, step=1, agent_id=agent_id, call=call, seal=seal)
        await run_entry(rt, "tools", event, on_tool)
        assert await pending_on(rt.redis, rt.names.tools, "tools") == 0
        recorded = await rt.redis.hget(rt.names.task_calls(task_id), record_field(1, call.id))
        assert (recorded is None) is sealed
    assert [json.loads(line)["what"] for line in marks.read_text().splitlines()] == [
        "start",
        "end",
        "start",
        "end",
    ]

"""Streaming as LangChain streams: the same agent (a tool call, then an answer) and the same
scripted replies, streamed by the scripted server as OpenAI streams, through LangChain's
``create_agent`` in-process and through loopline (embedded in this process, and deployed
with the services as OS processes). ``stream_mode="messages"`` gives the same chunks
(content, tool call chunks, usage) with the same metadata keys in the same order;
``updates`` and ``values`` give the same items; a list of modes the same ``(mode, data)``
sequence. The chunk stream resumes from an offset without loss, and the durable log does
not grow with the number of chunks."""

from __future__ import annotations

import asyncio
import re
import uuid
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import pytest
from langchain.agents import create_agent as lc_create_agent
from langchain.agents.middleware import TodoListMiddleware
from langchain.agents.structured_output import ToolStrategy
from langchain_core.messages import AIMessageChunk, BaseMessage
from langchain_core.messages import HumanMessage as LcHumanMessage
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from contracts import HumanMessage
from contracts.chunks import ChunkBatch
from contracts.events import new_task_id
from contracts.streams import DATA_FIELD
from loopline.agent import Agent, create_agent
from loopline.client import Client
from loopline.stream_modes import stream_task
from loopline.testing.scripted import (
    Reply,
    ScriptedOpenAIServer,
    ScriptedToolCall,
    first_user_text,
)
from services.model.streaming import ChunkPublisher, StreamRequests
from services.runtime import Runtime
from services.settings import Settings
from tests import tooling
from tests.answers import Weather
from tests.middlewares import Recorder
from tests.runtime_tools import TrailState, step_on
from tests.support import (
    EMBEDDED_PREFIX,
    ServiceProcesses,
    services_on,
    twin_servers,
    unique_prefix,
    wait_for,
)

SYSTEM_PROMPT = "You add numbers."
TURNS = [
    Reply(content="Let me add those.", tool_calls=(ScriptedToolCall("add", {"a": 1, "b": 2}),)),
    Reply(content="The sum of one and two is 3, as the tool computed."),
]
LONG = "word " * 400  # 2,000 characters: 250 streamed pieces
MODES: list[Any] = ["messages", "updates", "values", ["updates", "messages", "values"]]


STATE_TURNS = [
    Reply(
        tool_calls=(
            ScriptedToolCall("write_todos", {"todos": [{"content": "walk", "status": "pending"}]}),
            ScriptedToolCall("step_on", {"label": "a"}),
        )
    ),
    Reply(
        tool_calls=(
            ScriptedToolCall("step_on", {"label": "b"}),
            ScriptedToolCall("step_on", {"label": "c"}),
        )
    ),
    Reply(tool_calls=(ScriptedToolCall("Weather", {"city": "Oslo", "celsius": 4}),)),
]
"""An agent with state besides its messages: the todo list (TodoListMiddleware), a key
with a reducer that the tools' Commands add to (two in one step) and one the input
sets (``state_schema``), and a structured response."""


THREAD_TURNS = [
    Reply(
        tool_calls=(
            ScriptedToolCall("write_todos", {"todos": [{"content": "sum", "status": "pending"}]}),
        )
    ),
    Reply(content="Planned."),
    Reply(tool_calls=(ScriptedToolCall("add", {"a": 1, "b": 2}),)),
    Reply(content="It is 3."),
]
"""Two runs of one thread: the first plans (a todo list), the second adds."""


def state_kwargs() -> dict[str, Any]:
    return {
        "middleware": [TodoListMiddleware()],
        "state_schema": TrailState,
        "response_format": ToolStrategy(Weather),
    }


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]]:
    scripts = {
        "stream": TURNS,
        "long": [Reply(content=LONG)],
        "state values": STATE_TURNS,
        "thread values": THREAD_TURNS,
    }
    with twin_servers(scripts) as pair:
        yield pair


def chat_model(server: ScriptedOpenAIServer) -> ChatOpenAI:
    return ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="test", stream_usage=True)


def run_langchain(server: ScriptedOpenAIServer, prompt: str, mode: Any) -> list[Any]:
    agent = lc_create_agent(chat_model(server), tools=[tooling.add], system_prompt=SYSTEM_PROMPT)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return list(
            agent.stream({"messages": [{"role": "user", "content": prompt}]}, stream_mode=mode)
        )


def message_shape(message: BaseMessage) -> dict[str, Any]:
    """What both sides must agree on (ids are random on both)."""
    shape: dict[str, Any] = {"type": message.type, "content": message.content}
    for key in ("tool_call_chunks", "usage_metadata", "chunk_position", "tool_call_id", "name"):
        value = getattr(message, key, None)
        if value:
            shape[key] = value
    calls = getattr(message, "tool_calls", None)
    if calls:
        shape["tool_calls"] = [(c["name"], c["args"], c["id"]) for c in calls]
    if message.type == "AIMessageChunk":
        shape["response_metadata"] = message.response_metadata
    return shape


NAMESPACE = re.compile(r"^(model|tools|\w+\.\w+):[0-9a-f-]{36}$")  # a hook node: NAME.hook


def metadata_shape(meta: dict[str, Any]) -> dict[str, Any]:
    """The metadata with its checkpoint namespaces checked for form (random uuids)."""
    out = dict(meta)
    for key in ("langgraph_checkpoint_ns", "checkpoint_ns"):
        if key in out:
            assert NAMESPACE.match(out[key]), out[key]
            out[key] = out[key].split(":")[0]
    return out


def shape(mode: str, data: Any) -> Any:
    if mode == "messages":
        message, meta = data
        return (message_shape(message), list(meta), metadata_shape(meta))
    if mode == "updates":
        return {
            node: {"messages": [message_shape(m) for m in update["messages"]]}
            for node, update in data.items()
        }
    return {"messages": [message_shape(m) for m in data["messages"]]}


def shapes(mode: Any, items: list[Any]) -> list[Any]:
    if isinstance(mode, list):
        return [(m, shape(m, data)) for m, data in items]
    return [shape(mode, item) for item in items]


async def collect(agent: Agent, prompt: str, mode: Any) -> list[Any]:
    inputs = {"messages": [{"role": "user", "content": prompt}]}
    return [item async for item in agent.astream(inputs, stream_mode=mode)]


def check_same(mode: Any, lc_items: list[Any], ll_items: list[Any]) -> None:
    expected, got = shapes(mode, lc_items), shapes(mode, ll_items)
    assert len(got) == len(expected), (len(got), len(expected))
    for n, (a, b) in enumerate(zip(expected, got, strict=True)):
        assert b == a, f"item {n} differs"
    if mode == "messages":  # it really streamed: the answer came in many pieces
        answer_chunks = [m for m, meta in ll_items if meta["langgraph_step"] == 3]
        assert len(answer_chunks) > 5
        assert any(m.usage_metadata for m in answer_chunks)


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_deployed_stream_modes_match_langchain(
    mode: Any, stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    lc_server, _ = servers
    prompt = f"stream deployed {mode}"
    lc_items = await asyncio.to_thread(run_langchain, lc_server, prompt, mode)
    settings = Settings(redis_url=stack.redis_url, prefix=stack.prefix)
    agent = create_agent(
        "gpt-4o-mini", ["tests.tooling:add"], system_prompt=SYSTEM_PROMPT, settings=settings
    )
    check_same(mode, lc_items, await collect(agent, prompt, mode))


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_embedded_stream_modes_match_langchain(
    mode: Any,
    embedded: None,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
) -> None:
    """Embedded: every service in this process (on the test Redis, not its own server),
    the chat model an in-process object."""
    lc_server, ll_server = servers
    prompt = f"stream embedded {mode}"
    lc_items = await asyncio.to_thread(run_langchain, lc_server, prompt, mode)
    agent = create_agent(
        chat_model(ll_server),
        [tooling.add],
        system_prompt=SYSTEM_PROMPT,
        settings=Settings(prefix=EMBEDDED_PREFIX),
    )
    check_same(mode, lc_items, await collect(agent, prompt, mode))


def state_input(prompt: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": prompt}], "note": "given", "trail": ["in"]}


def run_langchain_state(server: ScriptedOpenAIServer, prompt: str) -> list[Any]:
    agent = lc_create_agent(chat_model(server), tools=[step_on], **state_kwargs())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return list(agent.stream(state_input(prompt), stream_mode="values"))


def values_shape(chunk: dict[str, Any]) -> dict[str, Any]:
    """A values chunk: its messages by shape, every other key as it is."""
    return {k: shape("values", chunk) if k == "messages" else v for k, v in chunk.items()}


async def check_state_values(agent: Agent, server: ScriptedOpenAIServer, prompt: str) -> None:
    lc_items = await asyncio.to_thread(run_langchain_state, server, prompt)
    ll_items = [item async for item in agent.astream(state_input(prompt), stream_mode="values")]
    expected, got = [values_shape(c) for c in lc_items], [values_shape(c) for c in ll_items]
    assert len(got) == len(expected), (len(got), len(expected))
    for n, (a, b) in enumerate(zip(expected, got, strict=True)):
        assert b == a, f"chunk {n} differs"
    # what the chunks claim to show: the todos, both keys, the answer at the end
    last = ll_items[-1]
    assert last["trail"] == ["in", "a", "b", "c"] and last["note"] == "given"
    assert last["todos"] == [{"content": "walk", "status": "pending"}]
    assert last["structured_response"] == Weather(city="Oslo", celsius=4)
    assert "structured_response" not in ll_items[0] and ll_items[0]["trail"] == ["in"]


async def test_deployed_values_carry_the_whole_state_as_langchain(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    settings = Settings(redis_url=stack.redis_url, prefix=stack.prefix)
    agent = create_agent(
        "gpt-4o-mini", ["tests.runtime_tools:step_on"], settings=settings, **state_kwargs()
    )
    await check_state_values(agent, servers[0], "state values deployed")


async def test_embedded_values_carry_the_whole_state_as_langchain(
    embedded: None,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
) -> None:
    agent = create_agent(
        chat_model(servers[1]),
        [step_on],
        settings=Settings(prefix=EMBEDDED_PREFIX),
        **state_kwargs(),
    )
    await check_state_values(agent, servers[0], "state values embedded")


def test_sync_stream_yields_what_astream_does(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    settings = Settings(redis_url=stack.redis_url, prefix=stack.prefix)
    agent = create_agent(
        "gpt-4o-mini", ["tests.tooling:add"], system_prompt=SYSTEM_PROMPT, settings=settings
    )
    items = list(agent.stream({"messages": "stream sync"}, stream_mode="updates"))
    assert [list(item) for item in items] == [["model"], ["tools"], ["model"]]
    with pytest.raises(ValueError, match="stream_mode must be"):
        list(agent.stream({"messages": "stream sync"}, stream_mode="tokens"))


async def long_streamed_task(stack: ServiceProcesses, client: Client) -> str:
    spec = create_agent(
        "gpt-4o-mini", settings=Settings(redis_url=stack.redis_url, prefix=stack.prefix)
    ).spec
    task_id = new_task_id()
    await client.stream_replies(task_id)
    await client.submit(spec, [HumanMessage(content="long answer")], task_id=task_id)
    await client.wait(task_id)
    return task_id


async def test_a_reader_resumes_from_an_offset_without_loss(stack: ServiceProcesses) -> None:
    async with Client(stack.redis_url, stack.prefix) as client:
        task_id = await long_streamed_task(stack, client)
        whole = [item async for item in client.chunks(task_id, follow=False)]
        assert len(whole) >= 2, "batched, yet more than one batch for 250 pieces"
        assert whole[-1][1].end == "done" and whole[0][1].attempt == 1
        pieces = sum(len(b.chunks) for _, b in whole)
        assert len(whole) < pieces / 2, "chunks arriving together share an entry"
        # an entry that is not a batch (a foreign writer) is passed over, not fatal
        key = client.names.task_chunks(task_id)
        foreign = await client.redis.xadd(key, {"__data__": b"{oops"})
        assert [item async for item in client.chunks(task_id, follow=False)] == whole
        await client.redis.xdel(key, foreign)
        # a reader that stopped after each entry and came back from its last offset
        resumed: list[tuple[str, ChunkBatch]] = []
        offset = "0"
        while True:
            page = [item async for item in client.chunks(task_id, after=offset, follow=False)]
            if not page:
                break
            resumed.append(page[0])
            offset = page[0][0]
        assert resumed == whole
        text = "".join(str(c.get("content", "")) for _, b in whole for c in b.chunks)
        assert text == LONG
        answer = (await client.messages(task_id))[-1]
        assert answer.text() == LONG and answer.usage_metadata  # type: ignore[union-attr]
        ttl = await client.redis.ttl(client.names.task_chunks(task_id))
        assert 0 < ttl <= Settings().stream_ttl_s


async def test_the_log_does_not_grow_with_the_chunks(stack: ServiceProcesses) -> None:
    """The same long answer, streamed and not: the durable log holds the same events of
    the same size; only the expiring chunk stream has the pieces."""
    async with Client(stack.redis_url, stack.prefix) as client:
        streamed = await long_streamed_task(stack, client)
        spec = create_agent(
            "gpt-4o-mini", settings=Settings(redis_url=stack.redis_url, prefix=stack.prefix)
        ).spec
        plain = await client.submit(spec, [HumanMessage(content="long answer")])
        await client.wait(plain)
        logs = {t: await client.redis.xrange(client.names.task_log(t)) for t in (streamed, plain)}
        assert len(logs[streamed]) == len(logs[plain])
        sizes = [sum(len(v) for _, f in logs[t] for v in f.values()) for t in (streamed, plain)]
        # no larger than the log of the same reply not streamed (whose metadata differs
        # a little: a completion's token_usage, id), though 250 chunks were streamed
        assert sizes[0] <= sizes[1]
        batches = [b async for _, b in client.chunks(streamed, follow=False)]
        assert sum(len(b.chunks) for b in batches) >= 250
        assert not await client.redis.exists(client.names.task_chunks(plain))


async def test_a_retried_call_says_its_chunks_replace_the_failed_attempts(redis_url: str) -> None:
    """ModelRetryMiddleware calls the model again after a failure: the retry is attempt 2,
    its first batch resets, attempt 1 ended as failed, and ``messages`` items say so."""
    failed: set[str] = set()

    def respond(body: dict[str, Any]) -> Reply:
        text = first_user_text(body)
        if text not in failed:  # each conversation's first call fails
            failed.add(text)
            raise RuntimeError("transient")
        return Reply(content="recovered after a retry")

    retry = {"type": "ModelRetryMiddleware", "max_retries": 1, "initial_delay": 0.01}
    with (
        ScriptedOpenAIServer(responder=respond) as server,
        services_on(redis_url, server) as procs,
    ):
        settings = Settings(redis_url=procs.redis_url, prefix=procs.prefix)
        agent = create_agent(
            {"name": "gpt-4o-mini", "params": {"max_retries": 0}},  # no retry in the client
            middleware=[{**retry, "jitter": False}],
            settings=settings,
        )
        items = [i async for i in agent.astream({"messages": "retry me"}, stream_mode="messages")]
        assert "".join(str(m.content) for m, _ in items) == "recovered after a retry"
        assert all(meta["loopline_attempt"] == 2 for _, meta in items)
        assert [bool(meta.get("loopline_reset")) for _, meta in items][:2] == [True, False]

        async with Client(procs.redis_url, procs.prefix) as client:
            task_id = new_task_id()
            await client.stream_replies(task_id)
            await client.submit(agent.spec, [HumanMessage(content="retry raw")], task_id=task_id)
            await client.wait(task_id)
            batches = [b async for _, b in client.chunks(task_id, follow=False)]
        first, *rest = batches
        assert (first.attempt, first.end, first.chunks) == (1, "failed", [])
        assert rest[0].attempt == 2 and rest[0].reset and rest[-1].end == "done"
        assert all(b.attempt == 2 and not b.reset for b in rest[1:])


async def test_model_services_know_the_streamed_tasks_without_a_command_per_step(
    redis_url: str,
) -> None:
    """A request made before a model service listens is loaded when it subscribes, one
    made after is heard on pub/sub; then a task nobody asked for costs no command."""
    rt = Runtime(redis_url, Settings(prefix=unique_prefix()))
    requests = StreamRequests(rt)
    async with Client(redis_url, rt.names.prefix) as client:
        await client.stream_replies("early")
        assert await requests.wanted("early")  # not listening yet: Redis was asked
        requests.start()
        try:
            await wait_for(lambda: requests.listening)
            assert "early" in requests.asked
            await client.stream_replies("late")
            await wait_for(lambda: "late" in requests.asked)

            async def no_command(*args: Any) -> Any:
                raise AssertionError(f"a command on the hot path: {args}")

            rt.connection.command = no_command  # type: ignore[method-assign]
            assert await requests.wanted("late") and await requests.wanted("early")
            assert not await requests.wanted("never asked")
        finally:
            await requests.stop()
            await rt.close()


async def test_a_reply_nobody_asked_to_stream_comes_whole_in_messages_mode(
    stack: ServiceProcesses,
) -> None:
    """A client that starts reading a task it did not ask to stream (or whose chunk
    stream expired) still gets every message, each reply as one chunk."""
    spec = create_agent(
        "gpt-4o-mini",
        ["tests.tooling:add"],
        settings=Settings(redis_url=stack.redis_url, prefix=stack.prefix),
    ).spec
    async with Client(stack.redis_url, stack.prefix) as client:
        task_id = await client.submit(spec, [HumanMessage(content="stream unasked")])
        await client.wait(task_id)
        assert not await client.redis.exists(client.names.task_chunks(task_id))
        inputs = [LcHumanMessage(content="stream unasked")]
        items = [i async for i in stream_task(client, task_id, ["messages"], inputs)]
    got = [(m.type, m.content, meta["langgraph_node"]) for _, (m, meta) in items]
    assert got == [
        ("AIMessageChunk", TURNS[0].content, "model"),
        ("tool", "3", "tools"),
        ("AIMessageChunk", TURNS[1].content, "model"),
    ]
    assert items[0][1][0].tool_calls[0]["args"] == {"a": 1, "b": 2}


# -- astream_events(version="v2") ---------------------------------------------------------

EVENT_METADATA = ("ls_integration", "langgraph_step", "langgraph_node", "langgraph_triggers")


def event_data(value: Any) -> Any:
    """An event's data as both sides must agree on it (messages by their shape, LangGraph
    ``Command``s by their update)."""
    if isinstance(value, BaseMessage):
        return message_shape(value)
    if isinstance(value, Command):
        return {"Command": event_data(value.update)}
    if isinstance(value, dict):
        return {k: event_data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [event_data(v) for v in value]
    return value


def event_shape(event: dict[str, Any]) -> Any:
    meta = metadata_shape(event["metadata"])
    return (
        event["event"],
        event["name"],
        event_data(event["data"]),
        event["tags"],
        len(event["parent_ids"]),
        meta,
    )


def run_langchain_events(
    server: ScriptedOpenAIServer, prompt: str, middleware: Sequence[Any] = ()
) -> list[dict[str, Any]]:
    inputs: Any = {"messages": [{"role": "user", "content": prompt}]}

    async def collect() -> list[dict[str, Any]]:
        # an HTTP client of this event loop: langchain-openai shares its default async
        # client between instances, which would outlive the loop of a previous asyncio.run
        async with httpx.AsyncClient() as http:
            model = ChatOpenAI(
                model="gpt-4o-mini",
                base_url=server.url,
                api_key="test",
                stream_usage=True,
                http_async_client=http,
            )
            agent = lc_create_agent(
                model, tools=[tooling.add], system_prompt=SYSTEM_PROMPT, middleware=middleware
            )
            return [e async for e in agent.astream_events(inputs, version="v2")]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return asyncio.run(collect())


def check_same_events(lc_events: list[dict[str, Any]], ll_events: list[dict[str, Any]]) -> None:
    expected = [event_shape(e) for e in lc_events]
    got = [event_shape(e) for e in ll_events]
    assert [e[:2] for e in got] == [e[:2] for e in expected]
    for n, (a, b) in enumerate(zip(expected, got, strict=True)):
        assert b == a, f"event {n} ({a[0]} {a[1]}) differs"
    # the nesting: every event's parents are runs that started before it
    started: set[str] = set()
    for event in ll_events:
        assert set(event["parent_ids"]) <= started, event["event"]
        started.add(event["run_id"])
    streamed = [e for e in ll_events if e["event"] == "on_chat_model_stream"]
    assert len(streamed) > 5, "the answer came in many pieces"


async def test_deployed_astream_events_match_langchain(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    lc_server, _ = servers
    prompt = "events deployed"
    lc_events = await asyncio.to_thread(run_langchain_events, lc_server, prompt)
    settings = Settings(redis_url=stack.redis_url, prefix=stack.prefix)
    agent = create_agent(
        "gpt-4o-mini", ["tests.tooling:add"], system_prompt=SYSTEM_PROMPT, settings=settings
    )
    inputs = {"messages": [{"role": "user", "content": prompt}]}
    check_same_events(lc_events, [e async for e in agent.astream_events(inputs, version="v2")])
    with pytest.raises(ValueError, match="version='v2'"):
        await anext(agent.astream_events(inputs, version="v1"))


async def test_embedded_astream_events_match_langchain(
    embedded: None,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
) -> None:
    lc_server, ll_server = servers
    prompt = "events embedded"
    lc_events = await asyncio.to_thread(run_langchain_events, lc_server, prompt)
    agent = create_agent(
        chat_model(ll_server),
        [tooling.add],
        system_prompt=SYSTEM_PROMPT,
        settings=Settings(prefix=EMBEDDED_PREFIX),
    )
    inputs = {"messages": [{"role": "user", "content": prompt}]}
    check_same_events(lc_events, [e async for e in agent.astream_events(inputs, version="v2")])


async def test_hook_nodes_have_their_events_as_langchain(
    embedded: None,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
) -> None:
    """A middleware with every node hook (one returning a state update): each node's
    ``on_chain_start`` with the state it read, ``on_chain_stream`` and ``on_chain_end``
    with its update, at its superstep; a reply's tools start after its after_model node."""
    lc_server, ll_server = servers
    prompt = "stream events of hooks"  # the script "stream": a tool call, then the answer
    key = f"events-hooks-{uuid.uuid4().hex[:8]}"
    lc_events = await asyncio.to_thread(
        run_langchain_events, lc_server, prompt, [Recorder("A", key)]
    )
    agent = create_agent(
        chat_model(ll_server),
        [tooling.add],
        system_prompt=SYSTEM_PROMPT,
        middleware=[Recorder("A", key)],
        settings=Settings(prefix=EMBEDDED_PREFIX),
    )
    inputs = {"messages": [{"role": "user", "content": prompt}]}
    ll_events = [e async for e in agent.astream_events(inputs, version="v2")]
    check_same_events(lc_events, ll_events)
    started = [e["name"] for e in ll_events if e["event"] == "on_chain_start"]
    assert started[:3] == ["LangGraph", "A.before_agent", "A.before_model"]
    assert started.index("A.after_model") < started.index("tools") < started.index("A.after_agent")


@pytest.mark.fast
async def test_a_chunk_after_a_quiet_window_goes_out_at_once_and_a_burst_waits(
    redis_url: str,
) -> None:
    """One chunk-stream entry per LOOPLINE_STREAM_BATCH_MS at most, cut on the leading
    edge: the first chunk of a quiet spell is written at once (no delay between tokens
    of a model slower than the window), a burst after it waits for the window's end."""
    settings = Settings(prefix=unique_prefix(), stream_batch_ms=200)
    rt = Runtime(redis_url, settings)
    done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    done.set_result(1)
    publisher = ChunkPublisher(
        rt.connection, rt.names, settings, task_id="t", step=1, attempt=done, model={}
    )
    key = rt.names.task_chunks("t")

    async def entries() -> list[list[str]]:
        found: Any = await rt.redis.xrange(key)
        batches = [ChunkBatch.model_validate_json(f[DATA_FIELD.encode()]) for _, f in found]
        return [[c["content"] for c in batch.chunks] for batch in batches]

    try:
        publisher.add(AIMessageChunk(content="a"))
        await asyncio.sleep(0.05)
        assert await entries() == [["a"]]  # the first text: at once
        for piece in "bcd":
            publisher.add(AIMessageChunk(content=piece))
        await asyncio.sleep(0.05)
        assert await entries() == [["a"]]  # the burst waits for the window
        await asyncio.sleep(0.25)
        assert await entries() == [["a"], ["b", "c", "d"]]
        await asyncio.sleep(0.25)  # a quiet window: the next chunk goes at once
        publisher.add(AIMessageChunk(content="e"))
        await asyncio.sleep(0.05)
        assert await entries() == [["a"], ["b", "c", "d"], ["e"]]
        await publisher.close("done")
    finally:
        await rt.redis.delete(key, rt.names.task_streaming("t"))
        await rt.close()


@pytest.mark.fast
async def test_chunk_batches_renew_the_time_to_live_first_last_and_when_due(
    redis_url: str,
) -> None:
    """The chunk stream and the streaming request live ``LOOPLINE_STREAM_TTL_S`` from
    their last renewal: the first batch renews them, the last one, and a batch written a
    quarter of that time after the last renewal; the batches between add no command."""
    settings = Settings(prefix=unique_prefix(), stream_batch_ms=0, stream_ttl_s=100)
    rt = Runtime(redis_url, settings)
    done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    done.set_result(1)
    publisher = ChunkPublisher(
        rt.connection, rt.names, settings, task_id="t", step=1, attempt=done, model={}
    )
    keys = (rt.names.task_chunks("t"), rt.names.task_streaming("t"))
    await rt.redis.hset(keys[1], "asked", "1")

    async def write(piece: str) -> list[int]:
        publisher.add(AIMessageChunk(content=piece))
        await publisher.cut()
        return [int(await rt.redis.ttl(key)) for key in keys]

    async def shorten() -> None:
        for key in keys:
            await rt.redis.expire(key, 50)

    try:
        assert all(90 < ttl <= 100 for ttl in await write("a"))  # the first batch
        await shorten()
        assert all(40 < ttl <= 50 for ttl in await write("b"))  # one between: as it was
        publisher.renew_every_s = 0.2
        await asyncio.sleep(0.25)
        assert all(90 < ttl <= 100 for ttl in await write("c"))  # due again
        await shorten()
        await publisher.close("done")
        ttls = [int(await rt.redis.ttl(key)) for key in keys]
        assert all(90 < ttl <= 100 for ttl in ttls)  # the last
        found: Any = await rt.redis.xrange(keys[0])
        assert len(found) == 4  # every batch written, the end's included
    finally:
        await rt.redis.delete(*keys)
        await rt.close()


def stream_second_run(agent: Any, prompt: str, modes: list[str]) -> list[Any]:
    """The first run of a thread, then the second one streamed (``stream``, sync)."""
    config = {"configurable": {"thread_id": f"thread-{prompt}"}}
    first = {"messages": [{"role": "user", "content": prompt}]}
    second = {"messages": [{"role": "user", "content": "now add"}]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent.invoke(first, config)
        return list(agent.stream(second, config, stream_mode=modes))


def thread_shapes(items: list[Any]) -> list[Any]:
    return [(mode, thread_item_shape(mode, data)) for mode, data in items]


def thread_item_shape(mode: str, data: Any) -> Any:
    if mode == "values":
        return values_shape(data)
    if mode == "messages":
        return shape(mode, data)
    return {node: _update_shape(update) for node, update in data.items()}


def _update_shape(update: dict[str, Any] | None) -> dict[str, Any] | None:
    if update is None:
        return None
    return {k: [message_shape(m) for m in v] if k == "messages" else v for k, v in update.items()}


@pytest.mark.parametrize("where", ["deployed", "embedded"])
async def test_a_threads_next_run_streams_the_threads_state_as_langchain(
    where: str,
    request: pytest.FixtureRequest,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
) -> None:
    """LangGraph streams a thread's run from its checkpoint: the first ``values`` holds
    the earlier runs' messages and the todo list they left, then the new input;
    TodoListMiddleware's after_model node is a superstep after every model call, and
    ``langgraph_step`` goes on from the thread's earlier run."""
    lc_server, ll_server = servers
    modes = ["values", "updates", "messages"]  # messages: langgraph_step counts its node
    prompt = f"thread values {where}"
    kwargs: dict[str, Any] = {"middleware": [TodoListMiddleware()]}
    # each its own saver: one saver shared by the two would be one thread, as in LangGraph
    theirs = lc_create_agent(
        chat_model(lc_server), tools=[tooling.add], checkpointer=InMemorySaver(), **kwargs
    )
    kwargs["checkpointer"] = InMemorySaver()
    expected = await asyncio.to_thread(stream_second_run, theirs, prompt, modes)
    if where == "deployed":
        stack = request.getfixturevalue("stack")
        settings = Settings(redis_url=stack.redis_url, prefix=stack.prefix)
        ours = create_agent("gpt-4o-mini", ["tests.tooling:add"], settings=settings, **kwargs)
    else:
        request.getfixturevalue("embedded")
        settings = Settings(prefix=EMBEDDED_PREFIX)
        ours = create_agent(chat_model(ll_server), [tooling.add], settings=settings, **kwargs)
    got = await asyncio.to_thread(stream_second_run, ours, prompt, modes)
    assert thread_shapes(got) == thread_shapes(expected)
    first_values = got[0][1]
    assert [m.type for m in first_values["messages"]] == ["human", "ai", "tool", "ai", "human"]
    assert first_values["todos"] == [{"content": "sum", "status": "pending"}]

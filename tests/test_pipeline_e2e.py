"""The pipeline end to end: each of the five services as its own OS process, real Redis,
real ChatOpenAI over HTTP to the scripted server."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis as syncredis

from contracts import (
    AIMessage,
    HumanMessage,
    ModelRequested,
    ModelResponded,
    TaskCompleted,
    TaskFailed,
    ToolMessage,
    parse_event,
)
from contracts.streams import DATA_FIELD, Names
from loopline.agentfile import agent_from_dict
from loopline.client import Client, TaskFailedError
from loopline.testing.scripted import (
    Reply,
    ScriptedOpenAIServer,
    ScriptedToolCall,
)
from tests.support import ServiceProcesses, unique_prefix, wait_until_acked

TOOLS = ["tests.tooling:add", "tests.tooling:fail_always", "tests.tooling:slow_echo"]


def parallel_turns(record: str) -> list[Reply]:
    return [
        Reply(
            tool_calls=(
                ScriptedToolCall("add", {"a": 2, "b": 3}),
                ScriptedToolCall("add", {"a": "two", "b": 3}),  # invalid: answered
                ScriptedToolCall("slow_echo", {"text": "left", "seconds": 0.6, "record": record}),
                ScriptedToolCall("slow_echo", {"text": "right", "seconds": 0.6, "record": record}),
                ScriptedToolCall("not_a_tool", {}),
            )
        ),
        Reply(content="2 + 3 = 5, and the failing tool failed."),
    ]


FAILING = [
    Reply(
        tool_calls=(
            ScriptedToolCall("add", {"a": 2, "b": 3}),
            ScriptedToolCall("fail_always", {"reason": "no network"}),
        )
    ),
    Reply(content="never asked"),
]


LOOPING = [Reply(tool_calls=(ScriptedToolCall("add", {"a": 1, "b": 1}),))] * 50


def growing_turns(steps: int) -> list[Reply]:
    turns = [Reply(tool_calls=(ScriptedToolCall("big_output", {"n": 2000}),))] * (steps - 1)
    return [*turns, Reply(content="grown")]


RECORD = f"/tmp/loopline-slow-echo-{uuid.uuid4().hex[:8]}.jsonl"
SCRIPTS = {
    "parallel": parallel_turns(RECORD),
    "failing": FAILING,
    "looping": LOOPING,
    "grow": growing_turns(30),
}


@pytest.fixture(scope="module")
def stack(redis_url: str, scripted: ScriptedOpenAIServer) -> Iterator[ServiceProcesses]:
    prefix = unique_prefix()
    env = {"OPENAI_BASE_URL": scripted.url, "OPENAI_API_KEY": "test", "LOOPLINE_MAX_STEPS": "5"}
    with ServiceProcesses(redis_url, prefix, env=env) as procs:
        yield procs


def spec(tools: list[str] = TOOLS, **extra: Any) -> Any:
    return agent_from_dict({"model": "gpt-4o-mini", "tools": tools, **extra})[0]


def requests_for(server: ScriptedOpenAIServer, prompt: str) -> list[dict[str, Any]]:
    return [r for r in server.chat_requests() if r["messages"][0]["content"].startswith(prompt)]


async def test_parallel_tool_calls_with_an_error(
    stack: ServiceProcesses, scripted: ScriptedOpenAIServer
) -> None:
    prompt = f"parallel {uuid.uuid4().hex}"
    async with Client(stack.redis_url, stack.prefix) as client:
        task_id = await client.submit(spec(), [HumanMessage(content=prompt)])
        done = await client.wait(task_id)
        messages = await client.messages(task_id)
        log = [event async for _, event in client.events(task_id, follow=False)]

    assert done.answer == "2 + 3 = 5, and the failing tool failed."
    assert [m.type for m in messages] == [
        "human",
        "ai",
        "tool",
        "tool",
        "tool",
        "tool",
        "tool",
        "ai",
    ]
    ai = messages[1]
    assert isinstance(ai, AIMessage)
    results = messages[2:7]
    # results enter the transcript in call order, whatever order they finished in
    assert [r.tool_call_id for r in results if isinstance(r, ToolMessage)] == [
        c.id for c in ai.tool_calls
    ]
    by_name = {
        (c.name, str(c.args.get("a"))): r for c, r in zip(ai.tool_calls, results, strict=True)
    }
    assert by_name["add", "2"].content == "5"
    invalid = by_name["add", "two"]
    assert isinstance(invalid, ToolMessage) and invalid.status == "error"
    assert invalid.content == (  # LangChain's ToolInvocationError message
        "Error invoking tool 'add' with kwargs {'a': 'two', 'b': 3} with error:\n"
        " a: Input should be a valid integer, unable to parse string as an integer\n"
        " Please fix the error and try again."
    )
    refused = by_name["not_a_tool", "None"]
    assert isinstance(refused, ToolMessage) and refused.status == "error"
    assert "not_a_tool is not a valid tool" in str(refused.content)

    # the two slow calls ran at the same time, not one after the other
    runs = [json.loads(line) for line in Path(RECORD).read_text().splitlines()]
    assert {r["text"] for r in runs} == {"left", "right"}
    first, second = sorted(runs, key=lambda r: r["start"])
    assert second["start"] < first["end"]

    # what the model saw, request by request
    requests = requests_for(scripted, prompt)
    assert len(requests) == 2
    for request in requests:
        assert [t["function"]["name"] for t in request["tools"]] == [
            "add",
            "fail_always",
            "slow_echo",
        ]
    second_request = requests[1]["messages"]
    assert [m["role"] for m in second_request] == ["user", "assistant"] + ["tool"] * 5
    assert [m["tool_call_id"] for m in second_request[2:]] == [c.id for c in ai.tool_calls]
    assert second_request[2]["content"] == "5"

    # the task's log: ordered, complete, no duplicates
    kinds = [e.type for e in log]
    assert kinds[0] == "TaskSubmitted"
    assert kinds[-1] == "TaskCompleted"
    assert kinds.count("StepStarted") == 2
    assert kinds.count("ToolCompleted") == 5
    assert kinds.count("ModelResponded") == 2


async def test_a_tool_that_raises_fails_the_task_with_its_exception(
    stack: ServiceProcesses, scripted: ScriptedOpenAIServer
) -> None:
    """As LangChain's agent lets the exception propagate: the step's other call still
    reports, the model is not asked again, the task's failure names the exception."""
    prompt = f"failing {uuid.uuid4().hex}"
    async with Client(stack.redis_url, stack.prefix) as client:
        task_id = await client.submit(spec(), [HumanMessage(content=prompt)])
        with pytest.raises(TaskFailedError) as failed:
            await client.wait(task_id)
        await asyncio.sleep(0.3)  # the other call's result, if it comes late, changes nothing
        log = [event async for _, event in client.events(task_id, follow=False)]
    event = failed.value.event
    assert event.exception is not None
    assert event.exception.type == "builtins:RuntimeError"
    assert event.exception.message == "cannot do it: no network"
    assert event.reason == (
        "tool 'fail_always' failed at step 1: RuntimeError: cannot do it: no network"
    )
    assert [e.type for e in log].count("TaskFailed") == 1
    assert len(requests_for(scripted, prompt)) == 1
    # each reply says how long its model call took in the model service: an HTTP round
    # trip to the scripted server, so more than nothing and less than the whole task
    durations = [e.model_ms for e in log if isinstance(e, ModelResponded)]
    assert all(d is not None and 0 < d < (log[-1].at - log[0].at) * 1000 for d in durations)


async def test_step_limit_fails_the_task_with_a_reason(stack: ServiceProcesses) -> None:
    async with Client(stack.redis_url, stack.prefix) as client:
        task_id = await client.submit(
            spec(), [HumanMessage(content=f"looping {uuid.uuid4().hex}")], max_steps=3
        )
        log = [event async for _, event in client.events(task_id)]
    failed = log[-1]
    assert isinstance(failed, TaskFailed)
    assert failed.step == 3
    assert "step limit reached" in failed.reason and "max_steps=3" in failed.reason
    assert sum(1 for e in log if e.type == "ModelResponded") == 3


async def test_event_size_stays_flat_as_the_conversation_grows(
    stack: ServiceProcesses, redis_url: str
) -> None:
    async with Client(stack.redis_url, stack.prefix) as client:
        task_id = await client.submit(
            spec(["tests.tooling:big_output"]),
            [HumanMessage(content=f"grow {uuid.uuid4().hex}")],
            max_steps=40,
        )
        done = await client.wait(task_id)
    assert done.steps == 30

    names = Names(stack.prefix)
    r = syncredis.Redis.from_url(redis_url)
    sizes: dict[str, dict[int, int]] = {}
    # ModelResponded and ToolCompleted of a hook-free agent skip the loop stream (the model
    # and tools services apply the loop's transition): the task's log records them.
    for stream in (names.context, names.model, names.tools, names.loop, names.task_log(task_id)):
        for _, fields in r.xrange(stream):
            raw = fields[DATA_FIELD.encode()]
            event = parse_event(raw)
            if event.task_id != task_id:
                continue
            step = getattr(event, "step", 0)
            sizes.setdefault(event.type, {})[step] = len(raw)
    r.close()
    # (no ContextRequested: an agent without context editing skips that stage)
    assert "ContextRequested" not in sizes
    for kind in ("ModelRequested", "ModelResponded", "ToolRequested", "ToolCompleted"):
        assert 1 in sizes[kind] and 29 in sizes[kind], kind
        # a step's event differs from step 1's only by its numbers and ids, not by history
        # (the digits of steps, lengths, timestamps, token counts and ids: a few bytes each)
        assert sizes[kind][29] - sizes[kind][1] <= 32, (kind, sizes[kind][1], sizes[kind][29])
    transcript_bytes = sum(
        len(m)
        for m in syncredis.Redis.from_url(redis_url).lrange(names.task_messages(task_id), 0, -1)
    )
    assert transcript_bytes > 29 * 2000  # the history did grow; the events did not


BAD_ENTRIES: list[dict[str, bytes | str]] = [
    {DATA_FIELD: b"\xff\xfe not json"},
    {DATA_FIELD: "[1, 2, 3]"},
    {DATA_FIELD: json.dumps({"type": "NoSuchEvent", "task_id": "x"})},
    {DATA_FIELD: json.dumps({"type": "ContextRequested", "task_id": "x"})},
    {"some_field": "no data field at all"},
]


async def test_bad_input_goes_to_the_dead_letter_stream_and_services_keep_running(
    stack: ServiceProcesses, redis_url: str
) -> None:
    names = Names(stack.prefix)
    r = syncredis.Redis.from_url(redis_url)
    before = r.xlen(names.dlq)
    streams = [names.tasks, names.loop, names.context, names.model, names.tools, names.todo_calls]
    for stream in streams:
        for fields in BAD_ENTRIES:
            r.xadd(stream, fields)  # type: ignore[arg-type]
    expected = len(streams) * len(BAD_ENTRIES)

    async with Client(stack.redis_url, stack.prefix) as client:
        task_id = await client.submit(
            spec(), [HumanMessage(content=f"parallel {uuid.uuid4().hex}")]
        )
        done = await client.wait(task_id)
    assert isinstance(done, TaskCompleted)
    for name in ("loop", "context", "model", "tools", "todos"):
        assert stack.alive(name), stack.output(name)

    import time

    deadline = time.monotonic() + 10
    while r.xlen(names.dlq) - before < expected and time.monotonic() < deadline:
        time.sleep(0.1)
    letters = [parse_event(f[DATA_FIELD.encode()]) for _, f in r.xrange(names.dlq)][before:]
    assert len(letters) == expected
    assert {getattr(d, "stream", "") for d in letters} == set(streams)
    reasons = " ".join(getattr(d, "error", "") for d in letters)
    assert "ValidationError" in reasons or "BadEvent" in reasons
    assert all(getattr(d, "error", "") for d in letters)
    # every bad entry was acknowledged: nothing left pending in any group
    wait_until_acked(r, names, ("loop", "context", "model", "tools", "todos"))
    r.close()


async def test_model_requested_carries_ranges_not_history() -> None:
    # Contract-level guard for the flat-size property: the event has no message payload.
    fields = set(ModelRequested.model_fields)
    assert "messages" not in fields and "transcript_len" in fields

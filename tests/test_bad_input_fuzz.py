"""Every event contract fuzzed through the real consumers: no consumer crashes, every bad
event lands in the dead-letter stream with its reason, nothing stays pending. Also the
dead-letter round trip: list, replay after a fix, drop."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis as syncredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contracts import AgentSpec, HumanMessage
from contracts.streams import DATA_FIELD, Names
from loopline.client import Client, TaskFailedError
from loopline.testing.scripted import (
    Reply,
    ScriptedOpenAIServer,
    ScriptedToolCall,
)
from tests.support import (
    REPO_ROOT,
    ServiceProcesses,
    run_cli,
    unique_prefix,
    wait_for,
    wait_until_acked,
)

FIX_DIR = Path(f"/tmp/loopline-fix-{uuid.uuid4().hex[:8]}")
FIX_MODULE = f"fixme_{uuid.uuid4().hex[:8]}"

SCRIPTS = {
    "fixable": [
        Reply(tool_calls=(ScriptedToolCall("repaired", {"x": 2}),)),
        Reply(content="repaired works"),
    ]
}


@pytest.fixture(scope="module")
def stack(redis_url: str, scripted: ScriptedOpenAIServer) -> Iterator[ServiceProcesses]:
    FIX_DIR.mkdir(exist_ok=True)
    env = {
        "OPENAI_BASE_URL": scripted.url,
        "OPENAI_API_KEY": "test",
        "PYTHONPATH": f"{REPO_ROOT}:{FIX_DIR}",
        "LOOPLINE_ALLOWED_MODULES": f"tests,{FIX_MODULE}",  # the operator's, deployed late
    }
    with ServiceProcesses(redis_url, unique_prefix(), env=env) as procs:
        yield procs


# -- strategies: events that are almost right, and plain junk --------------------------

VALID: dict[str, dict[str, Any]] = {
    "TaskSubmitted": {
        "type": "TaskSubmitted",
        "task_id": "t",
        "agent": {"model": "m"},
        "messages": [{"type": "human", "content": "hi"}],
    },
    "CancelRequested": {"type": "CancelRequested", "task_id": "t"},
    "ContextRequested": {
        "type": "ContextRequested",
        "task_id": "t",
        "step": 1,
        "agent_id": "a",
        "transcript_len": 1,
    },
    "ModelRequested": {
        "type": "ModelRequested",
        "task_id": "t",
        "step": 1,
        "agent_id": "a",
        "transcript_len": 1,
    },
    "ModelResponded": {
        "type": "ModelResponded",
        "task_id": "t",
        "step": 1,
        "agent_id": "a",
        "message": {"type": "ai", "content": "x"},
    },
    "ToolRequested": {
        "type": "ToolRequested",
        "task_id": "t",
        "step": 1,
        "agent_id": "a",
        "call": {"id": "c", "name": "write_todos", "args": {}},
    },
    "ToolCompleted": {
        "type": "ToolCompleted",
        "task_id": "t",
        "step": 1,
        "agent_id": "a",
        "message": {"type": "tool", "content": "x", "tool_call_id": "c"},
    },
}
OPTIONAL = {"TaskSubmitted": ("task_id",)}  # a submission without one gets a new id
REQUIRED = {
    name: [k for k in body if k != "type" and k not in OPTIONAL.get(name, ())]
    for name, body in VALID.items()
}
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)


@st.composite
def broken_event(draw: st.DrawFn) -> bytes:
    name = draw(st.sampled_from(sorted(VALID)))
    body = json.loads(json.dumps(VALID[name]))
    how = draw(st.sampled_from(["drop", "retype", "unknown_type", "known_but_missing"]))
    if how == "drop":
        body.pop(draw(st.sampled_from(REQUIRED[name])))
    elif how == "retype":
        key = draw(st.sampled_from(REQUIRED[name]))
        body[key] = draw(st.sampled_from([[1, 2], {"x": None}, None, True]))
    elif how == "unknown_type":
        body["type"] = draw(st.text(min_size=1, max_size=12).filter(lambda t: t not in VALID))
    else:
        # well-formed, but naming a task/agent nobody knows (a submission: an agent
        # nobody deployed; an empty message list is a valid input, as in LangChain)
        body["task_id"] = f"ghost-{draw(st.uuids())}"
        if name == "TaskSubmitted":
            body["agent"] = f"nobody-deployed-{draw(st.uuids())}"
    return json.dumps(body).encode()


junk = st.one_of(
    st.binary(max_size=64),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.text(max_size=40).map(str.encode),
)
payloads = st.one_of(broken_event(), junk)


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(batch=st.lists(st.tuples(st.integers(0, 5), payloads), min_size=1, max_size=25))
def test_fuzzed_events_all_land_in_the_dlq_and_no_consumer_stops(
    stack: ServiceProcesses, redis_url: str, batch: list[tuple[int, bytes]]
) -> None:
    names = Names(stack.prefix)
    streams = [names.tasks, names.loop, names.context, names.model, names.tools, names.todo_calls]
    r = syncredis.Redis.from_url(redis_url)
    before = r.xlen(names.dlq)
    for index, payload in batch:
        r.xadd(streams[index], {DATA_FIELD: payload})
    deadline = time.monotonic() + 20
    while r.xlen(names.dlq) < before + len(batch) and time.monotonic() < deadline:
        time.sleep(0.05)
    letters = [json.loads(f[DATA_FIELD.encode()]) for _, f in r.xrange(names.dlq)][before:]
    assert len(letters) == len(batch), (len(letters), len(batch))
    assert all(letter["error"] for letter in letters)
    for service in ("loop", "context", "model", "tools", "todos"):
        assert stack.alive(service), stack.output(service)
    wait_until_acked(r, names, ("loop", "context", "model", "tools", "todos"))
    r.close()


async def test_dead_letter_round_trip_list_replay_after_a_fix_and_drop(
    stack: ServiceProcesses,
) -> None:
    schema = {
        "type": "function",
        "function": {
            "name": "repaired",
            "description": "A tool whose module is deployed late.",
            "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}},
        },
    }
    spec = AgentSpec.model_validate(
        {"model": "m", "tools": [f"{FIX_MODULE}:repaired"], "tool_schemas": [schema]}
    )
    async with Client(stack.redis_url, stack.prefix) as client:
        task_id = await client.submit(spec, [HumanMessage(content="fixable")])
        # The tools stage cannot import the tool: the task ends at once with the reason
        # (its client is not left waiting), and the event waits in the DLQ.
        with pytest.raises(TaskFailedError) as failed:
            await client.wait(task_id)
        assert failed.value.event.reason.startswith("the tools stage could not handle")
        assert f"cannot import {FIX_MODULE}" in failed.value.event.reason

        def letter_of_task() -> str | None:
            listed = run_cli(stack, "dlq", "list", "--json")
            for line in listed.stdout.splitlines():
                entry = json.loads(line)
                if entry["task_id"] == task_id:
                    return str(entry["id"])
            return None

        entry_id = await wait_for(letter_of_task, timeout=20)
        shown = json.loads(run_cli(stack, "dlq", "show", entry_id).stdout)
        assert shown["stream"] == Names(stack.prefix).tools
        assert f"cannot import {FIX_MODULE}" in shown["error"]
        assert json.loads(shown["payload"])["call"]["name"] == "repaired"

        # the fix: the module is deployed; then the letter is replayed. The event is
        # handled again, but its task has ended: the tool does not run, nothing changes.
        (FIX_DIR / f"{FIX_MODULE}.py").write_text(
            'def repaired(x: int) -> str:\n    """Fixed."""\n    return f"fixed {x}"\n'
        )
        replayed = run_cli(stack, "dlq", "replay", entry_id)
        assert replayed.returncode == 0 and "replayed" in replayed.stdout, replayed.stderr
        assert letter_of_task() is None  # replay removed it from the DLQ
        wait_until_acked(syncredis.Redis.from_url(stack.redis_url), Names(stack.prefix), ["tools"])
        assert await client.status(task_id) == "failed"
        assert [m.type for m in await client.messages(task_id)] == ["human", "ai"]

    r = syncredis.Redis.from_url(stack.redis_url)
    r.xadd(Names(stack.prefix).context, {DATA_FIELD: b"garbage to drop"})
    r.close()

    def garbage() -> str | None:
        for line in run_cli(stack, "dlq", "list", "--json").stdout.splitlines():
            entry = json.loads(line)
            if entry["payload"] == "garbage to drop":
                return str(entry["id"])
        return None

    garbage_id = await wait_for(garbage, timeout=20)
    dropped = run_cli(stack, "dlq", "drop", garbage_id)
    assert dropped.returncode == 0 and garbage_id in dropped.stdout
    assert garbage() is None
    missing = run_cli(stack, "dlq", "drop", garbage_id)
    assert missing.returncode == 2 and "no dead letter" in missing.stderr

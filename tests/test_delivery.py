"""Delivery guarantees on real Redis: reclaim after a kill, dead letters, tools that run at
most once, graceful shutdown, cancellation, deadlines and size limits."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contracts import HumanMessage, TaskCompleted, TaskFailed, ToolMessage
from contracts.streams import DATA_FIELD, Names
from loopline.agentfile import agent_from_dict
from loopline.client import Client
from loopline.testing.scripted import (
    Reply,
    ScriptedOpenAIServer,
    ScriptedToolCall,
)
from services.redisconn import sync_client
from tests.support import REPO_ROOT, ServiceProcesses, unique_prefix, wait_for

RECORD = f"/tmp/loopline-effects-{uuid.uuid4().hex[:8]}.jsonl"
TOOLS = [
    "tests.tooling:slow_effect",
    "tests.tooling:slow_idempotent",
    "tests.tooling:big_output",
    "tests.tooling:add",
]


def one_call(name: str, args: dict[str, Any]) -> list[Reply]:
    return [Reply(tool_calls=(ScriptedToolCall(name, args),)), Reply(content=f"{name} answered")]


def slow(name: str, tag: str, seconds: float) -> list[Reply]:
    return one_call(name, {"tag": tag, "seconds": seconds, "record": RECORD})


SCRIPTS = {
    "kill-effect": slow("slow_effect", "kill-effect", 4.0),
    "kill-idem": slow("slow_idempotent", "kill-idem", 4.0),
    "graceful": slow("slow_effect", "graceful", 2.0),
    "cancel": slow("slow_effect", "cancel", 8.0),
    "huge": one_call("big_output", {"n": 50_000}),
    "quick": one_call("add", {"a": 1, "b": 2}),
}


@pytest.fixture(scope="module")
def stack(redis_url: str, scripted: ScriptedOpenAIServer) -> Iterator[ServiceProcesses]:
    env = {
        "OPENAI_BASE_URL": scripted.url,
        "OPENAI_API_KEY": "test",
        "LOOPLINE_CLAIM_IDLE_MS": "1000",
        "LOOPLINE_MAX_EVENT_BYTES": "20000",
    }
    procs = ServiceProcesses(redis_url, unique_prefix(), env=env, replicas=2)
    with procs:
        yield procs


SPEC = agent_from_dict({"model": "m", "tools": TOOLS})[0]


def marks(tag: str) -> list[dict[str, Any]]:
    if not Path(RECORD).exists():
        return []
    lines = [json.loads(line) for line in Path(RECORD).read_text().splitlines()]
    return [m for m in lines if m["tag"] == tag]


async def run_with_kill(stack: ServiceProcesses, prompt: str, tag: str) -> list[Any]:
    """Start the task, SIGKILL the tools replica running the tool, let the other finish."""
    async with Client(stack.redis_url, stack.prefix) as client:
        task_id = await client.submit(SPEC, [HumanMessage(content=f"{prompt} {uuid.uuid4()}")])
        await wait_for(lambda: marks(tag), timeout=20)
        pid = marks(tag)[0]["pid"]
        victims = [(i, p) for i, p in enumerate(stack.procs["tools"]) if p.pid == pid]
        assert victims, "the tool ran in an unknown process"
        index, victim = victims[0]
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        killed_at = time.monotonic()
        done = await asyncio.wait_for(client.wait(task_id), 30)
        recovered_in = time.monotonic() - killed_at
        messages = await client.messages(task_id)
        log = [e async for _, e in client.events(task_id, follow=False)]
    stack.procs["tools"][index] = stack._spawn("tools", index + 10)  # keep two replicas
    assert isinstance(done, TaskCompleted)
    assert recovered_in < 15
    return [messages, log]


async def test_an_interrupted_tool_is_not_run_again_and_the_model_is_told(
    stack: ServiceProcesses,
) -> None:
    messages, log = await run_with_kill(stack, "kill-effect", "kill-effect")
    results = [m for m in messages if isinstance(m, ToolMessage)]
    assert len(results) == 1 and results[0].status == "error"
    assert "outcome of this call is unknown" in results[0].text()
    assert [m["what"] for m in marks("kill-effect")] == ["start"]  # ran once, never again
    assert sum(1 for e in log if e.type == "ToolCompleted") == 1


async def test_an_interrupted_idempotent_tool_runs_again(stack: ServiceProcesses) -> None:
    messages, _ = await run_with_kill(stack, "kill-idem", "kill-idem")
    results = [m for m in messages if isinstance(m, ToolMessage)]
    assert len(results) == 1 and results[0].content == "idempotent kill-idem done"
    assert [m["what"] for m in marks("kill-idem")] == ["start", "start", "end"]


async def test_sigterm_lets_an_in_flight_tool_finish(stack: ServiceProcesses) -> None:
    async with Client(stack.redis_url, stack.prefix) as client:
        task_id = await client.submit(SPEC, [HumanMessage(content=f"graceful {uuid.uuid4()}")])
        await wait_for(lambda: marks("graceful"), timeout=20)
        pid = marks("graceful")[0]["pid"]
        index = next(i for i, p in enumerate(stack.procs["tools"]) if p.pid == pid)
        stack.procs["tools"][index].send_signal(signal.SIGTERM)
        done = await asyncio.wait_for(client.wait(task_id), 30)
        messages = await client.messages(task_id)
    assert stack.procs["tools"][index].wait(timeout=20) == 0
    stack.procs["tools"][index] = stack._spawn("tools", index + 20)
    assert isinstance(done, TaskCompleted)
    result = next(m for m in messages if isinstance(m, ToolMessage))
    assert result.content == "effect graceful done"
    assert [m["what"] for m in marks("graceful")] == ["start", "end"]


async def test_cancel_from_the_cli_stops_a_running_task(stack: ServiceProcesses) -> None:
    async with Client(stack.redis_url, stack.prefix) as client:
        task_id = await client.submit(SPEC, [HumanMessage(content=f"cancel {uuid.uuid4()}")])
        await wait_for(lambda: marks("cancel"), timeout=20)
        env = {**os.environ, "REDIS_URL": stack.redis_url, "LOOPLINE_PREFIX": stack.prefix}
        done = subprocess.run(
            [sys.executable, "-m", "loopline", "cancel", task_id, "--reason", "user changed mind"],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            cwd=REPO_ROOT,
        )
        assert done.returncode == 0, done.stderr
        assert "cancelled: user changed mind" in done.stdout
        await wait_for(lambda: len(marks("cancel")) == 2, timeout=30)  # the tool finishes late
        await asyncio.sleep(1.0)  # ... and its result must change nothing
        log = [e async for _, e in client.events(task_id, follow=False)]
        assert await client.status(task_id) == "failed"
    terminal = [e for e in log if isinstance(e, TaskCompleted | TaskFailed)]
    assert len(terminal) == 1 and isinstance(terminal[0], TaskFailed)
    assert log[-1] is terminal[0]


async def test_a_deadline_fails_a_task_that_waits_too_long(
    redis_url: str,
) -> None:
    with ScriptedOpenAIServer([Reply(content="too late")], latency=3.0) as slow_model:
        env = {"OPENAI_BASE_URL": slow_model.url, "OPENAI_API_KEY": "test"}
        with ServiceProcesses(redis_url, unique_prefix(), env=env) as procs:
            async with Client(procs.redis_url, procs.prefix) as client:
                started = time.monotonic()
                task_id = await client.submit(SPEC, [HumanMessage(content="hurry")], deadline_s=1.0)
                log = [e async for _, e in client.events(task_id)]
                elapsed = time.monotonic() - started
                await asyncio.sleep(2.5)  # the model answers late; nothing changes
                after = [e async for _, e in client.events(task_id, follow=False)]
    assert isinstance(log[-1], TaskFailed) and log[-1].reason == "deadline exceeded"
    assert elapsed < 2.5
    assert len(after) == len(log)


async def test_tool_output_over_the_size_limit_is_a_clear_error(stack: ServiceProcesses) -> None:
    async with Client(stack.redis_url, stack.prefix) as client:
        task_id = await client.submit(SPEC, [HumanMessage(content=f"huge {uuid.uuid4()}")])
        await client.wait(task_id)
        messages = await client.messages(task_id)
    result = next(m for m in messages if isinstance(m, ToolMessage))
    assert result.status == "error"
    assert "exceeds the event size limit of 20000 bytes" in result.text()


async def test_oversized_and_unknown_entries_are_dead_lettered(
    stack: ServiceProcesses, redis_url: str
) -> None:
    names = Names(stack.prefix)
    r = sync_client(redis_url)
    before = r.xlen(names.dlq)
    huge = json.dumps({"type": "ContextRequested", "task_id": "x" * 30_000})
    r.xadd(names.work_streams("context")[0], {DATA_FIELD: huge})  # one partition's, if any
    unknown = {
        "type": "ToolCompleted",
        "task_id": "nope",
        "step": 1,
        "agent_id": "a",
        "message": {"type": "tool", "content": "x", "tool_call_id": "c"},
    }
    r.xadd(names.work("loop", "nope"), {DATA_FIELD: json.dumps(unknown)})
    await wait_for(lambda: r.xlen(names.dlq) >= before + 2, timeout=10)
    letters = [json.loads(f[DATA_FIELD.encode()]) for _, f in r.xrange(names.dlq)][before:]
    errors = " | ".join(letter["error"] for letter in letters)
    assert "exceeds the limit of 20000 bytes" in errors
    assert "UnknownTask" in errors
    r.close()

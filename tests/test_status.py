"""`loopline status` against the five services as processes: consumers, lag and pending,
a dead letter, and a task held in flight by a tool call."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis as syncredis

from contracts import AgentSpec, HumanMessage, TaskCompleted
from contracts.streams import DATA_FIELD, GROUPS, SERVICES, Names
from loopline.agentfile import agent_from_dict
from loopline.client import Client, TaskFailedError
from loopline.status import render, status
from loopline.testing.scripted import (
    Reply,
    ScriptedOpenAIServer,
    ScriptedToolCall,
    responder_by_prompt,
)
from tests.support import REPO_ROOT, ServiceProcesses, unique_prefix, wait_for

GATE = f"/tmp/loopline-status-gate-{uuid.uuid4().hex[:8]}"
SCRIPTS = {
    "held": [
        Reply(tool_calls=(ScriptedToolCall("wait_for_file", {"path": GATE}),)),
        Reply(content="released"),
    ]
}


@pytest.fixture(scope="module")
def stack(redis_url: str) -> Iterator[ServiceProcesses]:
    with ScriptedOpenAIServer(responder=responder_by_prompt(SCRIPTS)) as server:
        env = {"OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": "test"}
        with ServiceProcesses(redis_url, unique_prefix(), env=env) as procs:
            yield procs
    Path(GATE).unlink(missing_ok=True)


def cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loopline", *args],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **env},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def pids(stack: ServiceProcesses) -> dict[str, set[int]]:
    return {name: {p.pid for p in procs} for name, procs in stack.procs.items()}


def assert_every_service_reported(
    report: dict[str, Any], stack: ServiceProcesses, names: Names
) -> None:
    """Every service: its announced consumers are this test's processes, its input
    streams are read by its group and nothing is left undelivered."""
    for service in SERVICES:
        info = report["services"][service]
        assert info["live"] == len(stack.procs[service]), (service, info)
        live = [c for c in info["consumers"] if c["announced"]]
        assert {c["pid"] for c in live} == pids(stack)[service]
        assert all(c["name"].startswith(f"{service}-") for c in live)
        assert all(c["uptime_s"] is not None and c["uptime_s"] >= 0 for c in live)
        streams = {s["stream"]: s for s in info["streams"]}
        assert set(streams) == set(names.inputs_of(service))
        for s in streams.values():
            assert s["group"] == GROUPS[service] and s["exists"]
            assert s["lag"] == 0, (service, s)  # everything delivered


def assert_tool_call_held(report: dict[str, Any], names: Names) -> None:
    """The held tool call is the one entry delivered and not acked; one dead letter."""
    (tools_stream,) = report["services"]["tools"]["streams"]
    assert tools_stream["pending"] == 1 and tools_stream["length"] == 1
    (tools_consumer,) = report["services"]["tools"]["consumers"]
    assert tools_consumer["pending"] == 1
    assert report["dlq"] == {"stream": names.dlq, "length": 1}
    assert report["tasks"]["running"] == 1
    assert report["tasks"]["state_keys"] == 1


def assert_command_line_reports(url: str, prefix: str) -> None:
    """The command line, while the tool call is held: one JSON object, and a table."""
    env = {"REDIS_URL": url, "LOOPLINE_PREFIX": prefix}
    out = cli(["status", "--json"], env)
    assert out.returncode == 0, out.stderr
    as_json = json.loads(out.stdout)
    assert as_json["tasks"]["running_by_phase"] == {"tools": 1}
    assert as_json["dlq"]["length"] == 1
    assert as_json["services"]["tools"]["streams"][0]["pending"] == 1
    out = cli(["status"], env)
    assert out.returncode == 0, out.stderr
    table = out.stdout
    assert "SERVICE" in table and "LAG" in table and "PENDING" in table
    assert "dead letters: 1" in table
    assert "tasks in flight: 1 (tools 1)" in table
    for service in SERVICES:
        assert f"\n{service} " in table
    out = cli(["status", "--no-tasks", "--json"], env)
    assert json.loads(out.stdout)["tasks"] is None


async def test_status_of_a_running_deployment(stack: ServiceProcesses) -> None:
    names = Names(stack.prefix)
    url = stack.redis_url
    spec = agent_from_dict({"model": "gpt-4o-mini", "tools": ["tests.ops_tools:wait_for_file"]})[0]
    r = syncredis.Redis.from_url(url)
    try:
        r.xadd(names.context, {DATA_FIELD: "not json"})  # becomes a dead letter
        async with Client(url, stack.prefix) as client:
            task_id = await client.submit(spec, [HumanMessage(content="held: hold on")])

            async def held() -> dict[str, Any] | None:
                """The tool call is held and everything else is handled. A report reads
                stream after stream, not one snapshot, so wait for all of it to agree."""
                report = await status(url, stack.prefix)
                pending = {
                    s["stream"]: s["pending"]
                    for info in report["services"].values()
                    for s in info["streams"]
                }
                ready = (
                    report["tasks"]["running_by_phase"] == {"tools": 1}
                    and report["dlq"]["length"] == 1
                    and pending == {**dict.fromkeys(pending, 0), names.tools: 1}
                )
                return report if ready else None

            report = await wait_for(held, timeout=60, interval=0.2)

            assert_every_service_reported(report, stack, names)
            assert_tool_call_held(report, names)
            assert_command_line_reports(url, stack.prefix)

            Path(GATE).touch()  # release the tool: the task completes
            done = await client.wait(task_id)
            assert isinstance(done, TaskCompleted) and done.answer == "released"

        async def settled() -> dict[str, Any] | None:
            report = await status(url, stack.prefix)
            (tools_stream,) = report["services"]["tools"]["streams"]
            return report if tools_stream["pending"] == 0 else None

        report = await wait_for(settled, timeout=30, interval=0.2)
        assert report["tasks"]["running"] == 0
        assert report["tasks"]["kept"] == {"completed": 1}
        assert "tasks in flight: 0; finished and kept: completed 1" in render(report)
    finally:
        Path(GATE).touch()
        r.close()


async def test_stopped_services_show_as_gone(redis_url: str) -> None:
    prefix = unique_prefix()
    with ServiceProcesses(redis_url, prefix, services=["todos"]) as procs:
        names = Names(prefix)
        r = syncredis.Redis.from_url(redis_url)
        r.xadd(names.todo_calls, {DATA_FIELD: "not json"})  # a delivery lists the consumer
        r.close()
        report = await wait_for(lambda: _dlq_filled(redis_url, prefix), timeout=30, interval=0.2)
        assert report["services"]["todos"]["live"] == 1
        assert procs.alive("todos")
    report = await status(redis_url, prefix)
    todos = report["services"]["todos"]
    assert todos["live"] == 0  # a clean shutdown withdraws the announcement
    assert [c["announced"] for c in todos["consumers"]] == [False]  # Redis still lists it
    assert "(gone?)" in render(report)
    assert all(report["services"][s]["live"] == 0 for s in SERVICES)
    assert "no group" in render(report)  # the other services never ran


async def _dlq_filled(url: str, prefix: str) -> dict[str, Any] | None:
    report = await status(url, prefix)
    return report if report["dlq"]["length"] == 1 else None


def test_status_without_redis_url_is_one_line() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "LOOPLINE_REDIS_URL")}
    out = subprocess.run(
        [sys.executable, "-m", "loopline", "status"],
        env={**env, "PYTHONPATH": str(REPO_ROOT)},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "REDIS_URL" in out.stderr
    out = cli(["status"], {"REDIS_URL": "redis://127.0.0.1:1"})
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "cannot reach Redis" in out.stderr


def editing_agent() -> AgentSpec:
    """An agent whose context stage counts tokens (ContextEditingMiddleware)."""
    return AgentSpec.model_validate(
        {
            "model": {"name": "gpt-4o-mini"},
            "middleware": [
                {
                    "type": "ContextEditingMiddleware",
                    "params": {"edits": [{"type": "ClearToolUsesEdit", "trigger": 50}]},
                }
            ],
        }
    )


async def test_status_names_the_stage_that_fails_a_task(redis_url: str) -> None:
    """The context stage fails on a task's step (its stored token count of the first
    message is not a number) until it gives up. `loopline status`, run as a user runs
    it: while the context stage retries, it names the context stage, the task and the
    error; once the task has ended, it counts the failed task under context. The task's
    phase (``model``: waiting for its model reply) never takes the blame."""
    prompt = f"blame {uuid.uuid4().hex}"
    SCRIPTS[prompt] = [Reply(content="never reached")]
    spec = editing_agent()
    task_id = uuid.uuid4().hex
    with ScriptedOpenAIServer(responder=responder_by_prompt(SCRIPTS)) as server:
        env = {
            "OPENAI_BASE_URL": server.url,
            "OPENAI_API_KEY": "test",
            "LOOPLINE_CLAIM_IDLE_MS": "2000",
            "LOOPLINE_MAX_DELIVERIES": "3",
        }
        with ServiceProcesses(redis_url, unique_prefix(), env=env) as procs:
            names = Names(procs.prefix)
            cli_env = {"REDIS_URL": redis_url, "LOOPLINE_PREFIX": procs.prefix}
            async with Client(redis_url, procs.prefix) as client:
                tokens = names.task_tokens(task_id)
                await client.redis.hset(tokens, "0:0:approximate:gpt-4o-mini", "lots")
                await client.submit(spec, [HumanMessage(content=prompt)], task_id=task_id)

                async def context_failing() -> bool:
                    report = await status(redis_url, procs.prefix)
                    return bool(report["failing"]["by_stage"] == {"context": 1})

                await wait_for(context_failing, timeout=30, interval=0.1)
                while_retried = cli(["status"], cli_env)
                with pytest.raises(TaskFailedError) as failed:
                    await asyncio.wait_for(client.wait(task_id), 60)

                async def lettered() -> bool:  # committed right after the task ended
                    report = await status(redis_url, procs.prefix)
                    return bool(report["dlq"]["length"] == 1 and not report["failing"]["entries"])

                await wait_for(lettered, timeout=10, interval=0.1)
                after = cli(["status"], cli_env)
                as_json = json.loads(cli(["status", "--json"], cli_env).stdout)
    assert while_retried.returncode == 0, while_retried.stderr
    assert "entries failing, retried: 1 (context 1)" in while_retried.stdout
    assert f"  context: ContextRequested of task {task_id}: ValueError: " in while_retried.stdout
    assert "held by a failing stage: context 1" in while_retried.stdout
    assert failed.value.event.reason.startswith(
        "the context stage could not handle ContextRequested: gave up after 3 deliveries; "
        "last error: ValueError: invalid literal for int()"
    )
    assert after.returncode == 0, after.stderr
    assert "tasks in flight: 0; finished and kept: failed 1 (context 1)" in after.stdout
    assert "model 1" not in after.stdout and "entries failing" not in after.stdout
    assert as_json["tasks"]["failed_by"] == {"context": 1}

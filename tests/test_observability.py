"""One task is one trace across every service process; each process serves Prometheus
metrics; logs can be JSON lines carrying the task id."""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from contracts import HumanMessage, TaskCompleted
from loopline.agentfile import agent_from_dict
from loopline.client import Client
from loopline.testing.processes import free_port
from loopline.testing.scripted import Reply, ScriptedOpenAIServer, ScriptedToolCall
from tests.support import ServiceProcesses, unique_prefix

TURNS = [
    Reply(
        tool_calls=(
            ScriptedToolCall("add", {"a": 1, "b": 2}),
            ScriptedToolCall("write_todos", {"todos": [{"content": "x", "status": "completed"}]}),
        )
    ),
    Reply(content="3"),
]


@pytest.fixture(scope="module")
def traced(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    trace_file = tmp_path_factory.mktemp("traces") / "spans.jsonl"
    port = free_port()
    with ScriptedOpenAIServer(TURNS) as server:
        env = {
            "OPENAI_BASE_URL": server.url,
            "OPENAI_API_KEY": "test",
            "LOOPLINE_TRACE_FILE": str(trace_file),
            "LOOPLINE_LOG_FORMAT": "json",
        }
        procs = ServiceProcesses(redis_url, unique_prefix(), env=env)
        procs.services = ["loop", "context", "tools", "todos"]
        with procs:
            model = ServiceProcesses(
                redis_url,
                procs.prefix,
                env={**env, "LOOPLINE_METRICS_PORT": str(port)},
                services=["model"],
            )
            with model:
                yield {"procs": procs, "model": model, "trace_file": trace_file, "port": port}


async def test_one_task_is_one_trace_across_every_service(traced: dict[str, object]) -> None:
    procs = traced["procs"]
    assert isinstance(procs, ServiceProcesses)
    spec, _ = agent_from_dict(
        {
            "model": "gpt-4o-mini",
            "tools": ["tests.tooling:add"],
            # context editing, so the context stage takes part (an agent without it skips it)
            "middleware": [{"type": "TodoListMiddleware"}, {"type": "ContextEditingMiddleware"}],
        }
    )
    async with Client(procs.redis_url, procs.prefix) as client:
        task_id = await client.submit(spec, [HumanMessage(content=f"trace {uuid.uuid4()}")])
        assert isinstance(await client.wait(task_id), TaskCompleted)
    trace_file = traced["trace_file"]
    assert isinstance(trace_file, Path)
    spans = [json.loads(line) for line in trace_file.read_text().splitlines()]
    mine = [s for s in spans if s["attributes"].get("loopline.task_id") == task_id]
    assert len({s["trace_id"] for s in mine}) == 1
    services = {s["service"] for s in mine}
    assert services == {
        "loopline-loop",
        "loopline-context",
        "loopline-model",
        "loopline-tools",
        "loopline-todos",
    }
    roots = [s for s in mine if s["parent_id"] is None]
    assert [r["name"] for r in roots] == ["loop TaskSubmitted"]

    # metrics of the model process
    port = traced["port"]
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert (
        'loopline_entries_total{event="ModelRequested",outcome="processed",service="model"}' in body
    )
    assert "loopline_handler_seconds_bucket" in body

    # JSON logs with the task id (the model call's HTTP log line is inside its handler)
    model = traced["model"]
    assert isinstance(model, ServiceProcesses)
    lines = [
        json.loads(line) for line in model.output("model").splitlines() if line.startswith("{")
    ]
    assert any(entry.get("task_id") == task_id for entry in lines)

"""The user's ways in: the CLI against a running deployment, a plain redis-py producer, the
embedded default, ``subscribe``, and one-line errors."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis as syncredis

from contracts import TodosUpdated
from contracts.streams import DATA_FIELD, Names
from loopline.testing.scripted import (
    Reply,
    ScriptedToolCall,
)
from tests.support import REPO_ROOT

TODO_TURNS = [
    Reply(
        tool_calls=(
            ScriptedToolCall(
                "write_todos",
                {"todos": [{"content": "add", "status": "in_progress"}]},
            ),
            ScriptedToolCall("add", {"a": 20, "b": 22}),
        )
    ),
    Reply(
        tool_calls=(
            ScriptedToolCall("write_todos", {"todos": [{"content": "add", "status": "completed"}]}),
        )
    ),
    Reply(content="The sum is 42."),
]
SCRIPTS = {"sum": TODO_TURNS, "plain": [Reply(content="hello from the script")]}

AGENT_FILE = """
model: gpt-4o-mini
tools: [tests.tooling:add]
system_prompt: You add numbers.
middleware:
  - type: TodoListMiddleware
"""


def cli(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loopline", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO_ROOT,
    )


def test_run_json_against_a_running_deployment(up: dict[str, str], tmp_path: Path) -> None:
    agent = tmp_path / "agent.yaml"
    agent.write_text(AGENT_FILE)
    done = cli("run", "sum 20 and 22", "--agent", str(agent), "--json", env=up)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["answer"] == "The sum is 42."
    assert out["todos"] == [{"content": "add", "status": "completed"}]
    assert [m["type"] for m in out["messages"]] == [
        "human",
        "ai",
        "tool",
        "tool",
        "ai",
        "tool",
        "ai",
    ]
    assert len(out["task_id"]) == 32

    # the finished task's todos are on the public stream, from the start
    watched = cli("watch", "todos", "--from-start", "--no-follow", "--json", env=up)
    assert watched.returncode == 0, watched.stderr
    lines = [json.loads(line) for line in watched.stdout.splitlines()]
    mine = [e for e in lines if e["task_id"] == out["task_id"]]
    assert [e["counts"] for e in mine] == [
        {"pending": 0, "in_progress": 1, "completed": 0},
        {"pending": 0, "in_progress": 0, "completed": 1},
    ]
    # and in the task's own log
    log = cli("watch", "task", out["task_id"], "--no-follow", "--json", env=up)
    types = [json.loads(line)["type"] for line in log.stdout.splitlines()]
    assert types.count("TodosUpdated") == 2 and types[-1] == "TaskCompleted"


def test_submit_prints_the_task_id(up: dict[str, str]) -> None:
    done = cli("submit", "plain hello", env=up)
    assert done.returncode == 0, done.stderr
    task_id = done.stdout.strip()
    log = cli("watch", "task", task_id, "--json", env=up)  # follows until the end
    assert json.loads(log.stdout.splitlines()[-1])["answer"] == "hello from the script"


def test_a_plain_redis_py_producer_needs_no_loopline(up: dict[str, str]) -> None:
    """The README's wire format: XADD one JSON field, read the task's log."""
    r = syncredis.Redis.from_url(up["REDIS_URL"], decode_responses=True)
    prefix = up["LOOPLINE_PREFIX"]
    task_id = uuid.uuid4().hex
    task = {
        "type": "TaskSubmitted",
        "task_id": task_id,
        "agent": {"model": "gpt-4o-mini", "tools": ["tests.tooling:add"]},
        "messages": [{"type": "human", "content": "sum please"}],
    }
    r.xadd(f"{prefix}:tasks", {"__data__": json.dumps(task)})
    log_key = f"{prefix}:task:{{{task_id}}}:log"
    last, events = "0", []
    while not events or events[-1]["type"] not in ("TaskCompleted", "TaskFailed"):
        reply = r.xread({log_key: last}, block=10_000)
        assert reply, "no progress within 10 s"
        for entry_id, fields in reply[0][1]:
            last = entry_id
            events.append(json.loads(fields["__data__"]))
    assert events[-1]["type"] == "TaskCompleted"
    assert events[-1]["answer"] == "The sum is 42."
    r.close()


async def test_subscribe_delivers_live_to_a_subscriber_started_before(
    up: dict[str, str],
) -> None:
    from contracts.agent import AgentSpec
    from contracts.messages import HumanMessage
    from loopline import subscribe
    from loopline.client import Client

    got: list[TodosUpdated] = []

    async def listen() -> None:
        async for event in subscribe(
            "todos", redis_url=up["REDIS_URL"], prefix=up["LOOPLINE_PREFIX"]
        ):
            assert isinstance(event, TodosUpdated)
            got.append(event)
            if len(got) == 2:
                return

    listener = asyncio.create_task(listen())
    await asyncio.sleep(0.3)  # the subscriber is waiting before the task exists
    spec = AgentSpec.model_validate(
        {
            "model": "gpt-4o-mini",
            "tools": ["tests.tooling:add"],
            "middleware": [{"type": "TodoListMiddleware"}],
        }
    )
    async with Client(up["REDIS_URL"], up["LOOPLINE_PREFIX"]) as client:
        task_id = await client.submit(spec, [HumanMessage(content="sum live")])
        await client.wait(task_id)
    await asyncio.wait_for(listener, 10)
    assert [e.task_id for e in got] == [task_id, task_id]
    assert [e.todos[0].status for e in got] == ["in_progress", "completed"]


def test_schema_lists_every_event() -> None:
    done = cli("schema", env=dict(os.environ))
    schemas = json.loads(done.stdout)
    for name in (
        "TaskSubmitted",
        "ModelRequested",
        "ToolCompleted",
        "TodosUpdated",
        "ContextEdited",
        "TaskFailed",
    ):
        assert schemas[name]["properties"]["type"]["const"] == name


@pytest.mark.parametrize(
    ("args", "env_extra", "expected"),
    [
        (
            ["run", "hi"],
            {"REDIS_URL": "redis://127.0.0.1:1", "OPENAI_BASE_URL": "http://x/v1"},
            "cannot reach Redis",
        ),
        (["run", "hi"], {}, "no model endpoint configured"),
        (["run", "hi", "--agent", "/nonexistent.yaml"], {}, "cannot read agent file"),
        (["serve", "loop"], {}, "serve needs REDIS_URL"),
    ],
)
def test_user_errors_are_one_clear_line(
    args: list[str], env_extra: dict[str, str], expected: str
) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("REDIS_URL", "OPENAI_BASE_URL", "OPENAI_API_KEY")
    }
    done = cli(*args, env={**env, **env_extra})
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], done.stderr


def test_bad_agent_files_are_one_clear_line(tmp_path: Path) -> None:
    env = {**os.environ, "OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "PYTHONPATH": str(REPO_ROOT)}
    env.pop("REDIS_URL", None)
    env.pop("LOOPLINE_ALLOWED_MODULES", None)  # the embedded default: any module may import
    cases = {
        "model: [unclosed": "not valid YAML/JSON",
        "tools: [a]": "'model' field is required",
        "model: m\ntools: [no.such.module:fn]": "cannot import no.such.module",
        "model: m\nmiddleware: [{type: NoSuchMiddleware}]": "unknown middleware type",
        "model: m\nwhatever: 1": "unknown field(s) whatever",
    }
    for text, expected in cases.items():
        path = tmp_path / "agent.yaml"
        path.write_text(text)
        done = cli("run", "hi", "--agent", str(path), env=env)
        assert done.returncode == 2, (text, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], (text, done.stderr)


def test_demo_runs_on_the_embedded_default_with_no_redis_and_no_key() -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("REDIS_URL", "OPENAI_BASE_URL", "OPENAI_API_KEY")
    }
    done = cli("demo", "--json", env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "SCRIPTED" in done.stderr
    out = json.loads(done.stdout)
    assert "XAUTOCLAIM" in out["answer"]
    assert all(t["status"] == "completed" for t in out["todos"]) and len(out["todos"]) == 2
    # context editing cleared old lookups in the model's view, never in the transcript
    assert all("[cleared]" not in json.dumps(m) for m in out["messages"])


def test_embedded_create_agent_with_in_process_tools() -> None:
    """No REDIS_URL: create_agent runs everything in-process; tools may be closures."""
    script = r"""
import os, json
from loopline import create_agent
from loopline.testing.scripted import ScriptedOpenAIServer, Reply, ScriptedToolCall
calls = []
def secret(name: str) -> str:
    '''Tell a secret.'''
    calls.append(name)
    return f"secret of {name}"
turns = [Reply(tool_calls=(ScriptedToolCall("secret", {"name": "ada"}),)), Reply(content="told")]
with ScriptedOpenAIServer(turns) as server:
    from langchain_openai import ChatOpenAI
    model = ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="k")
    out = create_agent(model, [secret]).invoke({"messages": [{"role": "user", "content": "hi"}]})
    print(json.dumps({"calls": calls, "last": out["messages"][-1].content,
                      "tool": out["messages"][2].content, "n": len(server.requests)}))
"""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "OPENAI_BASE_URL")}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {"calls": ["ada"], "last": "told", "tool": "secret of ada", "n": 2}


@pytest.mark.fast
def test_names_are_prefixed_and_task_keys_share_a_hash_tag() -> None:
    names = Names("p")
    keys = names.task_keys("abc")
    assert all(k.startswith("p:task:{abc}:") for k in keys)
    assert DATA_FIELD == "__data__"


def test_stats_from_the_task_logs(up: dict[str, str], tmp_path: Path) -> None:
    agent = tmp_path / "agent.yaml"
    agent.write_text(AGENT_FILE.replace("model:", "name: stats-agent\nmodel:"))
    for _ in range(2):
        assert cli("run", "sum again", "--agent", str(agent), env=up).returncode == 0
    done = cli("stats", "--json", env=up)
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)["stats-agent"]
    assert row["tasks"] == row["completed"] == 2 and row["failed"] == 0
    assert row["steps"] == row["model_calls"] == 6
    assert row["tool_calls"] == 6 and row["tool_errors"] == 0
    assert row["input_tokens"] > 0 and row["output_tokens"] > 0
    assert set(row["latency_ms"]) == {"model", "tools", "task"}
    assert row["latency_ms"]["model"]["count"] == 6
    assert row["latency_ms"]["task"]["p50"] > 0


def test_embedded_per_call_approval_parks_the_call_and_resumes_it_edited() -> None:
    """No REDIS_URL, LangChain's own HumanInTheLoopMiddleware in per-call mode: the gated
    call waits without running, ``invoke`` returns LangChain's ``__interrupt__``, and
    ``resume`` with an edit runs the call once, with the edited arguments."""
    script = r"""
import json
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_openai import ChatOpenAI
from loopline import create_agent
from loopline.testing.scripted import ScriptedOpenAIServer, Reply, ScriptedToolCall
calls = []
def transfer(amount: int) -> str:
    '''Move money.'''
    calls.append(amount)
    return f"moved {amount}"
turns = [Reply(tool_calls=(ScriptedToolCall("transfer", {"amount": 5}),)), Reply(content="done")]
with ScriptedOpenAIServer(turns) as server:
    model = ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="k")
    gate = HumanInTheLoopMiddleware(interrupt_on={"transfer": True}, interrupt_mode="per_call")
    agent = create_agent(model, [transfer], middleware=[gate])
    first = agent.invoke({"messages": [{"role": "user", "content": "pay"}]})
    (asked,) = first["__interrupt__"]
    before = list(calls)
    edit = {"type": "edit", "edited_action": {"name": "transfer", "args": {"amount": 7}}}
    out = agent.resume(first["task_id"], {asked["tool_call_id"]: edit})
    print(json.dumps({"asked": [asked["name"], asked["args"]], "before": before,
                      "calls": calls, "last": out["messages"][-1].content,
                      "tool": out["messages"][2].content, "interrupt": "__interrupt__" in out}))
"""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "OPENAI_BASE_URL")}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["asked"] == ["transfer", {"amount": 5}]
    assert out["before"] == []  # nothing ran while the call waited
    assert out["calls"] == [7]  # once, with the human's arguments
    assert out["last"] == "done" and not out["interrupt"]
    assert "moved 7" in out["tool"]


async def test_create_agent_against_a_deployment_streams_and_invokes(up: dict[str, str]) -> None:
    """With a Redis URL, create_agent talks to the running services: astream yields the
    task's events as they happen, ainvoke returns LangChain-shaped results."""
    from loopline import create_agent
    from services.settings import Settings

    settings = Settings(redis_url=up["REDIS_URL"], prefix=up["LOOPLINE_PREFIX"])
    agent = create_agent(
        "gpt-4o-mini",
        ["tests.tooling:add"],
        middleware=[{"type": "TodoListMiddleware"}],
        settings=settings,
    )
    kinds = [event.type async for event in agent.astream_task_events({"messages": "sum streamed"})]
    assert kinds[0] == "TaskSubmitted" and kinds[-1] == "TaskCompleted"
    assert kinds.count("TodosUpdated") == 2 and "ToolCompleted" in kinds
    result = await agent.ainvoke({"messages": [{"role": "user", "content": "sum invoked"}]})
    assert result["messages"][-1].content == "The sum is 42."
    assert result["todos"] == [{"content": "add", "status": "completed"}]

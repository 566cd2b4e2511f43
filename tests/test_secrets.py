"""No password, API key or token in what loopline prints, and services that wait for
Redis at start instead of exiting. A password-protected redis-server of the test's own;
``loopline serve`` and ``loopline status`` as a user runs them."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis as syncredis

from contracts import AgentSpec, HumanMessage, TaskCompleted, TaskFailed
from contracts.events import TaskSubmitted
from contracts.streams import DATA_FIELD, Names
from loopline import lifetime
from loopline.agentfile import agent_from_dict
from loopline.client import Client, TaskFailedError
from loopline.testing.processes import ServiceProcesses
from loopline.testing.redis_server import RedisServer
from loopline.testing.scripted import (
    Reply,
    ScriptedOpenAIServer,
    ScriptedToolCall,
    first_user_text,
    responder_by_prompt,
)
from services.secrets import redact, redact_url, scrub
from tests.support import unique_prefix

PASSWORD = "S3cretPass-7q"
API_KEY = "sk-test-Zk39aPq0x"


@pytest.mark.fast
def test_urls_and_texts_are_redacted() -> None:
    assert redact_url(f"redis://:{PASSWORD}@127.0.0.1:6379/0") == "redis://:***@127.0.0.1:6379/0"
    assert redact_url(f"rediss://alice:{PASSWORD}@h:1") == "rediss://alice:***@h:1"
    assert redact_url("redis://127.0.0.1:6379") == "redis://127.0.0.1:6379"
    text = f"POST with Authorization: Bearer {API_KEY}; key={API_KEY}; url redis://u:{PASSWORD}@h"
    redacted = redact(text, [API_KEY])
    assert PASSWORD not in redacted and API_KEY not in redacted
    assert redacted.count("***") == 3


@pytest.mark.fast
def test_what_goes_on_the_bus_keeps_ordinary_words(monkeypatch: pytest.MonkeyPatch) -> None:
    """A short configured value (a test's key "test") stays in an event's error and in
    what is printed, where it is likely a word of it (a path under /tmp/pytest-...);
    real secrets and URL passwords never do."""
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    monkeypatch.setenv("OTHER_API_KEY", API_KEY)
    text = f"no module tests.tooling; key {API_KEY}; at redis://:{PASSWORD}@h:1"
    assert scrub(text) == "no module tests.tooling; key ***; at redis://:***@h:1"
    assert redact(text) == scrub(text)  # what is printed: the same rule


def loopline(
    *args: str, env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loopline", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def wait_for_line(log: Path, text: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text():
        assert time.monotonic() < deadline, f"no {text!r} in: {log.read_text()}"
        time.sleep(0.1)


def test_serve_waits_for_redis_and_never_prints_the_password(tmp_path: Path) -> None:
    server = RedisServer(tmp_path, persistent=False, password=PASSWORD)
    prefix = f"secrets{os.getpid()}"
    env = {
        **os.environ,
        "REDIS_URL": server.url,
        "LOOPLINE_PREFIX": prefix,
        "LOOPLINE_REDIS_WAIT_S": "30",
        "OPENAI_API_KEY": API_KEY,
    }
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        serve = lifetime.spawn(
            [sys.executable, "-m", "loopline", "serve", "loop"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        # Redis is not up yet: the service waits (and says so), it does not exit
        wait_for_line(log, "waiting for Redis")
        time.sleep(1)
        assert serve.poll() is None, log.read_text()
        server.start()
        wait_for_line(log, "serving loop")
        status = loopline("status", env=env)
        wrong = loopline(
            "status", env={**env, "REDIS_URL": server.url.replace(PASSWORD, PASSWORD + "x")}
        )
    finally:
        serve.terminate()
        serve.wait(timeout=30)
        server.stop()
    printed = log.read_text()
    assert "waiting for Redis at redis://:***@127.0.0.1" in printed
    assert "serving loop on redis://:***@127.0.0.1" in printed
    assert status.returncode == 0, status.stderr
    assert wrong.returncode != 0 and wrong.stderr.strip()
    for text in (printed, status.stdout, status.stderr, wrong.stdout, wrong.stderr):
        assert PASSWORD not in text and API_KEY not in text


def test_serve_gives_up_after_the_wait_with_one_line(tmp_path: Path) -> None:
    server = RedisServer(tmp_path, persistent=False, password=PASSWORD)  # never started
    env = {**os.environ, "REDIS_URL": server.url, "LOOPLINE_REDIS_WAIT_S": "1"}
    started = time.monotonic()
    result = loopline("serve", "loop", env=env)
    assert result.returncode == 2
    assert time.monotonic() - started < 20
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("loopline: error: cannot reach Redis at redis://:***@127.0.0.1")
    assert PASSWORD not in result.stderr + result.stdout


def leaking_responder(scripts: dict[str, list[Reply]]) -> Any:
    """The scripted model, except that a prompt starting "leak model" makes the server
    fail with the API key in its error, as a provider echoing a bad key would."""
    by_prompt = responder_by_prompt(scripts)

    def respond(body: dict[str, Any]) -> Reply:
        if first_user_text(body).startswith("leak model"):
            raise RuntimeError(f"the key {API_KEY} is not valid")
        return by_prompt(body)

    return respond


async def test_no_secret_in_any_event_log_line_status_or_stats(tmp_path: Path) -> None:
    """Every service as a process on a password-protected Redis, with an API key: a tool
    that fails with the Redis URL in its error, a model call that fails with the key in
    the provider's error. Neither the password nor the key appears in the tasks' events,
    any service's log, `loopline status` or `loopline stats`; where they were, "***" is."""
    server = RedisServer(tmp_path, persistent=False, password=PASSWORD).start()
    scripts = {
        "leak tool": [
            Reply(tool_calls=(ScriptedToolCall("leak_redis_url", {}),)),
            Reply(content="told"),
        ]
    }
    spec = AgentSpec(model={"name": "gpt-4o-mini"}, tools=["tests.tooling:leak_redis_url"])  # type: ignore[arg-type]
    prefix = f"secrets{uuid.uuid4().hex[:8]}"
    try:
        with ScriptedOpenAIServer(responder=leaking_responder(scripts)) as model:
            env = {"OPENAI_BASE_URL": model.url, "OPENAI_API_KEY": API_KEY}
            with ServiceProcesses(server.url, prefix, env=env) as procs:
                async with Client(server.url, prefix) as client:
                    by_tool = await client.submit(spec, [HumanMessage(content="leak tool")])
                    by_model = await client.submit(spec, [HumanMessage(content="leak model")])
                    for failing in (by_tool, by_model):  # a tool's error fails its task
                        with pytest.raises(TaskFailedError):
                            await asyncio.wait_for(client.wait(failing), 60)
                    events = [
                        event.model_dump_json()
                        for task_id in (by_tool, by_model)
                        async for _, event in client.events(task_id, follow=False)
                    ]
                cli_env = {**os.environ, "REDIS_URL": server.url, "LOOPLINE_PREFIX": prefix}
                status = loopline("status", env=cli_env)
                stats = loopline("stats", env=cli_env)
                logs = [path.read_text() for path in procs.logs.values()]
    finally:
        server.stop()
    told = "\n".join(events)
    assert "cannot reach redis://:***@127.0.0.1" in told  # the tool's error, redacted
    assert "the key *** is not valid" in told  # the provider's error, redacted
    assert status.returncode == 0 and stats.returncode == 0, status.stderr + stats.stderr
    printed = [told, *logs]
    printed += [status.stdout, status.stderr, stats.stdout, stats.stderr]
    for text in printed:
        assert PASSWORD not in text and API_KEY not in text


# -- a whole run: no output holds either, stored keys and dead letters included --

SCRIPTS = {
    "secret task": [
        Reply(tool_calls=(ScriptedToolCall("add", {"a": 1, "b": 2}),)),
        Reply(content="3"),
    ],
    "quoting tool": [
        Reply(tool_calls=(ScriptedToolCall("quote_the_key", {}),)),
        Reply(content="no"),
    ],
}
AGENT = agent_from_dict(
    {"model": "gpt-4o-mini", "tools": ["tests.tooling:add", "tests.tooling:quote_the_key"]}
)[0]


def leaky_responder() -> Any:
    """The scripts, and an endpoint whose error quotes the key (as OpenAI's 401 does)."""
    scripted = responder_by_prompt(SCRIPTS)

    def respond(body: dict[str, Any]) -> Reply:
        if first_user_text(body).startswith("leaky endpoint"):
            raise RuntimeError(f"Incorrect API key provided: {API_KEY}")
        return scripted(body)

    return respond


def everything_stored(client: syncredis.Redis, prefix: str) -> bytes:
    """Every stream entry, hash, list, string, set and sorted set of the prefix."""
    out: list[bytes] = []
    for key in client.scan_iter(match=f"{prefix}:*"):
        kind = client.type(key)
        if kind == b"stream":
            out += [repr(fields).encode() for _, fields in client.xrange(key)]
        elif kind == b"hash":
            out.append(repr(client.hgetall(key)).encode())
        elif kind == b"list":
            out += client.lrange(key, 0, -1)
        elif kind == b"string":
            out.append(client.get(key) or b"")
        elif kind == b"set":
            out += list(client.smembers(key))
        elif kind == b"zset":
            out.append(repr(client.zrange(key, 0, -1, withscores=True)).encode())
    return b"\n".join(out)


async def run_tasks(url: str, prefix: str) -> list[Any]:
    async with Client(url, prefix) as client:
        ids = [
            await client.submit(AGENT, [HumanMessage(content=text)])
            for text in ("secret task", "quoting tool", "leaky endpoint")
        ]
        # a submission the loop refuses: a dead letter with its reason
        bad = TaskSubmitted(agent=AGENT, messages=[HumanMessage(content="x")])
        await client.redis.xadd(
            Names(prefix).tasks, {DATA_FIELD: bad.model_dump_json().replace('"x"', "1")}
        )
        return [(await client.outcome(task_id))[1] for task_id in ids]


def test_a_run_with_a_password_and_a_key_shows_neither_anywhere(tmp_path: Path) -> None:
    server = RedisServer(tmp_path, persistent=False, password=PASSWORD).start()
    prefix = unique_prefix()
    env = {"OPENAI_API_KEY": API_KEY, "LOOPLINE_ALLOW_INLINE_AGENTS": "true"}
    try:
        with ScriptedOpenAIServer(responder=leaky_responder()) as scripted:
            env["OPENAI_BASE_URL"] = scripted.url
            with ServiceProcesses(server.url, prefix, env=env) as procs:
                outcomes = asyncio.run(run_tasks(server.url, prefix))
                time.sleep(1)  # the dead letter is committed
                logs = "\n".join(p.read_text(errors="replace") for p in procs.logs.values())
        cli_env = {**os.environ, "REDIS_URL": server.url, "LOOPLINE_PREFIX": prefix}
        printed = [
            loopline(*args, env=cli_env)
            for args in (
                ("status",),
                ("status", "--json"),
                ("stats",),
                ("stats", "--json"),
                ("dlq", "list"),
            )
        ]
        admin = syncredis.Redis.from_url(server.url)
        stored = everything_stored(admin, prefix).decode(errors="replace")
        letters = admin.xlen(Names(prefix).dlq)
        admin.close()
    finally:
        server.stop()
    done, quoted, leaky = outcomes
    assert isinstance(done, TaskCompleted) and done.answer == "3"
    assert isinstance(quoted, TaskFailed)  # with the tool's error, masked
    assert quoted.exception is not None
    assert quoted.exception.message == "cannot call the service with key ***"
    assert "cannot call the service with key ***" in stored
    assert isinstance(leaky, TaskFailed) and "Incorrect API key provided: ***" in leaky.reason
    assert letters >= 1
    assert all(p.returncode == 0 for p in printed), [p.stderr for p in printed]
    outputs = [logs, stored, *(p.stdout + p.stderr for p in printed)]
    for text in outputs:
        assert PASSWORD not in text and API_KEY not in text

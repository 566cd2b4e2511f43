"""No password, API key or token in what loopline prints, and services that wait for
Redis at start instead of exiting. A password-protected redis-server of the test's own;
``loopline serve`` and ``loopline status`` as a user runs them."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis as syncredis

from contracts import HumanMessage, TaskCompleted, TaskFailed
from contracts.events import TaskSubmitted
from contracts.streams import DATA_FIELD, Names
from loopline import lifetime
from loopline.agentfile import agent_from_dict
from loopline.client import Client
from loopline.testing.redis_server import RedisServer
from loopline.testing.scripted import (
    Reply,
    ScriptedOpenAIServer,
    ScriptedToolCall,
    first_user_text,
    responder_by_prompt,
)
from services.secrets import redact, redact_url
from tests.support import ServiceProcesses, unique_prefix

PASSWORD = "S3cretPass-7q"
API_KEY = "sk-test-Zk39aPq0x"


def test_urls_and_texts_are_redacted() -> None:
    assert redact_url(f"redis://:{PASSWORD}@127.0.0.1:6379/0") == "redis://:***@127.0.0.1:6379/0"
    assert redact_url(f"rediss://alice:{PASSWORD}@h:1") == "rediss://alice:***@h:1"
    assert redact_url("redis://127.0.0.1:6379") == "redis://127.0.0.1:6379"
    text = f"POST with Authorization: Bearer {API_KEY}; key={API_KEY}; url redis://u:{PASSWORD}@h"
    redacted = redact(text, [API_KEY])
    assert PASSWORD not in redacted and API_KEY not in redacted
    assert redacted.count("***") == 3


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


# -- a whole run with a Redis password and an API key: no output holds either --

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
    assert isinstance(quoted, TaskCompleted)  # the model read the tool's error, masked
    assert "cannot call the service with key ***" in stored
    assert isinstance(leaky, TaskFailed) and "Incorrect API key provided: ***" in leaky.reason
    assert letters >= 1
    assert all(p.returncode == 0 for p in printed), [p.stderr for p in printed]
    outputs = [logs, stored, *(p.stdout + p.stderr for p in printed)]
    for text in outputs:
        assert PASSWORD not in text and API_KEY not in text

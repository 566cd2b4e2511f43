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

from contracts import AgentSpec, HumanMessage
from loopline import lifetime
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
    """A short configured value (a test's key "test") stays in an event's error, where
    it is likely a word of it; real secrets and URL passwords never do."""
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    monkeypatch.setenv("OTHER_API_KEY", API_KEY)
    text = f"no module tests.tooling; key {API_KEY}; at redis://:{PASSWORD}@h:1"
    assert scrub(text) == "no module tests.tooling; key ***; at redis://:***@h:1"
    assert "test" not in redact(text).replace("***", "")  # what is printed hides it all


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
                    await asyncio.wait_for(client.wait(by_tool), 60)
                    with pytest.raises(TaskFailedError):
                        await asyncio.wait_for(client.wait(by_model), 60)
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

"""No password, API key or token in what loopline prints, and services that wait for
Redis at start instead of exiting. A password-protected redis-server of the test's own;
``loopline serve`` and ``loopline status`` as a user runs them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loopline import lifetime
from loopline.testing.redis_server import RedisServer
from services.secrets import redact, redact_url

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

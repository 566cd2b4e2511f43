"""The Docker engine that the container tests (``docker`` marker) need, and when they run.

The tests never start an engine themselves. They run when one answers (``docker info``);
when none answers they skip, saying why, unless the run asks for them with
``LOOPLINE_TEST_DOCKER=1`` (CI does, after starting an engine): then a missing engine or
compose command fails them, so a broken CI engine cannot pass as a skip."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

ASK_ENV = "LOOPLINE_TEST_DOCKER"
"""Set to 1 to make the Docker tests fail, not skip, where no engine answers."""


def run(
    cmd: Sequence[str],
    *,
    timeout: float,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """A command to its end, its output captured, never reading the test's stdin."""
    return subprocess.run(
        list(cmd),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def tail(text: str, chars: int = 3000) -> str:
    return text[-chars:].strip()


def docker_asked() -> bool:
    return os.environ.get(ASK_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def engine_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return run(["docker", "info"], timeout=30).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def compose_command() -> list[str] | None:
    """docker-compose (v1) or the `docker compose` v2 plugin, whichever answers."""
    for cmd in (["docker-compose"], ["docker", "compose"]):
        if shutil.which(cmd[0]) is None:
            continue
        with contextlib.suppress(subprocess.TimeoutExpired):
            if run([*cmd, "version"], timeout=30).returncode == 0:
                return cmd
    return None


def require_compose() -> list[str]:
    """The compose command of an engine that answers; else skip with the reason, or fail
    when the run asked for the Docker tests."""
    if not engine_answers():
        problem = "no Docker engine answers (`docker info` failed)"
    else:
        cmd = compose_command()
        if cmd is not None:
            return cmd
        problem = "a Docker engine answers, but neither docker-compose nor `docker compose` runs"
    if docker_asked():
        pytest.fail(f"{ASK_ENV}=1 asks for the Docker tests, but {problem}", pytrace=False)
    pytest.skip(f"{problem}: start one to run this test ({ASK_ENV}=1 makes this a failure)")

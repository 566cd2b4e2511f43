"""README "Deploy", as a user meets it: the section's compose commands run as written on a
copy of the repository (where a Docker engine answers: ``tests/docker_engine.py``), the
compose files say what the section says (a plain ``up`` calls a real endpoint, the demo
overlay points the model at the scripted server, each service is its own ACL user), and a
model endpoint that cannot be reached is named in the task's failure."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from contracts.streams import SERVICES
from loopline import acl
from loopline.demo import DEMO_TURNS
from loopline.testing.processes import free_port
from tests.docker_engine import run, tail
from tests.support import REPO_ROOT

README = REPO_ROOT / "README.md"


def section(text: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading of the same or a higher level."""
    level = heading.split(" ", 1)[0]
    start = text.index(f"\n{heading}\n") + len(heading) + 2
    same_or_higher = r"\n#{1," + str(len(level)) + "} "
    ends = [m.start() for m in re.finditer(same_or_higher, text[start:])]
    return text[start : start + ends[0]] if ends else text[start:]


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def compose_block() -> str:
    """The first bash block of README Deploy / With docker compose: the one the user
    copies to try a deployment."""
    deploy = section(README.read_text(), "## Deploy")
    return bash_blocks(section(deploy, "### With docker compose"))[0]


def load(path: Path) -> dict[str, Any]:
    return dict(yaml.safe_load(path.read_text()))


# -- the compose files say what the section says ----------------------------------------------


@pytest.mark.fast
def test_plain_up_calls_a_real_endpoint_and_the_demo_overlay_the_scripted_model() -> None:
    base = load(REPO_ROOT / "docker-compose.yml")
    demo = load(REPO_ROOT / "deploy" / "compose.demo.yml")
    services = base["services"]
    assert not [name for name, s in services.items() if s.get("profiles")]  # no profiles
    assert "scripted" not in services
    model_env = services["model"]["environment"]
    assert model_env["OPENAI_BASE_URL"] == "${OPENAI_BASE_URL:-https://api.openai.com/v1}"
    # the overlay adds the scripted server and points the model service at its port
    scripted = demo["services"]["scripted"]
    port = scripted["command"][scripted["command"].index("--port") + 1]
    assert demo["services"]["model"]["environment"]["OPENAI_BASE_URL"] == (
        f"http://scripted:{port}/v1"
    )
    readme = section(README.read_text(), "## Deploy")
    assert "export COMPOSE_FILE=docker-compose.yml:deploy/compose.demo.yml" in readme


@pytest.mark.fast
def test_each_compose_service_is_its_own_acl_user_of_the_file_redis_reads() -> None:
    services = load(REPO_ROOT / "docker-compose.yml")["services"]
    for name in SERVICES:
        url = services[name]["environment"]["REDIS_URL"]
        assert url.startswith(f"redis://${{LOOPLINE_PREFIX:-loopline}}-{name}:")
        assert f"${{LOOPLINE_ACL_{name.upper()}_PASSWORD:?" in url
        assert url.endswith("@redis:6379/0")
    writer = services["acl"]
    assert "loopline acl --aclfile --lock-default > /acl/" in writer["command"][-1]
    (volume,) = [v.split(":") for v in writer["volumes"]]
    redis = services["redis"]
    command = redis["command"]
    aclfile = command[command.index("--aclfile") + 1]
    mounts = {v.split(":")[0]: v.split(":")[1] for v in redis["volumes"]}
    assert aclfile == f"{mounts[volume[0]]}/users.acl"
    assert redis["depends_on"]["acl"]["condition"] == "service_completed_successfully"
    # every role's password is required where the file is written
    required = {k: v for k, v in writer["environment"].items() if k.startswith("LOOPLINE_ACL_")}
    assert len(required) == len(acl.ROLES)
    for variable, value in required.items():
        assert value.startswith(f"${{{variable}:?set the ACL passwords first"), value


# -- a model endpoint that cannot be reached --------------------------------------------------


def test_a_model_endpoint_that_cannot_be_reached_is_named_in_the_failure(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    agent = tmp_path / "agent.yaml"
    agent.write_text("name: unreachable\nmodel: gpt-4o-mini\n")
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "LOOPLINE_MODELS")}
    env.update(
        OPENAI_BASE_URL=f"http://127.0.0.1:{port}/v1",
        OPENAI_API_KEY="unused",
        PYTHONPATH=str(REPO_ROOT),
    )
    done = subprocess.run(
        [sys.executable, "-m", "loopline", "run", "hello", "--agent", str(agent)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert f"POST http://127.0.0.1:{port}/v1/chat/completions" in output, output
    assert "Connect" in output  # the root cause: the connection was refused


# -- the section's commands, on a Docker engine -----------------------------------------------


def repository_copy(into: Path) -> Path:
    """The work tree's files as git sees them (tracked and new, not ignored): what a user
    who cloned it has, without their .env or build output."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO_ROOT / name
        if source.is_file():
            target = into / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
    return into


def user_shell(copy: Path, project: str, compose_cmd: list[str], bin_dir: Path) -> dict[str, str]:
    """A user's shell: none of this session's loopline, compose or Redis settings; the
    CLI of this tree on PATH; docker-compose (or a stand-in for `docker compose`)."""
    dropped = ("LOOPLINE_", "COMPOSE_", "REDIS_", "OPENAI_", "DOCKER_HOST_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    if compose_cmd != ["docker-compose"]:
        shim = bin_dir / "docker-compose"
        shim.write_text('#!/bin/sh\nexec docker compose "$@"\n')
        shim.chmod(0o755)
    path = [str(bin_dir), str(Path(sys.executable).parent), env.get("PATH", "")]
    env.update(
        PATH=os.pathsep.join(path),
        PYTHONPATH=str(copy),
        COMPOSE_PROJECT_NAME=project,
        LOOPLINE_REDIS_PORT=str(free_port()),
        # the README's ports may be taken on a shared machine (2024 is, on some)
        LOOPLINE_API_PORTS=str(free_port()),
    )
    return env


@pytest.mark.docker
@pytest.mark.timeout(2400)
def test_the_deploy_sections_compose_commands_run_as_written(
    compose_cmd: list[str], tmp_path: Path
) -> None:
    block = compose_block()
    copy = repository_copy(tmp_path / "loopline")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    project = f"loopline-readme-{uuid.uuid4().hex[:8]}"
    env = user_shell(copy, project, compose_cmd, bin_dir)
    script = tmp_path / "deploy.sh"
    script.write_text(block)
    try:
        done = run(["bash", "-euo", "pipefail", str(script)], timeout=2100, env=env, cwd=copy)
        output = done.stdout + done.stderr
        assert done.returncode == 0, f"the block exited {done.returncode}:\n{tail(output, 8000)}"
        answer = DEMO_TURNS[-1].content
        assert answer and answer in done.stdout, tail(output, 8000)
        # the scale line started two more tools replicas
        assert re.search(rf"{project}_tools_3\b.*done", output) or f"{project}-tools-3" in output
        # and down -v left nothing of the project behind
        left = run(
            ["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={project}"],
            timeout=60,
        )
        assert left.stdout.strip() == "", left.stdout
        assert (copy / ".env").read_text().count("LOOPLINE_ACL_") == len(acl.ROLES)
    finally:
        cleanup = "export COMPOSE_FILE=docker-compose.yml:deploy/compose.demo.yml\n"
        cleanup += "docker-compose down -v --remove-orphans -t 5\n"
        run(["bash", "-c", cleanup], timeout=300, env=env, cwd=copy)

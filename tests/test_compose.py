"""The docker-compose deployment, for real: build the image (deploy/Dockerfile), start Redis
with its ACL users and one container per service, each as its own user, with the scripted
model (the demo overlay, deploy/compose.demo.yml); the operator runs a task from the host
with the CLI; then scale the tools service to three replicas and check that every replica
takes work and nothing restarts.

Needs a Docker engine and docker-compose (v1) or `docker compose` (v2): it runs when one
answers, skips saying so when none does, and fails then when asked to run
(``LOOPLINE_TEST_DOCKER=1``; ``tests/docker_engine.py``). It never starts an engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
import redis

from contracts.messages import HumanMessage
from contracts.streams import GROUPS, SERVICES, Names
from loopline import acl
from loopline.agentfile import agent_from_dict
from loopline.client import Client
from loopline.testing.processes import free_port
from tests.docker_engine import run as _run
from tests.docker_engine import tail as _tail

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

REPO_ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
DEMO_OVERLAY = REPO_ROOT / "deploy" / "compose.demo.yml"
ONE_SHOT = {"acl"}
"""Services that run once and exit 0 (Redis's ACL file is written before Redis starts)."""

# The scripted model's turns, the same for every task (the server picks a turn by the
# number of assistant messages in the request): three parallel `add` calls, then
# WHERE_CALLS parallel `where` calls (which name the container that ran them), then the
# answer.
ADDS = ((1, 2), (3, 4), (5, 6))
WHERE_CALLS = 8
ANSWER = "1 + 2 = 3, 3 + 4 = 7 and 5 + 6 = 11."
SCRIPT: list[dict[str, Any]] = [
    {
        "content": "Adding the three pairs at once.",
        "tool_calls": [{"name": "add", "args": {"a": a, "b": b}} for a, b in ADDS],
    },
    {
        "content": "Checking where the tools run.",
        "tool_calls": [{"name": "where", "args": {"x": i}} for i in range(WHERE_CALLS)],
    },
    {"content": ANSWER},
]
AGENT: dict[str, Any] = {
    "name": "compose-test",
    "model": "gpt-4o-mini",
    "tools": ["tests.tooling:add", "tests.compose_tools:where"],
    "system_prompt": "You add numbers.",
}
TOOL_MODULES = ["tests.tooling", "tests.compose_tools"]
SCALED_TASKS = 12
TOOLS_REPLICAS = 3

# -- the deployment ---------------------------------------------------------------------------


@dataclass
class Deployment:
    """One compose project: its own name, Redis port and stream prefix."""

    base: list[str]
    env: dict[str, str]
    project: str
    prefix: str
    redis_url: str
    figures: dict[str, float] = field(default_factory=dict)

    def compose(self, *args: str, timeout: float = 300) -> str:
        proc = _run([*self.base, *args], timeout=timeout, env=self.env, cwd=REPO_ROOT)
        if proc.returncode != 0:
            raise AssertionError(
                f"`{' '.join(['compose', *args])}` exited {proc.returncode}:\n"
                f"{_tail(proc.stdout + proc.stderr, 6000)}"
            )
        return proc.stdout

    def containers(self) -> list[dict[str, Any]]:
        """`docker inspect` of every container of the project, stopped ones included."""
        ids = _run(
            [
                "docker",
                "ps",
                "-aq",
                "--filter",
                f"label=com.docker.compose.project={self.project}",
            ],
            timeout=60,
        ).stdout.split()
        if not ids:
            return []
        proc = _run(["docker", "inspect", *ids], timeout=60)
        return cast(list[dict[str, Any]], json.loads(proc.stdout or "[]"))

    def describe(self) -> str:
        """What to read when something went wrong: states and the services' last lines."""
        states = "\n".join(
            f"  {_service(c)} {c['Name']} {c['State']['Status']} health={_health(c)} "
            f"restarts={c['RestartCount']}"
            for c in self.containers()
        )
        logs = _run([*self.base, "logs", "--no-color", "--tail", "60"], timeout=60, env=self.env)
        return f"containers:\n{states}\nlogs:\n{_tail(logs.stdout, 12000)}"

    def wait_ready(self, replicas: dict[str, int], timeout: float = 240) -> None:
        """Ready = each service's containers run and are healthy, and each of them has
        announced its consumers in ``<prefix>:consumers`` (its stream readers started).
        Not XINFO CONSUMERS: Redis 7.0 lists a consumer only after its first delivery."""
        expected = {"redis": 1, "scripted": 1, **{name: 1 for name in SERVICES}, **replicas}
        client = redis.Redis.from_url(self.redis_url, decode_responses=True)
        deadline = time.monotonic() + timeout
        waiting = "nothing yet"
        try:
            while time.monotonic() < deadline:
                containers = self.containers()
                exited = [
                    c["Name"]
                    for c in containers
                    if c["State"]["Status"] == "exited"
                    and not (_service(c) in ONE_SHOT and c["State"]["ExitCode"] == 0)
                ]
                if exited:
                    raise AssertionError(f"containers exited: {exited}\n{self.describe()}")
                running = [c for c in containers if c["State"]["Running"]]
                healthy = Counter(_service(c) for c in running if _health(c) == "healthy")
                hosts = {str(c["Config"]["Hostname"]): _service(c) for c in running}
                announced = Counter(
                    info["service"]
                    for info in _announced(client, self.prefix).values()
                    if hosts.get(info["host"]) == info["service"]
                )
                waiting = ", ".join(
                    [
                        f"{name}: {healthy[name]}/{count} healthy"
                        for name, count in expected.items()
                        if healthy[name] < count
                    ]
                    + [
                        f"{name}: {announced[name]}/{expected[name]} announced"
                        for name in SERVICES
                        if announced[name] < expected[name]
                    ]
                )
                if not waiting:
                    return
                time.sleep(1)
        finally:
            client.close()
        raise AssertionError(
            f"deployment not ready in {timeout:.0f} s: {waiting}\n{self.describe()}"
        )


def _announced(client: redis.Redis, prefix: str) -> dict[str, dict[str, Any]]:
    """Consumer name -> {service, pid, host, started}, as the running services announce."""
    raw = client.hgetall(Names(prefix).consumers)
    return {str(name): json.loads(value) for name, value in raw.items()}


def _service(container: dict[str, Any]) -> str:
    return str(container["Config"]["Labels"].get("com.docker.compose.service", "?"))


def _health(container: dict[str, Any]) -> str:
    health = container["State"].get("Health")
    return str(health["Status"]) if health else "none"


def _consumers(client: redis.Redis, stream: str, group: str) -> list[dict[str, Any]]:
    try:
        return client.xinfo_consumers(stream, group)
    except redis.ResponseError:  # the stream or group is not there yet
        return []


@pytest.fixture(scope="module")
def deployment(
    compose_cmd: list[str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    """A compose project of its own (name, Redis port, prefix, passwords), its services
    each under its own ACL user, and the operator's URL for the test."""
    project = f"loopline-test-{uuid.uuid4().hex[:8]}"
    prefix = f"compose{uuid.uuid4().hex[:8]}"
    port = free_port()
    # The test's own additions, in an override file: the scripted model replays SCRIPT
    # (given as JSON in the environment: no bind mount of host files), and each tools
    # replica takes one call at a time, so the calls spread over the replicas for sure.
    override = tmp_path_factory.mktemp("compose") / "compose.test.yml"
    override.write_text(
        json.dumps(
            {
                "services": {
                    "scripted": {
                        "environment": {"LOOPLINE_TEST_SCRIPT": json.dumps(SCRIPT)},
                        "command": [
                            "sh",
                            "-c",
                            'printf "%s" "$$LOOPLINE_TEST_SCRIPT" > /tmp/script.json && '
                            "exec python -m loopline.testing.scripted --host 0.0.0.0 --port 8000 "
                            "--script /tmp/script.json",
                        ],
                    },
                    "tools": {
                        "environment": {
                            "LOOPLINE_CONCURRENCY_TOOLS": "1",
                            "LOOPLINE_READ_BATCH": "1",
                        }
                    },
                }
            },
            indent=2,
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPOSE_")}
    passwords = acl.new_passwords()  # as `loopline acl --new-passwords > .env` writes them
    env.update(passwords)
    env["LOOPLINE_POSTGRES_PASSWORD"] = secrets.token_hex(24)  # the threads' PostgreSQL
    env.update(
        LOOPLINE_PREFIX=prefix,
        LOOPLINE_REDIS_PORT=str(port),
        LOOPLINE_API_PORTS=str(free_port()),  # the HTTP gateway's host port
        LOOPLINE_TOOL_MODULES=json.dumps(TOOL_MODULES),
        # a locked deployment: deployed agents only, the test's tool modules allowed (the
        # test session's own defaults, which compose would pass on, are not the point)
        LOOPLINE_ALLOW_INLINE_AGENTS="false",
        LOOPLINE_ALLOWED_MODULES="tests",
        OPENAI_BASE_URL="http://scripted:8000/v1",
        OPENAI_API_KEY="unused",
    )
    base = [
        *compose_cmd,
        "-p",
        project,
        "-f",
        str(COMPOSE_FILE),
        "-f",
        str(DEMO_OVERLAY),
        "-f",
        str(override),
    ]
    operator = f"{acl.user_name(prefix, 'operator')}:{passwords['LOOPLINE_ACL_OPERATOR_PASSWORD']}"
    dep = Deployment(base, env, project, prefix, f"redis://{operator}@127.0.0.1:{port}/0")
    try:
        began = time.monotonic()
        dep.compose("build", timeout=1200)
        dep.figures["build_s"] = time.monotonic() - began
        began = time.monotonic()
        dep.compose("up", "-d", timeout=600)
        dep.wait_ready({})
        dep.figures["ready_s"] = time.monotonic() - began
        print(
            f"\n[compose] project {project}: image built in {dep.figures['build_s']:.1f} s, "
            f"deployment ready in {dep.figures['ready_s']:.1f} s (Redis on 127.0.0.1:{port})"
        )
        yield dep
    finally:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc = _run(
                [*base, "down", "-v", "--remove-orphans", "-t", "10"],
                timeout=300,
                env=env,
                cwd=REPO_ROOT,
            )
            if proc.returncode != 0:
                print(f"[compose] down exited {proc.returncode}: {_tail(proc.stderr, 800)}")


@contextlib.contextmanager
def explained(dep: Deployment) -> Iterator[None]:
    """On failure, print the containers' states and logs beside the assertion."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            print(dep.describe())
        raise


def _tool_texts(messages: list[dict[str, Any]], name: str) -> list[str]:
    return [
        str(m["content"]) for m in messages if m.get("type") == "tool" and m.get("name") == name
    ]


def _hostnames(dep: Deployment, service: str) -> set[str]:
    return {
        str(c["Config"]["Hostname"])
        for c in dep.containers()
        if _service(c) == service and c["State"]["Running"]
    }


# -- tests -------------------------------------------------------------------------------------


def test_a_task_runs_from_the_host_on_the_compose_deployment(
    deployment: Deployment, tmp_path: Path
) -> None:
    agent_file = tmp_path / "agent.json"
    agent_file.write_text(json.dumps(AGENT))
    env = {
        **os.environ,
        "REDIS_URL": deployment.redis_url,
        "LOOPLINE_PREFIX": deployment.prefix,
        "OPENAI_API_KEY": "unused",  # the host never calls the model; the CLI wants one set
        "PYTHONPATH": str(REPO_ROOT),
    }
    with explained(deployment):
        cmd = [sys.executable, "-m", "loopline", "run", "add three pairs", "--json"]
        proc = _run(
            [*cmd, "--agent", str(agent_file)],
            timeout=180,
            env=env,
            cwd=REPO_ROOT,
        )
        assert proc.returncode == 0, f"loopline run exited {proc.returncode}: {proc.stderr}"
        result = json.loads(proc.stdout)
        assert result["status"] == "completed", result.get("error")
        assert result["answer"] == ANSWER
        assert sorted(_tool_texts(result["messages"], "add"), key=int) == ["3", "7", "11"]
        # One tools replica so far: it ran every `where` call.
        assert (
            _tool_texts(result["messages"], "where")
            == [*_hostnames(deployment, "tools")] * WHERE_CALLS
        )
    print(f"[compose] host-side `loopline run --json`: task {result['task_id']} completed")


def test_redis_admits_only_the_acl_users_and_each_service_is_its_own(
    deployment: Deployment,
) -> None:
    names = Names(deployment.prefix)
    port = deployment.redis_url.rsplit(":", 1)[1].split("/")[0]
    anonymous = redis.Redis(port=int(port))
    producer = redis.Redis.from_url(
        deployment.redis_url.replace(
            f"{deployment.prefix}-operator:{deployment.env['LOOPLINE_ACL_OPERATOR_PASSWORD']}",
            f"{deployment.prefix}-producer:{deployment.env['LOOPLINE_ACL_PRODUCER_PASSWORD']}",
        )
    )
    try:
        assert anonymous.ping()  # the health check's one right
        with pytest.raises(redis.exceptions.NoPermissionError):
            anonymous.xlen(names.tasks)
        assert producer.exists(names.deployed) == 1  # the agent the first test deployed
        with pytest.raises(redis.exceptions.NoPermissionError):
            producer.xadd(names.model, {"data": "{}"})
    finally:
        anonymous.close()
        producer.close()
    for service in SERVICES:
        logs = deployment.compose("logs", "--no-color", service)
        assert f"serving {service} on redis://{deployment.prefix}-{service}:***@redis:6379" in logs


def test_three_tools_replicas_share_the_work_and_nothing_restarts(
    deployment: Deployment,
) -> None:
    with explained(deployment):
        deployment.compose("up", "-d", "--scale", f"tools={TOOLS_REPLICAS}", "--no-recreate")
        deployment.wait_ready({"tools": TOOLS_REPLICAS})
        replicas = _hostnames(deployment, "tools")
        assert len(replicas) == TOOLS_REPLICAS

        spec, _ = agent_from_dict(AGENT)

        async def deployed() -> str:  # the operator's path: tasks then name the agent
            async with Client(deployment.redis_url, deployment.prefix) as operator:
                return (await operator.deploy(spec, name="compose-scaled")).ref

        agent = asyncio.run(deployed())

        async def run_all() -> list[list[dict[str, Any]]]:
            async with Client(deployment.redis_url, deployment.prefix) as client:

                async def one(i: int) -> list[dict[str, Any]]:
                    task_id = await client.submit(agent, [HumanMessage(content=f"task {i}")])
                    done = await client.wait(task_id)
                    assert done.answer == ANSWER
                    return [m.model_dump(mode="json") for m in await client.messages(task_id)]

                return await asyncio.wait_for(
                    asyncio.gather(*(one(i) for i in range(SCALED_TASKS))), timeout=300
                )

        began = time.monotonic()
        transcripts = asyncio.run(run_all())
        elapsed = time.monotonic() - began

        for messages in transcripts:
            assert sorted(_tool_texts(messages, "add"), key=int) == ["3", "7", "11"]
        calls = Counter(host for m in transcripts for host in _tool_texts(m, "where"))
        assert sum(calls.values()) == SCALED_TASKS * WHERE_CALLS
        assert set(calls) == replicas, f"calls per replica: {dict(calls)}, replicas: {replicas}"

        # Redis 7.0 lists a consumer in XINFO CONSUMERS only after a delivery to it: the
        # group's consumers are the three announced tools consumers, none with work left
        # (an entry is acked just after its result is published: allow that moment).
        client = redis.Redis.from_url(deployment.redis_url, decode_responses=True)
        try:
            names = Names(deployment.prefix)
            deadline = time.monotonic() + 10
            consumers = _consumers(client, names.tools, GROUPS["tools"])
            while any(int(c["pending"]) for c in consumers) and time.monotonic() < deadline:
                time.sleep(0.2)
                consumers = _consumers(client, names.tools, GROUPS["tools"])
            announced = {
                name
                for name, info in _announced(client, deployment.prefix).items()
                if info["service"] == "tools"
            }
            dead_letters = client.xlen(names.dlq)
        finally:
            client.close()
        assert {str(c["name"]) for c in consumers} == announced, (consumers, announced)
        assert len(consumers) == TOOLS_REPLICAS, consumers
        assert all(int(c["pending"]) == 0 for c in consumers), consumers
        assert dead_letters == 0

        containers = deployment.containers()
        restarts = {c["Name"]: int(c["RestartCount"]) for c in containers}
        not_running = [
            c["Name"]
            for c in containers
            if not c["State"]["Running"] and _service(c) not in ONE_SHOT
        ]
        assert not not_running, f"not running: {not_running}"
        assert all(n == 0 for n in restarts.values()), f"restarts: {restarts}"

    per_replica = ", ".join(f"{host}: {n}" for host, n in sorted(calls.items()))
    print(
        f"[compose] {SCALED_TASKS} tasks completed in {elapsed:.1f} s with "
        f"{TOOLS_REPLICAS} tools replicas; replicas that took work: {len(calls)} of "
        f"{TOOLS_REPLICAS} (`where` calls per replica: {per_replica}); "
        f"{len(containers)} containers, 0 restarts, 0 dead letters"
    )

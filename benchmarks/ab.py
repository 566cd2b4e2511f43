"""Before/after in one run: the services of other source trees against this one.

``python -m benchmarks.ab REV [REV ...] [--rounds N]`` exports each git revision (``git
archive``) to a temporary directory, and runs, interleaved in rounds so that every tree
sees the same machine: single-task step latency (3 tasks of 25 model calls), throughput
(200 tasks × 10 model calls) and the CPU time of the service processes and Redis per
step (/proc). A path to a source tree works in place of a revision. LangChain in-process
is measured in the same rounds for reference. The table is printed and written to
``benchmarks/results/ab.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from benchmarks import loopline_side as ll
from benchmarks import suite
from benchmarks.stack import REPO_ROOT, RedisServer, Services, drop_prefix, fake_agent, new_prefix
from contracts.streams import Names
from loopline import lifetime
from loopline.client import Client
from services.app import tune_gc
from services.settings import Settings


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def export(rev: str, into: Path) -> Path:
    """A source tree of ``rev`` with this tree's benchmark tools (the services import them)."""
    if Path(rev).is_dir():
        return Path(rev)
    target = into / rev.replace("/", "_")
    target.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "archive", rev], cwd=REPO_ROOT, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    (target / "benchmarks").mkdir(exist_ok=True)
    for name in ("__init__.py", "tools.py"):
        shutil.copy(REPO_ROOT / "benchmarks" / name, target / "benchmarks" / name)
    return target


async def one_tree(server: RedisServer, root: Path, out: dict[str, list[float]]) -> None:
    url, prefix = server.url, new_prefix()
    names = Names(prefix)
    with Services(url, prefix, root=root) as services:
        client = Client(url, prefix)
        try:
            await suite._loopline_task_steps(client, 5, "warm-up")
            for t in range(3):
                out["steps"] += await suite._loopline_task_steps(client, 25, f"t{t}")
        finally:
            await client.close()
        redis = aioredis.Redis.from_url(url)
        pids = [p.pid for p in services.procs.values()]
        if server.pid:
            pids.append(server.pid)
        before = sum(_cpu_s(p) for p in pids)
        try:
            ids, started = await ll.submit_many(redis, names, fake_agent(10), 200, max_steps=11)
            await ll.wait_done(redis, names, ids, timeout=600, interval=0.05)
            ends = await ll.finish_times(redis, names, ids)
        finally:
            await redis.aclose()
        out["throughput"].append(2000 / (max(ends) - started))
        out["cpu_ms"].append((sum(_cpu_s(p) for p in pids) - before) * 1000 / 2000)
    drop_prefix(url, prefix)


async def run(trees: dict[str, Path], rounds: int) -> dict[str, dict[str, list[float]]]:
    server = RedisServer().start()
    results = {name: {"steps": [], "throughput": [], "cpu_ms": []} for name in trees}
    results["LangChain in-process"] = {"steps": [], "throughput": [], "cpu_ms": []}
    try:
        for r in range(rounds):
            for name, root in trees.items():
                await one_tree(server, root, results[name])
            lc = results["LangChain in-process"]
            for t in range(3):
                lc["steps"] += await suite._langchain_task_steps(25, f"r{r} t{t}")
            lc["throughput"].append(await suite._langchain_throughput(200, 10))
            print(f"round {r + 1} of {rounds} done", file=sys.stderr)
    finally:
        server.stop()
    return results


def table(results: dict[str, dict[str, list[float]]]) -> str:
    lines = [
        "| tree | step p50 (ms) | step p99 (ms) | steps/s (200 tasks) | CPU ms / step |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        cpu = f"{statistics.median(r['cpu_ms']):.2f}" if r["cpu_ms"] else "—"
        lines.append(
            f"| {name} | {suite.pct(r['steps'], 50) * 1000:.2f} | "
            f"{suite.pct(r['steps'], 99) * 1000:.2f} | "
            f"{statistics.median(r['throughput']):.0f} | {cpu} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ab", description=__doc__)
    parser.add_argument("revs", nargs="+", help="git revisions or source tree paths")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    tmp = lifetime.temporary_directory("loopline-ab-")  # goes with this process, however
    try:
        trees: dict[str, Any] = {rev: export(rev, tmp) for rev in args.revs}
        trees["working tree"] = REPO_ROOT
        tune_gc(Settings().gc_threshold)  # the LangChain reference gets the services' GC
        text = table(asyncio.run(run(trees, args.rounds)))
    finally:
        lifetime.remove_now(tmp)
    print(text)
    out = Path(__file__).parent / "results" / "ab.md"
    out.write_text(f"# `python -m benchmarks.ab {' '.join(args.revs)}`\n\n{text}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

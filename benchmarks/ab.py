"""Before/after in one run: the services of other source trees against this one.

``python -m benchmarks.ab REV [REV ...] [--rounds N] [--replicas N]`` exports each git
revision (``git archive``) to a temporary directory, and runs, interleaved in rounds so
that every tree sees the same machine: single-task step latency (3 tasks of 25 model
calls), throughput (200 tasks × 10 model calls) and the CPU time of the service processes
and Redis per step (/proc). A path to a source tree works in place of a revision.
``--replicas N`` also runs this tree with N replicas of each service. LangChain in-process
is measured in the same rounds for reference, with its CPU per step (this process's CPU
time over its throughput run), and so is the floor: LangChain's own code for a step's
model call and tool call alone (``suite.floor_cpu_ms``). The table is printed and written to
``benchmarks/results/ab.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import suite
from benchmarks.stack import REPO_ROOT, RedisServer, Services, drop_prefix, new_prefix
from loopline import lifetime
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
    for name in ("__init__.py", "tools.py", "ab_client.py"):
        shutil.copy(REPO_ROOT / "benchmarks" / name, target / "benchmarks" / name)
    return target


def tree_client(root: Path, what: str, url: str, prefix: str) -> Any:
    """Run ``benchmarks.ab_client`` with the tree's own code: its services speak its own
    contracts (a newer client's events are refused by an older tree's services)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.ab_client", what, url, prefix],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{root}: ab_client {what} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def _cpu_by_process(services: Services, server: RedisServer) -> dict[str, float]:
    """CPU seconds so far of each service process and of Redis."""
    used = services.cpu_s()
    if server.pid:
        used["redis"] = _cpu_s(server.pid)
    return used


async def one_tree(
    server: RedisServer, root: Path, out: dict[str, list[float]], replicas: int = 1
) -> None:
    url, prefix = server.url, new_prefix()
    with Services(url, prefix, root=root, replicas=replicas) as services:
        loop = asyncio.get_running_loop()
        out["steps"] += await loop.run_in_executor(None, tree_client, root, "steps", url, prefix)
        if "commands" not in out:  # a count: once per tree is enough
            out["commands"] = await loop.run_in_executor(
                None, tree_client, root, "commands", url, prefix
            )
        before = _cpu_by_process(services, server)
        steps_per_s = await loop.run_in_executor(None, tree_client, root, "throughput", url, prefix)
        after = _cpu_by_process(services, server)
        out["throughput"].append(steps_per_s)
        for name, used in after.items():
            out.setdefault(f"cpu:{name}", []).append((used - before[name]) * 1000 / 2000)
        out["cpu_ms"].append((sum(after.values()) - sum(before.values())) * 1000 / 2000)
    drop_prefix(url, prefix)


async def run(
    trees: dict[str, Path], rounds: int, replicas: int = 1
) -> dict[str, dict[str, list[float]]]:
    """``replicas`` > 1: the working tree also runs with that many replicas of each
    service (the row ``working tree ×N``), to show how replicas add up."""
    if replicas > 1:
        trees = {**trees, f"working tree ×{replicas}": REPO_ROOT}
    server = RedisServer().start()
    results = {name: {"steps": [], "throughput": [], "cpu_ms": []} for name in trees}
    results["LangChain in-process"] = {"steps": [], "throughput": [], "cpu_ms": []}
    results["floor"] = {"steps": [], "throughput": [], "cpu_ms": []}
    try:
        for r in range(rounds):
            # each round starts with another tree: no tree always runs first or last
            order = list(trees.items())
            shift = r % len(order)
            for name, root in order[shift:] + order[:shift]:
                await one_tree(server, root, results[name], replicas if "×" in name else 1)
            lc = results["LangChain in-process"]
            for t in range(3):
                lc["steps"] += await suite._langchain_task_steps(25, f"r{r} t{t}")
            cpu_before = time.process_time()
            lc["throughput"].append(await suite._langchain_throughput(200, 10))
            lc["cpu_ms"].append((time.process_time() - cpu_before) * 1000 / 2000)
            results["floor"]["cpu_ms"].append(await suite.floor_cpu_ms())
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
        if name == "floor":
            continue
        cpu = f"{statistics.median(r['cpu_ms']):.2f}" if r["cpu_ms"] else "—"
        lines.append(
            f"| {name} | {suite.pct(r['steps'], 50) * 1000:.2f} | "
            f"{suite.pct(r['steps'], 99) * 1000:.2f} | "
            f"{statistics.median(r['throughput']):.0f} | {cpu} |"
        )
    floor = results.get("floor", {}).get("cpu_ms")
    if floor:
        lines += [
            "",
            f"Floor: {statistics.median(floor):.3f} CPU ms / step (LangChain's own code for "
            "a step's model call and tool call, in-process, one after the other).",
        ]
    return "\n".join(lines) + "\n\n" + cpu_table(results) + "\n\n" + commands_table(results)


def commands_table(results: dict[str, Any]) -> str:
    """Redis commands per step of each tree (``INFO commandstats``; those that scripts
    run count too, so EVALSHA is the round trips of the state machine's scripts)."""
    counted = {name: r["commands"] for name, r in results.items() if r.get("commands")}
    if not counted:
        return ""
    names = sorted({c for per in counted.values() for c in per}, key=lambda c: (c != "evalsha", c))
    lines = [
        "| tree | all commands / step | " + " | ".join(names) + " |",
        "|---|---:|" + "---:|" * len(names),
    ]
    for tree, per in counted.items():
        cells = [f"{per.get(c, 0):.2f}" for c in names]
        lines.append(f"| {tree} | {sum(per.values()):.2f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cpu_table(results: dict[str, dict[str, list[float]]]) -> str:
    """CPU ms per step of each process during the throughput run (median of rounds)."""
    processes = sorted({k[4:] for r in results.values() for k in r if k.startswith("cpu:")})
    lines = [
        "| tree | " + " | ".join(f"{p} CPU ms / step" for p in processes) + " |",
        "|---|" + "---:|" * len(processes),
    ]
    for name, r in results.items():
        if not any(k.startswith("cpu:") for k in r):
            continue
        cells = [
            f"{statistics.median(r[f'cpu:{p}']):.3f}" if f"cpu:{p}" in r else "—" for p in processes
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ab", description=__doc__)
    parser.add_argument("revs", nargs="+", help="git revisions or source tree paths")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--replicas", type=int, default=1, help="also run this tree with N replicas of each"
    )
    args = parser.parse_args(argv)
    tmp = lifetime.temporary_directory("loopline-ab-")  # goes with this process, however
    try:
        trees: dict[str, Any] = {rev: export(rev, tmp) for rev in args.revs}
        trees["working tree"] = REPO_ROOT
        tune_gc(Settings().gc_threshold)  # the LangChain reference gets the services' GC
        text = table(asyncio.run(run(trees, args.rounds, args.replicas)))
    finally:
        lifetime.remove_now(tmp)
    print(text)
    out = Path(__file__).parent / "results" / "ab.md"
    command = " ".join([*args.revs, f"--rounds {args.rounds}"])
    if args.replicas > 1:
        command += f" --replicas {args.replicas}"
    out.write_text(f"# `python -m benchmarks.ab {command}`\n\n{text}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

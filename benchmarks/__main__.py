"""``python -m benchmarks``: every measurement side by side with its baseline, in one run.

Writes ``benchmarks/results/README.md`` (the table, also printed), ``figures.json`` (every
figure) and ``benchmarks.png`` (when matplotlib is installed). Options: ``--quick`` (small
sizes, for a smoke run), ``--only step,throughput,flat,concurrency,context,recovery,
streaming,redis_cost`` (``--only streaming`` writes ``streaming.md`` and ``streaming.json``
alone, ``--only redis_cost`` ``redis_cost.md``: Redis CPU per step against two raw hops,
``--only sizing`` ``sizing.md``: replicas and Redis Cluster masters, ``benchmarks.sizing``),
``--redis-url URL`` (default: a private redis-server), ``--replicas N`` (the
concurrency measurement again with N replicas of each service), ``--concurrency N`` (default
2,000) and ``--no-10k`` (skip the 10,000-task attempt).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
import time
from typing import Any

from benchmarks import redis_cost, report, sizing, streaming, suite
from benchmarks.stack import REPO_ROOT, RedisServer
from loopline import lifetime
from services.app import tune_gc
from services.settings import Settings

ALL = (
    "step",
    "throughput",
    "flat",
    "concurrency",
    "context",
    "recovery",
    "streaming",
    "redis_cost",
    "sizing",
)


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def context_editing() -> dict[str, Any]:
    from benchmarks import context_editing as ce

    numbers = ce.run()
    markdown = ce.to_markdown(numbers)
    ce.RESULTS_FILE.parent.mkdir(parents=True, exist_ok=True)
    ce.RESULTS_FILE.write_text(markdown)
    return {**numbers, "markdown": markdown}


def recovery(url: str) -> dict[str, Any]:
    """``python -m benchmarks.recovery`` (another benchmark), when it exists."""
    if importlib.util.find_spec("benchmarks.recovery") is None:
        return {
            "note": "`benchmarks/recovery.py` does not exist yet: nothing to run "
            "(hook: `recovery()` in `benchmarks/__main__.py`)."
        }
    env = {
        **os.environ,
        "REDIS_URL": url,
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
        ),
    }
    proc = lifetime.spawn(  # a child that goes with this process, however it goes
        [sys.executable, "-m", "benchmarks.recovery"],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        out, err = proc.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return {"note": "`python -m benchmarks.recovery` did not finish within 15 minutes."}
    if proc.returncode != 0:
        return {
            "note": "`python -m benchmarks.recovery` failed:\n\n```\n"
            + err.decode(errors="replace")[-1500:]
            + "\n```"
        }
    path = report.RESULTS_DIR / "recovery.md"
    text = path.read_text() if path.exists() else out.decode(errors="replace")
    summary = ""
    for label in ("median", "max"):
        m = re.search(rf"\|\s*{label}\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|", text)
        if m:
            summary += f"{label} {m.group(1)} s ({m.group(2)}× idle time); "
    return {"markdown": text, "summary": summary.rstrip("; ")}


async def measure(args: argparse.Namespace, server: RedisServer) -> dict[str, Any]:
    plan = suite.quick_plan() if args.quick else suite.Plan()
    if args.concurrency:
        plan.conc_n = args.concurrency
    if args.no_10k:
        plan.conc_try_10k = False
    only = set(args.only.split(",")) if args.only else set(ALL)
    fig: dict[str, Any] = {
        "environment": {
            "when": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
            "machine": f"{os.cpu_count()} cores, Python {platform.python_version()}, "
            f"load average {os.getloadavg()[0]:.1f} at the start",
            "redis": server.kind,
            "gc": f"gc threshold {Settings().gc_threshold:,} with startup objects frozen, "
            "in the service processes and for the in-process LangChain baseline alike",
            "quick": args.quick,
        }
    }
    url = server.url
    if "step" in only:
        _log("step latency: loopline, LangChain and the raw hop, interleaved")
        fig["step"] = await suite.step_latency(url, plan)
        _log("step latency, end to end: ChatOpenAI over HTTP to the scripted server")
        fig["step_http"] = await suite.step_latency_http(url, plan)
    if "throughput" in only:
        _log(f"throughput: {plan.thr_tasks} tasks x {plan.thr_steps} steps")
        fig["throughput"] = await suite.throughput(url, plan)
    if "flat" in only:
        _log(f"flat cost: one task of {plan.flat_steps} steps")
        fig["flat"] = await suite.flat_cost(url, plan, private_server=server.kind != "given URL")
    if "concurrency" in only:
        fig["concurrency"] = []
        notes: list[str] = []
        sizes = [plan.conc_n]
        if plan.conc_try_10k and plan.conc_n < 10_000:
            sizes.append(10_000)
        for n in sizes:
            _log(f"concurrency: {n} tasks against a 1 s model")
            result = await suite.concurrency(url, n, plan, langchain=True)
            fig["concurrency"].append(result)
            if args.replicas > 1:  # the same run with more replicas: do they add up?
                _log(f"concurrency: {n} tasks, {args.replicas} replicas of each service")
                replicas = args.replicas
                more = await suite.concurrency(url, n, plan, langchain=False, replicas=replicas)
                fig["concurrency"].append(more)
        if not plan.conc_try_10k and plan.conc_n < 10_000:
            notes.append("10,000 tasks were not attempted in this run (`--quick` or `--no-10k`).")
        fig["concurrency_notes"] = notes
    await measure_files(only, url, plan, fig)
    return fig


async def measure_files(only: set[str], url: str, plan: suite.Plan, fig: dict[str, Any]) -> None:
    """The measurements that keep their own result files beside the table's."""
    if "context" in only:
        _log("context editing (benchmarks/context_editing.py)")
        fig["context_editing"] = await asyncio.to_thread(context_editing)
    if "recovery" in only:
        _log("recovery (benchmarks/recovery.py)")
        fig["recovery"] = await asyncio.to_thread(recovery, url)
    if "streaming" in only:
        _log("streaming: first token and token rate (benchmarks/streaming.py)")
        fig["streaming"] = await streaming.streaming(url, plan.stream_rounds)
        write_streaming(fig)
    if "redis_cost" in only:
        _log("Redis CPU per step against two raw hops (benchmarks/redis_cost.py)")
        rounds, tasks = (1, 50) if fig["environment"]["quick"] else (3, 200)
        cost = await redis_cost.measure(url, rounds, tasks, 10, 200)
        text = redis_cost.to_markdown(cost, fig["environment"]["machine"])
        redis_cost.RESULTS_FILE.write_text(text)
        print(text)
    if "sizing" in only:
        _log("sizing: replicas and Redis Cluster masters (benchmarks/sizing.py)")
        quick = ["--tasks", "40", "--steps", "3"] if fig["environment"]["quick"] else []
        code = await asyncio.to_thread(sizing.main, quick)
        fig["sizing"] = {"markdown": sizing.MD_FILE.read_text(), "complete": code == 0}


def write_streaming(fig: dict[str, Any]) -> None:
    """The streaming figures in files of their own, so that a run of them alone leaves
    the other results as they were."""
    report.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    markdown = streaming.to_markdown(fig["streaming"], fig["environment"])
    (report.RESULTS_DIR / "streaming.md").write_text(markdown)
    both = {"environment": fig["environment"], "streaming": fig["streaming"]}
    (report.RESULTS_DIR / "streaming.json").write_text(json.dumps(both, indent=1))
    print(markdown)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--only", default="", help=f"comma-separated subset of {','.join(ALL)}")
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("BENCH_REDIS_URL"),
        help="measure against this Redis (default: a private redis-server)",
    )
    parser.add_argument("--concurrency", type=int, default=0, help="N concurrent tasks")
    parser.add_argument("--no-10k", action="store_true", help="skip the 10,000-task attempt")
    parser.add_argument(
        "--replicas",
        type=int,
        default=1,
        help="also run the concurrency measurement with N replicas of each service",
    )
    args = parser.parse_args(argv)

    # The in-process LangChain baseline gets the garbage collector settings the services
    # run with (``services.app.tune_gc``): the comparison is of the code, not of GC.
    gc_threshold = Settings().gc_threshold
    tune_gc(gc_threshold)
    server = RedisServer(args.redis_url).start()
    _log(f"Redis: {server.kind} at {server.url}")
    try:
        fig = asyncio.run(measure(args, server))
    finally:
        server.stop()
    if set(fig) <= {"environment", "streaming"}:
        return 0  # streaming or the Redis cost alone: their own files are written
    report.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    png = report.RESULTS_DIR / "benchmarks.png"
    if report.chart(fig, png):
        fig["chart"] = png.name
    (report.RESULTS_DIR / "figures.json").write_text(
        json.dumps(
            {k: v for k, v in fig.items() if k not in ("context_editing", "recovery")}
            | {
                "context_editing": {
                    k: v for k, v in fig.get("context_editing", {}).items() if k != "markdown"
                }
            },
            indent=1,
            default=str,
        )
    )
    text = report.to_markdown(fig)
    (report.RESULTS_DIR / "README.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

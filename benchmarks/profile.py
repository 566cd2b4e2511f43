"""Where the services spend their CPU: a sampling profile of each service process under load.

``python -m benchmarks.profile [--seconds S] [--rate HZ] [--services model,tools] [--top N]
[--tree REV]`` starts a private Redis and the services (one process each), keeps them busy
with the throughput workload (tasks of 10 model calls against the in-consumer fake model
and a no-op tool, as ``benchmarks.ab`` measures), and records each chosen service of this
source tree, or of ``--tree`` (a git revision, exported as ``benchmarks.ab`` does), with
``py-spy`` (pip package ``py-spy``). It prints, per service, the functions with the
largest share of the samples in which they are on the stack (inclusive) and at the top
(self), and writes the collapsed stacks to ``benchmarks/results/profile-NAME.txt`` for a
flame graph tool.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from benchmarks.ab import export, tree_client
from benchmarks.stack import REPO_ROOT, RedisServer, Services, drop_prefix, new_prefix
from loopline import lifetime

RESULTS = Path(__file__).parent / "results"


def _keep_busy(root: Path, url: str, prefix: str, stop: threading.Event) -> None:
    """The throughput workload, driven by the tree's own client (its own contracts)."""
    while not stop.is_set():
        tree_client(root, "throughput", url, prefix)


def record(pid: int, seconds: float, rate: int, out: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            "py-spy", "record", "--pid", str(pid), "--duration", str(int(seconds)),
            "--rate", str(rate), "--format", "raw", "--output", str(out), "--nonblocking",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip


def shares(collapsed: Path) -> tuple[int, collections.Counter[str], collections.Counter[str]]:
    """Total samples, and per function the samples it is on the stack of and on top of."""
    total = 0
    inclusive: collections.Counter[str] = collections.Counter()
    top: collections.Counter[str] = collections.Counter()
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        frames = [f.split(" (")[0] + " (" + f.split(" (")[1].split(":")[0] + ")" if " (" in f
                  else f for f in stack.split(";")]  # fmt: skip
        total += n
        for frame in set(frames):
            inclusive[frame] += n
        top[frames[-1]] += n
    return total, inclusive, top


def report(name: str, collapsed: Path, limit: int) -> str:
    total, inclusive, top = shares(collapsed)
    if not total:
        return f"## {name}: no samples\n"
    lines = [f"## {name}: {total} samples", "", "| inclusive | self | function |"]
    lines.append("|---:|---:|---|")
    for frame, n in inclusive.most_common(limit):
        lines.append(f"| {n / total:.1%} | {top[frame] / total:.1%} | `{frame}` |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--services", default="model,tools,loop")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--tree", help="a git revision or source tree (default: this one)")
    parser.add_argument(
        "--replicas", type=int, default=1, help="of each service (the first is recorded)"
    )
    args = parser.parse_args(argv)
    if shutil.which("py-spy") is None:
        print("py-spy is not installed: pip install py-spy", file=sys.stderr)
        return 2
    server = RedisServer().start()
    prefix = new_prefix()
    stop = threading.Event()
    tmp = lifetime.temporary_directory("loopline-profile-")
    root = export(args.tree, tmp) if args.tree else REPO_ROOT
    try:
        with Services(server.url, prefix, root=root, replicas=args.replicas) as services:
            busy = threading.Thread(target=_keep_busy, args=(root, server.url, prefix, stop))
            busy.start()
            pids = {name: procs[0].pid for name, procs in services.procs.items()}
            chosen = [n for n in args.services.split(",") if n in pids]
            recorders = {
                n: record(pids[n], args.seconds, args.rate, RESULTS / f"profile-{n}.txt")
                for n in chosen
            }
            for proc in recorders.values():
                proc.wait()
            stop.set()
            busy.join()
        for name in chosen:
            print(report(name, RESULTS / f"profile-{name}.txt", args.top))
    finally:
        drop_prefix(server.url, prefix)
        server.stop()
        lifetime.remove_now(tmp)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

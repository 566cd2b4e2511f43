"""What a step costs the Redis server, against what two raw stream hops cost it, in one run.

``python -m benchmarks.redis_cost [--rounds N] [--tasks N] [--steps N] [--redis-url URL]
[--against REV ...]`` (also ``python -m benchmarks --only redis_cost``) starts a private
server (the machine's ``redis-server``, else the embedded Valkey) and the services as
processes, and runs, in interleaved rounds:

- **two raw hops**: entries bounce between two streams read by two consumer groups, as a
  step bounces between the model and tools streams: each side reads ``XREADGROUP COUNT
  100``, and for each entry sends ``XADD`` to the other stream and ``XACK`` (pipelined);
  one step is two hops. ``in_flight`` entries bounce at once, so the reads batch as the
  services' reads do under load.
- **loopline steps**: the throughput workload (tasks of ``--steps`` model calls, the
  in-consumer zero-latency model, one no-op tool call per step).

For each: the server's own CPU (``INFO cpu``: user + system, all its threads) over the
run, divided by the steps. For loopline also the commands per step, from ``INFO
commandstats`` (calls, µs per call; commands a Lua script runs count there too, beside
the script's ``EVALSHA``, whose µs include theirs), and from one more run with the slow
log recording every command (``slowlog-log-slower-than 0``) what the services sent, each
script by name with the commands it ran (the slow log lists those just before it). The
benchmark's own status polls are left out of the loopline figures. ``--against REV`` also
runs the services of another git revision (exported as ``benchmarks.ab`` does) in the
same rounds: before and after, each against the same hops. The table is printed and
written to ``benchmarks/results/redis_cost.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from benchmarks import loopline_side as ll
from benchmarks import rawhop
from benchmarks.ab import export
from benchmarks.stack import REPO_ROOT, RedisServer, Services, drop_prefix, fake_agent, new_prefix
from contracts.streams import Names
from loopline import lifetime

RESULTS_FILE = Path(__file__).parent / "results" / "redis_cost.md"
HOPS_PER_STEP = 2


@dataclass
class Sample:
    """Server CPU and commands of one run of one side."""

    steps: int
    cpu_s: float
    commands: dict[str, tuple[int, float]] = field(default_factory=dict)
    """Command name -> (calls, µs) over the run (``INFO commandstats`` deltas)."""

    @property
    def cpu_us_per_step(self) -> float:
        return self.cpu_s * 1e6 / self.steps


async def server_cpu_s(redis: aioredis.Redis) -> float:
    info: Any = await redis.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def command_stats(redis: aioredis.Redis) -> dict[str, tuple[int, float]]:
    info: Any = await redis.info("commandstats")
    return {
        key.removeprefix("cmdstat_"): (int(v["calls"]), float(v["usec"])) for key, v in info.items()
    }


def _delta(
    after: dict[str, tuple[int, float]], before: dict[str, tuple[int, float]]
) -> dict[str, tuple[int, float]]:
    out: dict[str, tuple[int, float]] = {}
    for name, (calls, usec) in after.items():
        c0, u0 = before.get(name, (0, 0.0))
        if calls - c0 > 0 and name != "info":
            out[name] = (calls - c0, usec - u0)
    return out


# -- two raw hops ---------------------------------------------------------------------------


async def _bounce(
    url: str, src: str, dst: str, group: str, counter: list[int], goal: int, count: bool
) -> None:
    """One side: read a batch, then XADD each entry to the other stream and XACK it."""
    r = aioredis.Redis.from_url(url)
    try:
        while counter[0] < goal:
            reply: Any = await r.xreadgroup(group, "c", {src: ">"}, count=100, block=100)
            if not reply:
                continue
            entries = reply[0][1]
            async with r.pipeline(transaction=False) as pipe:
                for entry_id, fields in entries:
                    pipe.xadd(dst, {"__data__": fields[b"__data__"]})
                    pipe.xack(src, group, entry_id)
                await pipe.execute()
            if count:
                counter[0] += len(entries)
    finally:
        await r.aclose()


async def raw_hops(url: str, prefix: str, steps: int, in_flight: int) -> Sample:
    """``steps`` round trips (two hops each) of ``in_flight`` entries at once."""
    r = aioredis.Redis.from_url(url)
    ping, pong = f"{prefix}:ping", f"{prefix}:pong"
    try:
        for stream, group in ((ping, "model"), (pong, "tools")):
            await r.xgroup_create(stream, group, id="0", mkstream=True)
        counter = [0]
        cpu0, cmd0 = await server_cpu_s(r), await command_stats(r)
        async with r.pipeline(transaction=False) as pipe:
            for _ in range(in_flight):
                pipe.xadd(ping, {"__data__": rawhop.PAYLOAD})
            await pipe.execute()
        sides = (
            _bounce(url, ping, pong, "model", counter, steps, count=False),
            _bounce(url, pong, ping, "tools", counter, steps, count=True),
        )
        tasks = [asyncio.create_task(side) for side in sides]
        await tasks[1]
        cpu1, cmd1 = await server_cpu_s(r), await command_stats(r)
        await tasks[0]
        return Sample(counter[0], cpu1 - cpu0, _delta(cmd1, cmd0))
    finally:
        await r.delete(ping, pong)
        await r.aclose()


# -- loopline steps -------------------------------------------------------------------------


async def _wait_done(
    redis: aioredis.Redis, names: Names, ids: list[str], timeout: float
) -> tuple[dict[str, str], int]:
    """The tasks' statuses once none runs, and how many HGETs the polls sent (they are
    the benchmark's, not the step's)."""
    polls = 0
    deadline = time.monotonic() + timeout
    pending, status = list(ids), {}
    while pending:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(pending)} of {len(ids)} tasks still running")
        await asyncio.sleep(0.25)
        async with redis.pipeline(transaction=False) as pipe:
            for tid in pending:
                pipe.hget(names.task_state(tid), "status")
            values = await pipe.execute()
        polls += len(pending)
        still = []
        for tid, value in zip(pending, values, strict=True):
            text = value.decode() if value else ""
            if text in ("completed", "failed"):
                status[tid] = text
            else:
                still.append(tid)
        pending = still
    return status, polls


async def loopline_steps(url: str, prefix: str, tasks: int, steps: int) -> Sample:
    """``tasks`` tasks of ``steps`` model calls each, all submitted at once."""
    redis = aioredis.Redis.from_url(url)
    names = Names(prefix)
    try:
        cpu0, cmd0 = await server_cpu_s(redis), await command_stats(redis)
        ids, _ = await ll.submit_many(
            redis, names, fake_agent(steps), tasks, max_steps=steps + 1, prompt=f"rc{time.time()}"
        )
        status, polls = await _wait_done(redis, names, ids, timeout=600)
        cpu1, cmd1 = await server_cpu_s(redis), await command_stats(redis)
        ended = await ll.outcome(redis, names, status)
    finally:
        await redis.aclose()
    if not ended.all_completed:
        raise RuntimeError(f"{ended.describe()}: no figure")
    commands = _delta(cmd1, cmd0)
    calls, usec = commands.get("hget", (0, 0.0))
    own_usec = usec * polls / calls if calls else 0.0
    if calls - polls > 0:
        commands["hget"] = (calls - polls, usec - own_usec)
    else:
        commands.pop("hget", None)
    return Sample(tasks * steps, cpu1 - cpu0 - own_usec / 1e6, commands)


# -- which script is which ------------------------------------------------------------------


def script_names() -> dict[str, str]:
    """sha1 -> a readable name, for every script the services register."""
    from services import commit, entry
    from services.tasks import issued, threads, transitions
    from services.tasks.transition import Args, build_script
    from services.tools import calls

    named: dict[str, str] = {
        "commit": entry.COMMIT_SCRIPT,
        "commit (redelivered)": commit.REDELIVERED_COMMIT_SCRIPT,
        "admit call": issued.ADMIT_LUA,
        "take parked call": calls._TAKE_PARKED,
        "read agent state": calls._AGENT_STATE,
    }
    classes: list[type[Args]] = [*transitions.ALL, threads.ClaimThread, threads.EndRun]
    classes.append(threads.DropQueued)
    for cls in classes:
        named[cls.__name__] = build_script(cls)
        if cls in transitions.FUSABLE:
            named[f"{cls.__name__} (fused)"] = build_script(cls, fused=True)
    return {hashlib.sha1(lua.encode()).hexdigest(): name for name, lua in named.items()}


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


@dataclass
class Sent:
    """One kind of command a client sent (a script by its name): its calls, their µs, and
    the commands it ran inside (a script's), by name."""

    calls: int = 0
    usec: float = 0.0
    inside: dict[str, int] = field(default_factory=lambda: defaultdict(int))


async def top_level(url: str, prefix: str, tasks: int, steps: int) -> dict[str, Sent]:
    """What the services sent during one run, by command (EVALSHA by script name), from
    the slow log recording every command: it logs a script's commands (client ``?:0``)
    before the script itself."""
    redis = aioredis.Redis.from_url(url)
    names = script_names()
    try:
        saved: Any = await redis.config_get("slowlog-*")
        await redis.config_set("slowlog-max-len", 1_000_000)
        await redis.config_set("slowlog-log-slower-than", 0)
        await redis.slowlog_reset()
        await loopline_steps(url, prefix, tasks, steps)
        # the raw reply (redis-py's parser drops the client fields of newer servers)
        entries: Any = await redis.execute_command("SLOWLOG", "GET", -1)  # type: ignore[no-untyped-call]
        for key, value in saved.items():
            await redis.config_set(key, value)
    finally:
        await redis.aclose()
    out: dict[str, Sent] = defaultdict(Sent)
    inside: dict[str, int] = defaultdict(int)
    for item in reversed(entries):  # oldest first
        args, client = item[3], _text(item[4])
        command = _text(args[0]).upper()
        if client == "?:0":
            inside[command] += 1
            continue
        if command in ("HGET", "SLOWLOG", "CONFIG", "INFO"):
            inside.clear()
            continue  # the benchmark's status polls and this sampling
        if command in ("EVALSHA", "EVAL"):
            sha = _text(args[1])
            command = f"EVALSHA {names.get(sha, sha[:10])}"
        sent = out[command]
        sent.calls += 1
        sent.usec += float(item[2])
        for name, n in inside.items():
            sent.inside[name] += n
        inside.clear()
    return dict(out)


# -- the run --------------------------------------------------------------------------------


async def measure(
    url: str,
    rounds: int,
    tasks: int,
    steps: int,
    in_flight: int,
    against: dict[str, Path] | None = None,
) -> dict[str, Any]:
    """``against``: other source trees (``--against REV``) whose services run the same
    workload in the same rounds, for their figure beside this tree's. Each side runs
    alone on the server (the services of one tree at a time, started for it), and each
    round starts with another tree."""
    hops: list[Sample] = []
    trees = {"this tree": REPO_ROOT, **(against or {})}
    samples: dict[str, list[Sample]] = {name: [] for name in trees}
    sent: dict[str, Sent] = {}
    for r in range(rounds):
        # nothing else runs on the server while a side is measured: its CPU is that side's
        prefix = new_prefix()
        hops.append(await raw_hops(url, f"{prefix}:raw", tasks * steps, in_flight))
        order = list(trees.items())
        for name, root in order[r % len(order) :] + order[: r % len(order)]:
            with Services(url, prefix, root=root):
                await loopline_steps(url, prefix, 20, 3)  # warm-up: imports, caches, scripts
                samples[name].append(await loopline_steps(url, prefix, tasks, steps))
                if name == "this tree" and r == rounds - 1:
                    sent = await top_level(url, prefix, max(20, tasks // 4), steps)
            drop_prefix(url, prefix)
        print(f"round {r + 1} of {rounds} done", file=sys.stderr)
    ours = samples.pop("this tree")
    theirs = samples
    return {
        "rounds": rounds,
        "tasks": tasks,
        "steps": steps,
        "in_flight": in_flight,
        "hops_us_per_step": [h.cpu_us_per_step for h in hops],
        "loopline_us_per_step": [o.cpu_us_per_step for o in ours],
        "hop_commands": _per_step(hops),
        "loopline_commands": _per_step(ours),
        "against": {
            name: {
                "us_per_step": [o.cpu_us_per_step for o in samples],
                "commands": _per_step(samples),
            }
            for name, samples in theirs.items()
        },
        "sent": {
            name: {
                "calls_per_step": x.calls / (max(20, tasks // 4) * steps),
                "usec_per_call": x.usec / x.calls,
                "inside_per_call": {k: v / x.calls for k, v in sorted(x.inside.items())},
            }
            for name, x in sent.items()
        },
    }


def _per_step(samples: list[Sample]) -> dict[str, tuple[float, float]]:
    """Command -> (calls per step, µs per call), over all the samples."""
    calls: dict[str, int] = defaultdict(int)
    usec: dict[str, float] = defaultdict(float)
    for s in samples:
        for name, (c, u) in s.commands.items():
            calls[name] += c
            usec[name] += u
    steps = sum(s.steps for s in samples)
    return {n: (calls[n] / steps, usec[n] / calls[n]) for n in calls}


def _each(values: list[float]) -> str:
    return ", ".join(f"{x:.1f}" for x in values)


def _against_rows(fig: dict[str, Any], hop: float) -> list[str]:
    """A row per other tree of the run (``--against``), with its commands per step."""
    rows = []
    for name, other in fig.get("against", {}).items():
        cost = statistics.median(other["us_per_step"])
        commands = sum(c for c, _ in other["commands"].values())
        rows.append(
            f"| loopline step, `{name}` ({commands:.1f} commands / step) | {cost:.1f} "
            f"({_each(other['us_per_step'])}) | {cost / hop:.2f}x |"
        )
    return rows


def to_markdown(fig: dict[str, Any], environment: str) -> str:
    hop = statistics.median(fig["hops_us_per_step"])
    ours = statistics.median(fig["loopline_us_per_step"])
    lines = [
        "# What a step costs Redis",
        "",
        f"`python -m benchmarks.redis_cost --rounds {fig['rounds']} --tasks {fig['tasks']} "
        f"--steps {fig['steps']}"
        + "".join(f" --against {name}" for name in fig.get("against", {}))
        + f"` ({environment}). Server CPU from `INFO cpu` (user + "
        "system) over each run, divided by its steps; median of the rounds, every round "
        "in brackets. A step: one model call and one no-op tool call; two raw hops: "
        f"{fig['in_flight']} entries bouncing between two streams and two groups "
        "(`XREADGROUP COUNT 100`, then `XADD` to the other stream and `XACK`, pipelined).",
        "",
        "| | Redis CPU µs / step | ratio |",
        "|---|---:|---:|",
        f"| loopline step, this tree ({sum(c for c, _ in fig['loopline_commands'].values()):.1f}"
        f" commands / step) | {ours:.1f} ({_each(fig['loopline_us_per_step'])}) "
        f"| **{ours / hop:.2f}x** |",
        *_against_rows(fig, hop),
        f"| two raw hops | {hop:.1f} ({_each(fig['hops_us_per_step'])}) | 1.00x |",
        "",
        "## Commands per step (`INFO commandstats`, all rounds)",
        "",
        "Commands a script runs are counted here beside its `EVALSHA`, whose µs include "
        "theirs. The µs are wall time inside the server, which a loaded machine inflates "
        "(the server shares its cores with the services): compare them with each other, "
        "and the CPU above with the hops'.",
        "",
        "| command | loopline calls / step | µs / call | µs / step | raw hops calls / step "
        "| µs / call |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    ll_cmds, hop_cmds = fig["loopline_commands"], fig["hop_commands"]
    for name in sorted(set(ll_cmds) | set(hop_cmds), key=lambda n: -ll_cmds.get(n, (0, 0))[0]):
        c, u = ll_cmds.get(name, (0.0, 0.0))
        hc, hu = hop_cmds.get(name, (0.0, 0.0))
        lines.append(f"| {name} | {c:.2f} | {u:.2f} | {c * u:.1f} | {hc:.2f} | {hu:.2f} |")
    total = sum(c for c, _ in ll_cmds.values())
    lines += [
        f"| all | {total:.2f} | | | {sum(c for c, _ in hop_cmds.values()):.2f} | |",
        "",
        "## What the services send per step, scripts by name (slow log of one more run)",
        "",
        "| sent | calls / step | µs / call | µs / step | commands inside, per call |",
        "|---|---:|---:|---:|---|",
    ]
    sent = fig["sent"]
    for name in sorted(sent, key=lambda n: -sent[n]["calls_per_step"] * sent[n]["usec_per_call"]):
        x = sent[name]
        inside = ", ".join(f"{k} {v:.2g}" for k, v in x["inside_per_call"].items())
        c, u = x["calls_per_step"], x["usec_per_call"]
        lines.append(f"| {name} | {c:.2f} | {u:.2f} | {c * u:.1f} | {inside} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    import datetime
    import os

    parser = argparse.ArgumentParser(prog="python -m benchmarks.redis_cost", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--in-flight", type=int, default=200)
    parser.add_argument("--redis-url", help="an existing server (default: a private one)")
    parser.add_argument(
        "--against",
        action="append",
        default=[],
        help="a git revision (or source tree) measured in the same rounds (repeatable)",
    )
    args = parser.parse_args(argv)
    server = RedisServer(args.redis_url).start()
    tmp = lifetime.temporary_directory("loopline-redis-cost-")
    try:
        against = {rev: export(rev, tmp) for rev in args.against}
        fig = asyncio.run(
            measure(server.url, args.rounds, args.tasks, args.steps, args.in_flight, against)
        )
    finally:
        server.stop()
        lifetime.remove_now(tmp)
    environment = (
        f"{datetime.datetime.now():%Y-%m-%d %H:%M}, {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.1f} at the end, {server.kind}"
    )
    text = to_markdown(fig, environment)
    RESULTS_FILE.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_FILE.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

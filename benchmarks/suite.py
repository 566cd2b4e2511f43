"""The measurements, each run side by side with its baseline in the same run.

Every function returns a dict of figures (JSON-friendly); ``benchmarks.report`` turns them
into the Markdown table and the chart.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis

from benchmarks import langchain_side as lc
from benchmarks import loopline_side as ll
from benchmarks import rawhop, tools
from benchmarks.stack import (
    Services,
    drop_prefix,
    fake_agent,
    http_agent,
    new_prefix,
    scripted_server,
)
from contracts.streams import Names
from loopline.client import Client

HOPS_PER_STEP = 2
"""Stream hops of one agent step with one tool call, for an agent without loop-stage hooks
(services/tasks/handover.py): model -ToolRequested-> tools -ModelRequested-> model. The model
and tools services apply the loop's transitions themselves (StepStarted, ModelResponded
and ToolCompleted go to the task's log inside those Lua transitions, no extra hop); the
context stage is skipped for an agent without context editing. With hooks the step is 4
hops (model -> loop -> tools -> loop -> model), 5 with context editing."""


@dataclass
class Plan:
    """Sizes of every measurement (``--quick`` shrinks them)."""

    rounds: int = 5  # step latency: interleaved rounds of loopline / LangChain / raw hop
    step_tasks: int = 4  # tasks per round and side
    step_steps: int = 25  # model calls per task
    hop_round_trips: int = 300  # per round
    http_rounds: int = 3  # the end-to-end variant over HTTP
    http_tasks: int = 3
    stream_rounds: int = 30  # streaming: interleaved runs of each client
    thr_tasks: int = 200
    thr_steps: int = 10
    thr_rounds: int = 3
    flat_steps: int = 525  # model calls of each long task (the last one answers)
    flat_tasks: int = 3  # long tasks per side: the windows' medians pool their steps
    flat_checkpoints: tuple[int, ...] = (1, 10, 100, 500)
    flat_window: int = 20
    flat_tool_bytes: int = 5000
    conc_n: int = 2000
    conc_steps: int = 3
    conc_latency_s: float = 1.0
    conc_try_10k: bool = True
    conc_timeout_s: float = 300.0


def quick_plan() -> Plan:
    return Plan(
        rounds=2,
        step_tasks=2,
        step_steps=15,
        hop_round_trips=100,
        http_rounds=1,
        http_tasks=2,
        stream_rounds=8,
        thr_tasks=50,
        thr_rounds=1,
        flat_steps=125,
        flat_tasks=1,
        flat_checkpoints=(1, 10, 100),
        conc_n=200,
        conc_try_10k=False,
        conc_timeout_s=60.0,
    )


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def _ms(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": pct(values, 50) * 1000,
        "p99_ms": pct(values, 99) * 1000,
        "mean_ms": statistics.fmean(values) * 1000,
        "n": len(values),
    }


# -- 1. step latency ----------------------------------------------------------------------


async def _loopline_steps(client: Client, spec: Any, steps: int, prompt: str) -> list[float]:
    """One loopline task's step durations: the gaps between its ``StepStarted`` events."""
    from contracts.messages import HumanMessage

    tid = await client.submit(spec, [HumanMessage(content=prompt)], max_steps=steps + 1)
    started: list[float] = []
    async for _, event in client.events(tid, block_ms=5000):
        if event.type == "StepStarted":
            started.append(event.at)
        elif event.type == "TaskFailed":
            raise RuntimeError(f"benchmark task failed: {event}")
    return [b - a for a, b in itertools.pairwise(started)]


async def _langchain_steps(agent: Any, model: Any, steps: int, prompt: str) -> list[float]:
    """One LangChain task's step durations: the gaps between its model calls."""
    await agent.ainvoke({"messages": [{"role": "user", "content": prompt}]}, lc.run_config(steps))
    times = model.call_times()[prompt]
    return [b - a for a, b in itertools.pairwise(times)]


async def _loopline_task_steps(
    client: Client, steps: int, prompt: str, tool: str = "noop"
) -> list[float]:
    return await _loopline_steps(client, fake_agent(steps, tool=tool), steps, prompt)


async def _langchain_task_steps(steps: int, prompt: str) -> list[float]:
    agent, model = lc.make_agent(steps)
    return await _langchain_steps(agent, model, steps, prompt)


async def _commands_per_step(client: Client, url: str, steps: int) -> dict[str, float]:
    """Redis commands the services send per step (``INFO commandstats`` around one task;
    the idle readers' polls and this client's reads are included, so a bit high)."""
    redis = aioredis.Redis.from_url(url)
    try:
        before: Any = await redis.info("commandstats")
        await _loopline_task_steps(client, steps, "count commands")
        after: Any = await redis.info("commandstats")
    finally:
        await redis.aclose()
    out: dict[str, float] = {}
    for key, stats in after.items():
        calls = stats["calls"] - before.get(key, {}).get("calls", 0)
        name = key.removeprefix("cmdstat_")
        if calls and name not in ("info",):
            out[name] = round(calls / steps, 2)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


async def step_latency(url: str, plan: Plan) -> dict[str, Any]:
    prefix = new_prefix()
    ours: list[float] = []
    leased: list[float] = []  # a tool not declared idempotent: a lease round trip more
    theirs: list[float] = []
    hops: list[float] = []
    with Services(url, prefix):
        client = Client(url, prefix)
        try:
            await _loopline_task_steps(client, 5, "warm-up")  # imports, caches, connections
            await _langchain_task_steps(5, "warm-up")
            for r in range(plan.rounds):
                for t in range(plan.step_tasks):
                    ours += await _loopline_task_steps(client, plan.step_steps, f"r{r} t{t}")
                leased += await _loopline_task_steps(
                    client, plan.step_steps, f"r{r} once", tool="noop_once"
                )
                for t in range(plan.step_tasks):
                    theirs += await _langchain_task_steps(plan.step_steps, f"r{r} t{t}")
                hops += await rawhop.measure(url, f"{prefix}:raw{r}", plan.hop_round_trips)
            commands = await _commands_per_step(client, url, plan.step_steps * 2)
        finally:
            await client.close()
    drop_prefix(url, prefix)
    floor = [
        sum(hops[i : i + HOPS_PER_STEP])
        for i in range(0, len(hops) - HOPS_PER_STEP + 1, HOPS_PER_STEP)
    ]
    return {
        "loopline": _ms(ours),
        "loopline_leased": _ms(leased),
        "langchain": _ms(theirs),
        "hop": _ms(hops),
        "floor": {**_ms(floor), "hops_per_step": HOPS_PER_STEP},
        "commands_per_step": commands,
        "tasks_per_side": plan.rounds * plan.step_tasks,
        "steps_per_task": plan.step_steps,
    }


async def step_latency_http(url: str, plan: Plan) -> dict[str, Any]:
    """The end-to-end variant: the real ``ChatOpenAI`` on both sides, over HTTP to the
    scripted OpenAI-compatible server (its own process); loopline's model service calls
    it as a deployment would, LangChain's ``create_agent`` in-process does the same."""
    steps = plan.step_steps
    prefix = new_prefix()
    ours: list[float] = []
    theirs: list[float] = []
    with scripted_server(steps) as model_server:
        env = {"OPENAI_BASE_URL": model_server.url, "OPENAI_API_KEY": "unused"}
        agent, model = lc.make_http_agent(model_server.url)
        with Services(url, prefix, env=env):
            client = Client(url, prefix)

            async def loopline_task(prompt: str) -> list[float]:
                return await _loopline_steps(client, http_agent(), steps, prompt)

            async def langchain_task(prompt: str) -> list[float]:
                return await _langchain_steps(agent, model, steps, prompt)

            try:
                await loopline_task("warm-up")
                await langchain_task("warm-up")
                for r in range(plan.http_rounds):
                    for t in range(plan.http_tasks):
                        ours += await loopline_task(f"http r{r} t{t}")
                    for t in range(plan.http_tasks):
                        theirs += await langchain_task(f"http r{r} t{t}")
            finally:
                await client.close()
    drop_prefix(url, prefix)
    return {
        "loopline": _ms(ours),
        "langchain": _ms(theirs),
        "tasks_per_side": plan.http_rounds * plan.http_tasks,
        "steps_per_task": steps,
    }


# -- 2. throughput ------------------------------------------------------------------------


async def _loopline_throughput(url: str, prefix: str, tasks: int, steps: int) -> float:
    redis = aioredis.Redis.from_url(url)
    names = Names(prefix)
    try:
        done = await ll.run_timed(
            redis,
            names,
            fake_agent(steps),
            tasks,
            max_steps=steps + 1,
            prompt=f"thr{time.time()}",
            timeout=600,
            interval=0.05,
        )
        if "loopline_s" not in done:
            raise RuntimeError(f"throughput: {done['error']}: no figure")
        return float(tasks * steps / done["loopline_s"])
    finally:
        await redis.aclose()


async def _langchain_throughput(tasks: int, steps: int) -> float:
    agent, _ = lc.make_agent(steps)
    started = time.perf_counter()
    await asyncio.gather(
        *(
            agent.ainvoke(
                {"messages": [{"role": "user", "content": f"task {i}"}]}, lc.run_config(steps)
            )
            for i in range(tasks)
        )
    )
    return tasks * steps / (time.perf_counter() - started)


async def throughput(url: str, plan: Plan) -> dict[str, Any]:
    """Steps per second of both sides, and the CPU each spends per step: the service
    processes' (from /proc; Redis's is in ``benchmarks.ab``), this process's for
    LangChain in-process, and the floor (LangChain's own code for the step's calls)."""
    prefix = new_prefix()
    ours: list[float] = []
    theirs: list[float] = []
    our_cpu: list[dict[str, float]] = []
    their_cpu: list[float] = []
    steps = plan.thr_tasks * plan.thr_steps
    with Services(url, prefix) as services:
        await _loopline_throughput(url, prefix, 20, 3)  # warm-up
        for _ in range(plan.thr_rounds):
            before = services.cpu_s()
            ours.append(await _loopline_throughput(url, prefix, plan.thr_tasks, plan.thr_steps))
            after = services.cpu_s()
            our_cpu.append({k: (after[k] - before[k]) * 1000 / steps for k in after})
            gc.collect()
            started = time.process_time()
            theirs.append(await _langchain_throughput(plan.thr_tasks, plan.thr_steps))
            their_cpu.append((time.process_time() - started) * 1000 / steps)
            gc.collect()
    drop_prefix(url, prefix)
    return {
        "tasks": plan.thr_tasks,
        "steps": plan.thr_steps,
        "loopline_steps_s": statistics.median(ours),
        "langchain_steps_s": statistics.median(theirs),
        "loopline_all": ours,
        "langchain_all": theirs,
        "loopline_cpu_ms_per_step": {
            k: statistics.median(r[k] for r in our_cpu) for k in our_cpu[0]
        },
        "langchain_cpu_ms_per_step": statistics.median(their_cpu),
        "floor_cpu_ms_per_step": await floor_cpu_ms(),
    }


async def floor_cpu_ms(steps: int = 2000) -> float:
    """The floor: CPU ms of LangChain's own code for one step's calls, the same model
    call (the scripted model, its tools bound, as ``create_agent`` binds them) and the
    same tool call (``noop``), in this process, one after the other."""
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool as as_tool

    _, model = lc.make_agent(2)
    noop = as_tool(tools.noop)  # as create_agent's tool node makes a tool of a function
    bound = model.bind_tools([noop, as_tool(tools.blob)])
    messages = [HumanMessage("task")]
    call = {"id": "call_0", "name": "noop", "args": {}, "type": "tool_call"}
    started = time.process_time()
    for _ in range(steps):
        await bound.ainvoke(messages)
        await noop.ainvoke(call)
    return (time.process_time() - started) * 1000 / steps


# -- 3. flat cost as history grows ------------------------------------------------------------


async def _bytes_in(redis: aioredis.Redis) -> int:
    info: Any = await redis.info("stats")
    return int(info["total_net_input_bytes"])


@dataclass
class _FlatSamples:
    """What the long tasks of ``flat_cost`` leave behind, for the rows of its table."""

    written: dict[int, int] = field(default_factory=dict)  # step -> server bytes in at its start
    ours: dict[int, list[float]] = field(default_factory=dict)  # step -> its duration per task
    model_ms: dict[int, list[float]] = field(default_factory=dict)  # step -> its model call
    theirs: dict[int, list[float]] = field(default_factory=dict)  # step -> LangChain's duration
    log: list[dict[str, Any]] = field(default_factory=list)  # the first task's log
    bus: list[dict[str, Any]] = field(default_factory=list)  # its events on the work streams
    messages: list[Any] = field(default_factory=list)  # the last LangChain task's messages

    def add_loopline_log(self, task_log: list[dict[str, Any]]) -> None:
        """Step durations from the loop's ``StepStarted`` times, and the model call's own
        time as the model service saw it."""
        started = {e["step"]: e["at"] for e in task_log if e["type"] == "StepStarted"}
        for k in started:
            if k + 1 in started:
                self.ours.setdefault(k, []).append(started[k + 1] - started[k])
        for e in task_log:
            if e["type"] == "ModelResponded" and e.get("model_ms") is not None:
                self.model_ms.setdefault(e["step"], []).append(e["model_ms"])

    def row(self, k: int, window: int, model_call_ms: float) -> dict[str, Any]:
        """Checkpoint ``k``: its bytes, and the medians of the steps ``k … k+window-1``."""
        mine = [d for s in range(k, k + window) for d in self.ours.get(s, [])]
        calls = [d for s in range(k, k + window) for d in self.model_ms.get(s, [])]
        lcs = [d for s in range(k, k + window) for d in self.theirs.get(s, [])]
        written = self.written
        return {
            "step": k,
            "event_bytes": sum(e["_bytes"] for e in self.bus if e.get("step") == k),
            "log_bytes": sum(e["_bytes"] for e in self.log if e.get("step") == k),
            "redis_bytes_in_per_step": (written[k + window] - written[k]) / window
            if k in written and k + window in written
            else None,
            "loopline_step_ms": statistics.median(mine) * 1000 if mine else None,
            "langchain_step_ms": statistics.median(lcs) * 1000 if lcs else None,
            # What the model is sent at step k (and what shipping history would carry):
            # the human message and k-1 (AI tool call, tool result) pairs.
            "langchain_state_bytes": lc.state_bytes(self.messages[: 1 + 2 * (k - 1)]),
            "model_call_ms": model_call_ms,
            "service_model_call_ms": statistics.median(calls) if calls else None,
        }


async def flat_cost(url: str, plan: Plan, *, private_server: bool) -> dict[str, Any]:
    """``plan.flat_tasks`` long tasks per side, alternating loopline and LangChain so both
    see the same machine; a window's latency is the median of its steps over all tasks
    (one task's 10-step windows moved by 2x between runs on this noisy machine)."""
    prefix = new_prefix()
    samples = _FlatSamples()
    with Services(url, prefix):
        await _run_long_tasks(url, prefix, plan, samples)
    drop_prefix(url, prefix)

    model_call = await _model_call_ms(samples.messages, plan.flat_checkpoints)
    return {
        "steps": plan.flat_steps,
        "tool_bytes": plan.flat_tool_bytes,
        "window": plan.flat_window,
        "tasks": plan.flat_tasks,
        "private_server": private_server,
        "rows": [samples.row(k, plan.flat_window, model_call[k]) for k in plan.flat_checkpoints],
    }


async def _run_long_tasks(url: str, prefix: str, plan: Plan, samples: _FlatSamples) -> None:
    """Each round one long loopline task, then the same task in LangChain in-process; the
    first loopline task also samples the server's bytes and keeps its events."""
    from contracts.messages import HumanMessage

    steps = plan.flat_steps
    args = {"n": plan.flat_tool_bytes}
    names = Names(prefix)
    window = plan.flat_window
    marks = {c for k in plan.flat_checkpoints for c in (k, k + window)}
    client = Client(url, prefix)
    redis = aioredis.Redis.from_url(url)
    try:
        await _loopline_task_steps(client, 3, "warm-up")
        spec = fake_agent(steps, tool="blob", args=args)
        for run in range(plan.flat_tasks):
            tid = await client.submit(
                spec, [HumanMessage(content=f"grow {run}")], max_steps=steps + 1
            )
            await _follow_long_task(client, redis, tid, marks if run == 0 else set(), samples)
            task_log = await ll.log_events(redis, names, tid)
            samples.add_loopline_log(task_log)
            if run == 0:
                samples.log = task_log
                samples.bus = await _work_stream_events(redis, names, tid)
            samples.messages = await _langchain_long_task(steps, args, run, samples)
    finally:
        await redis.aclose()
        await client.close()


async def _follow_long_task(
    client: Client, redis: aioredis.Redis, tid: str, marks: set[int], samples: _FlatSamples
) -> None:
    """Wait for the task's end. Server-wide bytes received are sampled as the task's log
    shows each mark's step starting: (bytes at k+W - bytes at k) / W per step."""
    async for _, event in client.events(tid, block_ms=5000):
        if event.type == "StepStarted" and event.step in marks:
            samples.written[event.step] = await _bytes_in(redis)
        elif event.type == "TaskFailed":
            raise RuntimeError(f"long task failed: {event}")


async def _work_stream_events(
    redis: aioredis.Redis, names: Names, tid: str
) -> list[dict[str, Any]]:
    """The task's events on the work streams (each with its ``_bytes``)."""
    bus: list[dict[str, Any]] = []
    for stream in (names.context, names.model, names.loop, names.tools):
        found = await ll.stream_events(redis, stream)
        bus += [e for e in found if e.get("task_id") == tid]
    return bus


async def _langchain_long_task(
    steps: int, args: dict[str, Any], run: int, samples: _FlatSamples
) -> list[Any]:
    """The same long task in-process: its step times into ``samples.theirs``; returns the
    messages, the state it carries."""
    agent, model = lc.make_agent(steps, tool="blob", args=args)
    result = await agent.ainvoke(
        {"messages": [{"role": "user", "content": f"grow {run}"}]},
        lc.run_config(steps),
    )
    lc_times = model.call_times()[f"grow {run}"]
    for k, (a, b) in enumerate(itertools.pairwise(lc_times)):
        samples.theirs.setdefault(k + 1, []).append(b - a)
    messages: list[Any] = result["messages"]
    return messages


async def _model_call_ms(messages: list[Any], checkpoints: tuple[int, ...]) -> dict[int, float]:
    """What the model call itself costs at step k, in-process: the scripted model's
    ``ainvoke`` on the messages it gets at that step (median of 30). It is the same call
    the model service makes, and it grows with the conversation in any system: LangChain's
    ``BaseChatModel`` walks every message on every call (normalizing them, formatting
    them for tracing), and a real model is sent them all."""
    from services.model.chat import prompt_of

    model = lc.TimedScriptedModel(turns=[{"content": "done"}])
    out: dict[int, float] = {}
    for k in checkpoints:
        sent = messages[: 1 + 2 * (k - 1)]
        times = []
        for _ in range(30):
            t0 = time.perf_counter()
            await model.ainvoke(prompt_of(sent))  # as the model service calls it
            times.append(time.perf_counter() - t0)
        out[k] = statistics.median(times) * 1000
    return out


async def model_call_cpu_s(calls: int = 2000) -> float:
    """CPU seconds of one model call's LangChain code (the scripted model, zero latency,
    a 3-message conversation), in-process: what a single model replica spends per call
    before loopline does anything."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    model = lc.TimedScriptedModel(turns=[{"content": "done"}])
    sent = [
        HumanMessage("task"),
        AIMessage("", tool_calls=[{"id": "c1", "name": "noop", "args": {}}]),
        ToolMessage("ok", tool_call_id="c1"),
    ]
    await model.ainvoke(sent)
    t0 = time.process_time()
    for _ in range(calls):
        await model.ainvoke(sent)
    return (time.process_time() - t0) / calls


# -- 4. many concurrent tasks against a slow model -------------------------------------------


async def concurrency(
    url: str, n: int, plan: Plan, *, langchain: bool = True, replicas: int = 1
) -> dict[str, Any]:
    """``replicas`` of each service (one by default)."""
    steps, latency = plan.conc_steps, plan.conc_latency_s
    prefix = new_prefix()
    names = Names(prefix)
    # The model service may hold every task's call in flight (its default, 256 calls in
    # flight, would queue the rest behind the 1 s latency).
    env = {"LOOPLINE_CONCURRENCY_MODEL": str(max(256, n))}
    out: dict[str, Any] = {
        "n": n,
        "steps": steps,
        "latency_s": latency,
        "ideal_s": steps * latency,
        "replicas": replicas,
    }
    # The floor of one model replica: LangChain's own code for every model call, on one core
    out["model_call_floor_s"] = n * steps * await model_call_cpu_s()
    services = Services(url, prefix, env=env, replicas=replicas)
    with services:
        redis = aioredis.Redis.from_url(url)
        try:
            cpu_before = services.cpu_s()
            spec = fake_agent(steps, latency=latency)
            out.update(
                await ll.run_timed(
                    redis,
                    names,
                    spec,
                    n,
                    max_steps=steps + 1,
                    prompt="conc",
                    timeout=plan.conc_timeout_s,
                    interval=0.5,
                )
            )
            out["peak_rss_mb"] = _mb(services.peak_rss_kb())
            # CPU seconds each service process used for the run: one process near the
            # wall time is the bound (a replica more of that service is the remedy)
            cpu_after = services.cpu_s()
            out["cpu_s"] = {k: round(cpu_after[k] - cpu_before[k], 1) for k in cpu_after}
        finally:
            await redis.aclose()
    drop_prefix(url, prefix)
    if "loopline_s" not in out:
        return out  # no time without every task completed, and nothing to compare it with
    if langchain:
        agent, _ = lc.make_agent(steps, latency=latency)
        t0 = time.perf_counter()
        await asyncio.gather(
            *(
                agent.ainvoke(
                    {"messages": [{"role": "user", "content": f"task {i}"}]}, lc.run_config(steps)
                )
                for i in range(n)
            )
        )
        out["langchain_s"] = time.perf_counter() - t0
        gc.collect()
    return out


def _mb(kb: dict[str, int]) -> dict[str, float]:
    return {k: round(v / 1024, 1) for k, v in kb.items()}

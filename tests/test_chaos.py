"""Chaos: consumers killed with SIGKILL while tasks run, and Redis itself restarted.

Every service runs as two OS processes; a supervisor kills one at random with SIGKILL
every ~2 s (once the previous victim's replacement is up) and starts a new one in its
place, while 200 tasks run. Nothing may be lost (every task completes with the right
answer), nothing done twice (a tool's side effect, counted outside its process, happens
at most once per call, exactly once for every call the model saw succeed) and no task's
log has a duplicate event. Then Redis itself is killed and restarted (append-only file)
under 30 running tasks.

The scripted model is deterministic from the request, so a retried model call gets the
same reply; the tool ``tests.chaos_tools:add_counted`` is not idempotent, so a call cut
short by a kill is answered "outcome unknown" (counted, and its side effect checked to
have run at most once).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import shutil
import signal
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from contracts.agent import AgentSpec
from contracts.events import AnyEvent, TaskCompleted, ToolCompleted
from contracts.messages import AIMessage, HumanMessage, ToolCall, ToolMessage
from contracts.streams import GROUPS, SERVICES, Names
from loopline.agentfile import agent_from_dict
from loopline.client import Client
from loopline.testing.redis_server import RedisServer
from loopline.testing.scripted import Reply, ScriptedOpenAIServer, ScriptedToolCall, first_user_text
from services.redisconn import sync_client
from tests.support import ServiceProcesses, unique_prefix

TOOL = "tests.chaos_tools:add_counted"
UNKNOWN = "the outcome of this call is unknown"
RECLAIMED = re.compile(r"\breclaimed \S+ \S+ \(delivery (\d+)\)")


# -- the scripted model: deterministic from the request alone --------------------------


def task_calls(tag: str) -> list[tuple[int, int]]:
    """The (a, b) pairs a task's first turn adds: two or three, derived from its tag."""
    rng = random.Random(tag)
    return [(rng.randint(1, 999), rng.randint(1, 999)) for _ in range(rng.choice((2, 3)))]


def chaos_responder(body: dict[str, Any]) -> Reply:
    """Turn 0: parallel ``add_counted`` calls; turn 1: the sum of the results it sees.
    A retried model call gets the same reply, whatever replica sends it."""
    text = first_user_text(body)
    if not text.startswith("chaos "):
        return Reply(content=f"unexpected prompt {text[:40]!r}")
    tag = text.split()[1]
    messages = body.get("messages", [])
    if not any(m.get("role") == "assistant" for m in messages):
        return Reply(
            tool_calls=tuple(
                ScriptedToolCall("add_counted", {"a": a, "b": b, "call_key": f"{tag}:0:{i}"})
                for i, (a, b) in enumerate(task_calls(tag))
            )
        )
    total, unknown = 0, 0
    for message in messages:
        if message.get("role") != "tool":
            continue
        try:
            total += int(str(message.get("content")))
        except ValueError:
            unknown += 1
    return Reply(content=f"sum={total}" + (f" unknown={unknown}" if unknown else ""))


def chaos_spec() -> AgentSpec:
    return agent_from_dict({"model": "gpt-4o-mini", "tools": [TOOL]})[0]


# -- what a finished task must look like ----------------------------------------------


@dataclass
class Audit:
    tasks: int = 0
    completed: int = 0
    tool_calls: int = 0
    succeeded_calls: int = 0
    unknown_calls: int = 0
    unknown_tasks: int = 0
    spurious_unknown: int = 0
    """Calls answered "unknown outcome" whose first run then finished in a live worker."""
    duplicates: int = 0
    latencies: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        self.problems.append(text)


def event_key(event: AnyEvent) -> tuple[Any, ...]:
    """What makes a log event unique: type and step, plus the call id of a tool result."""
    step = getattr(event, "step", None)
    if isinstance(event, ToolCompleted):
        return (event.type, step, event.message.tool_call_id)
    return (event.type, step)


async def audit_task(
    client: Client, tag: str, task_id: str, counters: dict[str, int], audit: Audit
) -> None:
    """Check one task against what chaos may not break: its log, its transcript, each tool
    call's side effect and the answer; every finding goes to ``audit``."""
    audit.tasks += 1
    log = [event async for _, event in client.events(task_id, follow=False)]
    pairs = task_calls(tag)
    final = audit_log(tag, task_id, log, len(pairs), audit)
    if final is None:
        return
    messages = await client.messages(task_id)
    if [m.type for m in messages] != ["human", "ai"] + ["tool"] * len(pairs) + ["ai"]:
        audit.problem(f"{tag} ({task_id}): transcript {[m.type for m in messages]}")
        return
    ai = messages[1]
    assert isinstance(ai, AIMessage)
    total, unknown = 0, 0
    for call, result in zip(ai.tool_calls, messages[2:-1], strict=True):
        assert isinstance(result, ToolMessage)
        added, outcome_unknown = await audit_call(
            client, tag, task_id, call, result, counters, audit
        )
        total += added
        unknown += int(outcome_unknown)
    audit_answer(tag, task_id, final, pairs, total, unknown, audit)


def audit_log(
    tag: str, task_id: str, log: list[AnyEvent], calls: int, audit: Audit
) -> TaskCompleted | None:
    """No event twice, the task completed, and its log holds exactly the events of two
    steps with ``calls`` tool results; the completion when it completed."""
    keys = Counter(event_key(e) for e in log)
    dups = {k: n for k, n in keys.items() if n > 1}
    if dups:
        audit.duplicates += sum(n - 1 for n in dups.values())
        audit.problem(f"{tag} ({task_id}): duplicate log events {dups}")
    final = log[-1] if log else None
    if not isinstance(final, TaskCompleted):
        audit.problem(f"{tag} ({task_id}): ended with {final!r}")
        return None
    audit.completed += 1
    audit.latencies.append(final.at - log[0].at)
    kinds = [e.type for e in log]
    expected_kinds = (
        ["TaskSubmitted", "StepStarted", "ModelResponded"]
        + ["ToolCompleted"] * calls
        + ["StepStarted", "ModelResponded", "TaskCompleted"]
    )
    if kinds != expected_kinds:
        audit.problem(f"{tag} ({task_id}): log {kinds}")
    return final


async def audit_call(
    client: Client,
    tag: str,
    task_id: str,
    call: ToolCall,
    result: ToolMessage,
    counters: dict[str, int],
    audit: Audit,
) -> tuple[int, bool]:
    """One tool call: a success ran its side effect exactly once and answered the sum, an
    "unknown outcome" ran it at most once, nothing else may happen. Returns what it adds to
    the task's sum and whether its outcome is unknown."""
    audit.tool_calls += 1
    key = str(call.args["call_key"])
    count = counters.get(key, 0)
    if result.tool_call_id != call.id:
        audit.problem(f"{tag}: result {result.tool_call_id} in the place of {call.id}")
    if result.status == "success":
        audit.succeeded_calls += 1
        if result.content != str(int(call.args["a"]) + int(call.args["b"])):
            audit.problem(f"{tag}: {key} answered {result.content!r}")
        if count != 1:
            audit.problem(f"{tag}: {key} succeeded but its side effect ran {count} times")
        return int(call.args["a"]) + int(call.args["b"]), False
    if UNKNOWN in str(result.content):
        audit.unknown_calls += 1
        if count > 1:
            audit.problem(f"{tag}: {key} (unknown outcome) ran {count} times")
        records = await client.redis.hgetall(client.names.task_calls(task_id))
        # the call's record, whichever step made it (``record_field``: ``<id>@<step>``)
        raw = next(
            (v for k, v in records.items() if k.decode().rpartition("@")[0] == call.id), None
        )
        record = json.loads(raw) if raw else {}
        if record.get("message", {}).get("status") == "success":
            audit.spurious_unknown += 1
        return 0, True
    audit.problem(f"{tag}: {key} failed: {result.content!r}")
    return 0, False


def audit_answer(
    tag: str,
    task_id: str,
    final: TaskCompleted,
    pairs: list[tuple[int, int]],
    total: int,
    unknown: int,
    audit: Audit,
) -> None:
    """With every outcome known the successes sum to the task's pairs; either way the
    answer is what the scripted model makes of the results it saw."""
    if unknown:
        audit.unknown_tasks += 1
    else:
        expected_total = sum(a + b for a, b in pairs)
        if total != expected_total:
            audit.problem(f"{tag}: successful results sum to {total}, not {expected_total}")
    answer = f"sum={total}" + (f" unknown={unknown}" if unknown else "")
    if final.answer != answer:
        audit.problem(f"{tag} ({task_id}): answer {final.answer!r}, expected {answer!r}")


async def describe_stuck(client: Client, names: Names, stuck: dict[str, str]) -> str:
    """The last events of (up to ten) unfinished tasks, pending entries and dead letters."""
    lines = [f"{len(stuck)} tasks did not finish"]
    for tag, task_id in list(stuck.items())[:10]:
        log = [event async for _, event in client.events(task_id, follow=False)]
        tail = [f"{e.type}:{getattr(e, 'step', '')}" for e in log[-4:]]
        state: Any = await client.redis.hgetall(names.task_state(task_id))
        status = {k.decode(): v.decode() for k, v in state.items() if k in (b"phase", b"step")}
        lines.append(f"  {tag} {task_id}: {status} last events {tail}")
    for service in SERVICES:
        for stream in names.inputs_of(service):
            with contextlib.suppress(aioredis.ResponseError):
                pending: Any = await client.redis.xpending(stream, GROUPS[service])
                if pending["pending"]:
                    lines.append(f"  pending in {stream}: {pending['pending']}")
    for _, letter in await client.dead_letters(20):
        lines.append(f"  dead letter from {letter.stream}: {letter.error[:300]}")
    return "\n".join(lines)


def counters_of(url: str, key: str) -> dict[str, int]:
    r = sync_client(url)
    try:
        raw: Any = r.hgetall(key)
        return {k.decode(): int(v) for k, v in raw.items()}
    finally:
        r.close()


def reclaims(texts: list[str]) -> list[int]:
    """The delivery number of every reclaim the services logged."""
    return [int(n) for text in texts for n in RECLAIMED.findall(text)]


@contextlib.contextmanager
def running(procs: ServiceProcesses, timeout: float = 120.0) -> Iterator[ServiceProcesses]:
    """Started (ten processes importing LangChain take a while on a busy machine), and
    stopped however the test ends."""
    try:
        procs.start(timeout=timeout)
        yield procs
    finally:
        procs.stop()


# -- the supervisor --------------------------------------------------------------------


class Supervisor:
    """Every ~``every_s``: SIGKILL a random service process and start a new one in its
    place. One process down at a time: the next kill waits until the last restarted process
    is up (has announced its consumers), so the kill rate adapts to how long a restart
    takes on this machine instead of keeping most processes busy importing. Keeps the logs
    of the killed processes (a respawn truncates them) and notes any process that died on
    its own."""

    def __init__(
        self, procs: ServiceProcesses, redis: aioredis.Redis, every_s: float, seed: int
    ) -> None:
        self.procs = procs
        self.redis = redis
        self.every_s = every_s
        self.rng = random.Random(seed)
        self.kills: Counter[str] = Counter()
        self.restart_wait_s = 0.0  # time spent waiting for a restarted process to be up
        self.old_logs: list[Path] = []
        self.exited: list[str] = []  # processes that died on their own
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    def total_kills(self) -> int:
        return sum(self.kills.values())

    async def stop(self) -> None:
        """Stop between two kills (never between a kill and its restart)."""
        self._stopping.set()
        if self._task is not None:
            await self._task
        self.check_exits()

    async def _stopped_within(self, seconds: float) -> bool:
        try:
            await asyncio.wait_for(self._stopping.wait(), seconds)
            return True
        except TimeoutError:
            return False

    async def _run(self) -> None:
        total = sum(len(procs) for procs in self.procs.procs.values())
        while True:
            if await self._stopped_within(self.rng.uniform(0.75, 1.25) * self.every_s):
                return
            waited = time.monotonic()
            while len(up := await self.up()) < total:
                self.check_exits()
                if await self._stopped_within(0.2):
                    return
            self.restart_wait_s += time.monotonic() - waited
            name, index = self.rng.choice(up)
            await self.kill_and_restart(name, index)

    async def up(self) -> list[tuple[str, int]]:
        raw: Any = await self.redis.hvals(Names(self.procs.prefix).consumers)
        pids = {json.loads(v)["pid"] for v in raw}
        return [
            (name, i)
            for name in self.procs.services
            for i, proc in enumerate(self.procs.procs[name])
            if proc.pid in pids and proc.poll() is None
        ]

    def check_exits(self) -> None:
        for name in self.procs.services:
            for i, proc in enumerate(self.procs.procs[name]):
                if proc.poll() is not None:
                    self.exited.append(f"{name}-{i} (exit {proc.returncode})")
                    self.respawn(name, i)

    async def kill_and_restart(self, name: str, index: int) -> None:
        proc = self.procs.procs[name][index]
        proc.send_signal(signal.SIGKILL)
        self.kills[name] += 1
        await asyncio.to_thread(proc.wait)
        self.respawn(name, index)

    def respawn(self, name: str, index: int) -> None:
        path = self.procs.logs[f"{name}-{index}"]
        if path.exists():  # kept beside the new one's log, which a respawn truncates
            kept = path.with_name(f"{path.stem}.{len(self.old_logs)}{path.suffix}")
            path.rename(kept)
            self.old_logs.append(kept)
        self.procs.procs[name][index] = self.procs._spawn(name, index)

    def log_paths(self) -> list[Path]:
        return self.old_logs + [p for p in self.procs.logs.values() if p.exists()]

    def logs(self) -> list[str]:
        return [p.read_text(errors="replace") for p in self.log_paths()]

    def lines_about(self, needles: list[str], limit: int = 40) -> list[str]:
        """Log lines (of every process, killed ones too) that mention one of ``needles``."""
        found = []
        for path in self.log_paths():
            for line in path.read_text(errors="replace").splitlines():
                if any(n in line for n in needles):
                    found.append(f"{path.name}: {line[:300]}")
        return sorted(found, key=lambda line: line.split(": ", 1)[1])[:limit]


# -- the chaos test -------------------------------------------------------------------

TASKS = 200
SUBMIT_PER_S = 5.0  # a steady load for 40 s, so kills land on work in flight
MODEL_LATENCY_S = 0.25
TOOL_DELAY_S = 0.1  # before and after the side effect: a kill there leaves it unknown
KILL_EVERY_S = 2.0
CLAIM_IDLE_MS = 1200


@pytest.fixture
def chaos_model() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(responder=chaos_responder, latency=MODEL_LATENCY_S) as server:
        yield server


@pytest.mark.timeout(300)
async def test_nothing_lost_nothing_twice_while_consumers_are_killed(
    redis_url: str, chaos_model: ScriptedOpenAIServer
) -> None:
    prefix = unique_prefix()
    names = Names(prefix)
    counter_key = f"{prefix}:chaos-counter"
    env = {
        "OPENAI_BASE_URL": chaos_model.url,
        "OPENAI_API_KEY": "test",
        "LOOPLINE_CLAIM_IDLE_MS": str(CLAIM_IDLE_MS),
        "LOOPLINE_GRACEFUL_TIMEOUT_S": "3",
        "CHAOS_COUNTER_URL": redis_url,
        "CHAOS_COUNTER_KEY": counter_key,
        "CHAOS_TOOL_DELAY_S": str(TOOL_DELAY_S),
    }
    run = uuid.uuid4().hex[:6]
    tags = [f"{run}-{n}" for n in range(TASKS)]
    spec = chaos_spec()
    started = time.monotonic()
    with running(ServiceProcesses(redis_url, prefix, env=env, replicas=2)) as procs:
        async with Client(redis_url, prefix) as client:
            supervisor = Supervisor(procs, client.redis, KILL_EVERY_S, seed=int(run, 16))
            supervisor.start()
            task_ids: dict[str, str] = {}
            try:
                for tag in tags:
                    task_ids[tag] = await client.submit(
                        spec, [HumanMessage(content=f"chaos {tag}")]
                    )
                    await asyncio.sleep(1 / SUBMIT_PER_S)
                unfinished = dict(task_ids)
                deadline = time.monotonic() + 150
                while unfinished and time.monotonic() < deadline:
                    await asyncio.sleep(0.5)
                    async with client.redis.pipeline(transaction=False) as pipe:
                        for task_id in unfinished.values():
                            pipe.hget(names.task_state(task_id), "status")
                        statuses = await pipe.execute()
                    unfinished = {
                        tag: task_id
                        for (tag, task_id), status in zip(unfinished.items(), statuses, strict=True)
                        if status not in (b"completed", b"failed")
                    }
            finally:
                await supervisor.stop()
            run_s = time.monotonic() - started
            if unfinished:
                report = await describe_stuck(client, names, unfinished)
                ids = [letter.entry_id for _, letter in await client.dead_letters(20)]
                trace = supervisor.lines_about([f" {i}{c}" for i in ids for c in " :"])
                pytest.fail(
                    f"{report}\n  what the services logged about them:\n" + "\n".join(trace)
                )

            counters = counters_of(redis_url, counter_key)
            audit = Audit()
            for tag, task_id in task_ids.items():
                await audit_task(client, tag, task_id, counters, audit)
            letters = await client.dead_letters(20)
        alive = {name: procs.alive(name) for name in procs.services}
        reclaimed = reclaims(supervisor.logs())  # read before stop() removes the logs
    over = {k: v for k, v in counters.items() if v > 1}

    print(
        f"\nchaos: {audit.tasks} tasks, {audit.completed} completed; wall time {run_s:.1f} s; "
        f"{supervisor.total_kills()} kills {dict(supervisor.kills)} "
        f"({supervisor.restart_wait_s:.0f} s spent waiting for restarts); "
        f"{len(reclaimed)} reclaimed entries (highest delivery {max(reclaimed, default=0)}); "
        f"duplicates: {audit.duplicates}; "
        f"tool calls {audit.tool_calls} ({audit.succeeded_calls} succeeded, "
        f"{audit.unknown_calls} unknown outcome in {audit.unknown_tasks} tasks, "
        f"{audit.spurious_unknown} of them while the first run finished); "
        f"task latency median {statistics.median(audit.latencies):.1f} s, "
        f"max {max(audit.latencies):.1f} s; "
        f"side effects > 1: {len(over)}; dead letters: {len(letters)}; "
        f"processes that exited on their own: {supervisor.exited}"
    )
    assert not over, f"side effects ran more than once: {over}"
    assert not letters, [f"{le.stream}: {le.error}" for _, le in letters]
    assert not supervisor.exited, f"service processes exited on their own: {supervisor.exited}"
    assert all(alive.values()), alive
    assert not audit.problems, "\n".join(audit.problems[:30])
    assert audit.completed == TASKS
    assert audit.duplicates == 0
    assert supervisor.total_kills() >= 5, "too little chaos to mean anything"


# -- Redis restarted under the pipeline --------------------------------------------------


async def retrying(make: Any, timeout: float = 30.0) -> Any:
    """Run ``make()`` (a coroutine factory) until Redis answers."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await make()
        except (aioredis.ConnectionError, aioredis.TimeoutError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


RESTART_TASKS = 30
READ_ERROR = re.compile(r"Message fetch error|reading \S+ failed")


@pytest.mark.timeout(240)
async def test_tasks_survive_a_redis_restart(redis_url: str, tmp_path: Path) -> None:
    directory = Path(tmp_path) / "redis"
    directory.mkdir()
    server = RedisServer(directory).start()
    prefix = unique_prefix()
    names = Names(prefix)
    counter_key = f"{prefix}:chaos-counter"
    try:
        with ScriptedOpenAIServer(responder=chaos_responder, latency=0.2) as model:
            env = {
                "OPENAI_BASE_URL": model.url,
                "OPENAI_API_KEY": "test",
                "LOOPLINE_CLAIM_IDLE_MS": "2000",
                "LOOPLINE_GRACEFUL_TIMEOUT_S": "3",
                # side effects are counted on the test session's Redis, which stays up
                "CHAOS_COUNTER_URL": redis_url,
                "CHAOS_COUNTER_KEY": counter_key,
            }
            with running(ServiceProcesses(server.url, prefix, env=env)) as procs:
                async with Client(server.url, prefix) as client:
                    run = uuid.uuid4().hex[:6]
                    spec = chaos_spec()
                    task_ids: dict[str, str] = {}
                    started = time.monotonic()
                    killed_at = restarted_at = 0.0
                    for n in range(RESTART_TASKS):
                        tag = f"{run}-{n}"
                        prompt = [HumanMessage(content=f"chaos {tag}")]
                        # a fixed id: a submit retried after a lost reply starts nothing twice
                        task_id = uuid.uuid5(uuid.NAMESPACE_URL, f"{prefix}/{tag}").hex
                        task_ids[tag] = await retrying(
                            lambda p=prompt, t=task_id: client.submit(spec, p, task_id=t)
                        )
                        await asyncio.sleep(0.1)
                        if n == RESTART_TASKS // 2:
                            server.kill()
                            killed_at = time.monotonic()
                            await asyncio.sleep(1.0)
                            server.start()
                            restarted_at = time.monotonic()

                    async def status(task_id: str) -> Any:
                        return await client.redis.hget(names.task_state(task_id), "status")

                    unfinished = dict(task_ids)
                    deadline = time.monotonic() + 90
                    while unfinished and time.monotonic() < deadline:
                        await asyncio.sleep(0.5)
                        for tag, task_id in list(unfinished.items()):
                            value = await retrying(lambda t=task_id: status(t))
                            if value in (b"completed", b"failed"):
                                del unfinished[tag]
                    elapsed = time.monotonic() - started
                    exited = {
                        name: [p.returncode for p in procs.procs[name]]
                        for name in procs.services
                        if not procs.alive(name)
                    }
                    if unfinished or exited:
                        report = await describe_stuck(client, names, unfinished)
                        pytest.fail(
                            f"{report}\nservice processes that exited: {exited}\n"
                            + "\n".join(procs.output(name)[-1500:] for name in exited)
                        )
                    counters = counters_of(redis_url, counter_key)
                    audit = Audit()
                    for tag, task_id in task_ids.items():
                        await audit_task(client, tag, task_id, counters, audit)
                logs = [p.read_text(errors="replace") for p in procs.logs.values()]
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)

    read_errors = sum(len(READ_ERROR.findall(text)) for text in logs)
    print(
        f"\nredis restart: {audit.tasks} tasks, {audit.completed} completed; redis down "
        f"{restarted_at - killed_at:.1f} s; all done {elapsed:.1f} s after the first submit; "
        f"{len(reclaims(logs))} reclaimed entries; {read_errors} failed reads logged; "
        f"unknown outcomes: {audit.unknown_calls}; duplicates: {audit.duplicates}"
    )
    assert not audit.problems, "\n".join(audit.problems[:30])
    assert audit.completed == RESTART_TASKS

"""Test-only helpers. Where Redis comes from, services as real OS processes, unique
prefixes and the twin scripted servers are ``loopline.testing``'s (shipped, used by the
benchmarks too); they are imported here so tests keep one place to import from.

For the fast tier: ``run_entry`` delivers an event to a service's stream and runs it
through that service's entry runner (``services.runner``) in this process, as a consumer
does, and reports what Redis showed at the moment its handler returned."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from contracts.agent import AgentSpec
from contracts.events import (
    ModelResponded,
    StepStarted,
    TaskSubmitted,
    ToolCompleted,
    dump_event,
    parse_event,
)
from contracts.messages import AIMessage, HumanMessage, ToolCall, ToolMessage
from contracts.streams import DATA_FIELD, GROUPS
from loopline.testing.harness import services_on, twin_servers, unique_prefix
from loopline.testing.processes import ServiceProcesses
from loopline.testing.redis_provider import RedisProvider
from services.runner import EntryRunner
from services.runtime import Runtime
from services.tasks.loop import Loop
from services.tasks.store import TaskStore
from services.tasks.transitions import StartTask

__all__ = [
    "EMBEDDED_PREFIX",
    "REPO_ROOT",
    "SPEC",
    "Handled",
    "MakeRuntime",
    "RedisProvider",
    "ServiceProcesses",
    "Terminal",
    "completed",
    "embedded_agent",
    "events_on",
    "issue_calls",
    "loopline_up",
    "pending_on",
    "replied",
    "reply_with_calls",
    "restart",
    "result",
    "run_cli",
    "run_entry",
    "run_in_terminal",
    "services_on",
    "start_task",
    "twin_servers",
    "unique_prefix",
    "wait_for",
    "wait_until_acked",
]

REPO_ROOT = Path(__file__).resolve().parents[1]

EMBEDDED_PREFIX = unique_prefix()
"""The prefix of every embedded agent the tests make: the in-process services start once
per process, on the prefix of the first agent that starts them, so every test module's
embedded agents share it (another prefix's tasks would wait for no consumer)."""


async def wait_for(predicate: Any, timeout: float = 10.0, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        await asyncio.sleep(interval)
    raise TimeoutError("condition not met in time")


def wait_until_acked(r: Any, names: Any, services: Sequence[str], timeout: float = 10.0) -> None:
    """Wait until no entry is pending in any group of these services: a dead letter is
    written just before its entry is acked, so pending counts settle a moment later."""
    deadline = time.monotonic() + timeout
    while True:
        pending = {
            stream: r.xpending(stream, GROUPS[service])["pending"]
            for service in services
            for stream in names.inputs_of(service)
        }
        if not any(pending.values()):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"entries still pending: {pending}")
        time.sleep(0.05)


def restart(stack: ServiceProcesses, name: str) -> None:
    """Kill every process of one service (SIGKILL: no goodbye) and start it again."""
    for i, proc in enumerate(stack.procs[name]):
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        stack.procs[name][i] = stack._spawn(name, i + 100)
    stack.wait_ready(90)


@contextlib.contextmanager
def loopline_up(env: dict[str, str], log_name: str) -> Iterator[None]:
    """``loopline up`` (every service in one process) as a user starts it, with ``env``
    (its ``REDIS_URL`` and ``LOOPLINE_PREFIX`` among them), until the block ends; its
    output goes to ``/tmp/loopline-up-LOG_NAME.log``."""
    from loopline import lifetime

    log = Path(f"/tmp/loopline-up-{log_name}.log")
    proc = lifetime.spawn(
        [sys.executable, "-m", "loopline", "up"],
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        cwd=REPO_ROOT,
    )
    procs = ServiceProcesses(env["REDIS_URL"], env["LOOPLINE_PREFIX"])
    procs.procs = {name: [proc] for name in procs.services}
    try:
        procs.wait_ready(120)  # a loaded machine imports slowly
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=15)


@dataclass
class Terminal:
    """What a command wrote to a pseudo-terminal: its raw bytes decoded (escape
    sequences and all), and its exit status."""

    returncode: int
    output: str


def run_in_terminal(
    args: Sequence[str],
    *,
    env: dict[str, str],
    cwd: Path | str | None = None,
    timeout: float = 120,
    columns: int = 120,
    rows: int = 40,
) -> Terminal:
    """Run ``args`` with a pseudo-terminal as stdin, stdout and stderr (a person at a
    terminal of ``columns`` x ``rows``), collecting everything it draws."""
    import fcntl
    import pty
    import struct
    import termios

    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    proc = subprocess.Popen(
        list(args), env=env, cwd=cwd, stdin=child, stdout=child, stderr=child, close_fds=True
    )
    os.close(child)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{args} still running after {timeout} s")
            try:
                data = os.read(main, 65536)
            except OSError:  # EIO: the child side is closed, everything was read
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(main)
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
    return Terminal(proc.returncode, b"".join(chunks).decode("utf-8", "replace"))


def run_cli(
    procs: ServiceProcesses, *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``loopline ARGS`` as a user runs it against the deployment of ``procs``."""
    env = {**os.environ, "REDIS_URL": procs.redis_url, "LOOPLINE_PREFIX": procs.prefix}
    return subprocess.run(
        [sys.executable, "-m", "loopline", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO_ROOT,
    )


async def issue_calls(
    redis: Any,
    names: Any,
    task_id: str,
    agent_id: str,
    call_ids: Sequence[str],
    step: int = 1,
    digests: dict[str, str] | None = None,
) -> None:
    """A running task in the tools phase of ``step`` waiting for ``call_ids`` (with the
    calls' ``digests``, if given), as the loop's transitions leave it: the tools service
    runs only calls a state issued."""
    await redis.hset(
        names.task_state(task_id),
        mapping={
            "status": "running",
            "step": step,
            "phase": "tools",
            "agent": agent_id,
            "expected": json.dumps(list(call_ids)),
            "max_steps": 5,
            "issued": json.dumps(digests or {}) if digests else "",
        },
    )


# -- the fast tier: entries run in this process ---------------------------------------


async def events_on(redis: aioredis.Redis, stream: str, kind: type | None = None) -> list[Any]:
    """The events on a stream, oldest first (of one kind only, when given)."""
    found = [parse_event(f[DATA_FIELD.encode()]) for _, f in await redis.xrange(stream)]
    return [e for e in found if kind is None or isinstance(e, kind)]


async def pending_on(redis: aioredis.Redis, stream: str, service: str) -> int:
    """How many entries of the stream the service's group has read and not acked."""
    info: Any = await redis.xpending(stream, GROUPS[service])
    return int(info["pending"])


MakeRuntime = Callable[..., Awaitable[Runtime]]
"""The ``make_runtime`` fixture: ``await make_runtime(**settings)``."""


@dataclass
class Handled:
    """One entry a service ran (``run_entry``), and what Redis showed meanwhile."""

    entry_id: str
    acked_by_handler: bool = False
    """The entry was acked by the time its handler returned, before the runner settled
    it: a fused transition committed it, its outputs and writes in its own script."""
    seen: Any = None
    """What ``probe`` read from Redis at that moment."""


async def run_entry(
    rt: Runtime,
    service: str,
    event: Any,
    handler: Callable[[Any], Awaitable[None]],
    *,
    stream: str | None = None,
    probe: Callable[[], Awaitable[Any]] | None = None,
) -> Handled:
    """Put ``event`` on the service's input stream (its first, or ``stream``), read it in
    the service's group and run it through an ``EntryRunner`` with ``handler``, which
    settles its fate (ack, retry, dead letter) as a consumer's would. ``probe`` reads
    Redis right after the handler returned (``Handled.seen``)."""
    stream = stream or rt.names.inputs_of(service)[0]
    data = event if isinstance(event, bytes) else dump_event(event)
    added: Any = await rt.redis.xadd(stream, {DATA_FIELD: data})
    # The group reads this entry next: what other stages published on the stream before
    # it (outputs a test inspects with XRANGE) is passed over, never delivered here.
    await rt.redis.xgroup_setid(stream, GROUPS[service], _just_before(added.decode()))
    read: Any = await rt.redis.xreadgroup(GROUPS[service], "test", {stream: ">"}, count=1)
    raw_id, fields = read[0][1][0]
    handled = Handled(raw_id.decode())

    async def observed(parsed: Any) -> None:
        await handler(parsed)
        left: Any = await rt.redis.xpending_range(
            stream, GROUPS[service], min=raw_id, max=raw_id, count=1
        )
        handled.acked_by_handler = not left
        if probe is not None:
            handled.seen = await probe()

    await EntryRunner(rt, service, stream, observed, "test").run(raw_id, fields)
    return handled


def _just_before(entry_id: str) -> str:
    ms, seq = (int(part) for part in entry_id.split("-"))
    return f"{ms}-{seq - 1}" if seq else f"{ms - 1}-{2**64 - 1}"


# -- a task of SPEC, driven through the loop's transitions --


SPEC = AgentSpec(model={"name": "fake", "params": {}}, tools=["tests.tooling:add"])  # type: ignore[arg-type]
"""An agent with one tool and no loop-stage hooks: its transitions fuse."""


async def start_task(rt: Runtime, task_id: str, max_steps: int = 5) -> None:
    """A task of ``SPEC`` started (its StartTask applied), in the model phase of step 1."""
    agent_id = await rt.save_agent(SPEC)
    store = TaskStore(rt.redis, rt.names, rt.register_script)
    await store.apply(
        task_id,
        StartTask(
            agent_id=agent_id,
            max_steps=max_steps,
            submitted_event=dump_event(
                TaskSubmitted(task_id=task_id, agent=SPEC, messages=[HumanMessage(content="hi")])
            ),
            step_event=dump_event(StepStarted(task_id=task_id, step=1)),
            retention=3600,
            messages=[HumanMessage(content="hi", id=f"{task_id}:in:0").model_dump_json()],
            entry="",
        ),
    )


def reply_with_calls(task_id: str, n: int) -> ModelResponded:
    calls = [ToolCall(id=f"c{i}", name="add", args={"a": i, "b": 1}) for i in range(n)]
    return ModelResponded(
        task_id=task_id,
        step=1,
        agent_id=SPEC.agent_id,
        message=AIMessage(content="", tool_calls=calls),
        transcript_len=1,
    )


def result(task_id: str, call_id: str) -> ToolCompleted:
    return ToolCompleted(
        task_id=task_id,
        step=1,
        agent_id=SPEC.agent_id,
        message=ToolMessage(content="ok", tool_call_id=call_id, name="add"),
    )


async def replied(rt: Runtime, loop: Loop, reply: ModelResponded) -> Handled:
    """The model's reply, applied by the model service (its inline hand-over)."""
    return await run_entry(rt, "model", reply, loop.model_responded)


async def completed(
    rt: Runtime, loop: Loop, done: ToolCompleted, join_len: int, at: int | None = None
) -> Handled:
    """A tool's result, applied by the tools service with the call's join length."""
    return await run_entry(rt, "tools", done, lambda ev: loop.tool_completed(ev, join_len, at))


def embedded_agent(redis_url: str, monkeypatch: Any, server: Any, **kwargs: Any) -> Any:
    """loopline's agent with every service in this process (on the tests' Redis, not a
    server of its own), its model the scripted ``server``, a thread's state kept as with
    LangGraph's ``InMemorySaver``."""
    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.memory import InMemorySaver

    import loopline.embedded
    from loopline import create_agent
    from services.settings import Settings

    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.setattr(loopline.embedded, "embedded_url", lambda: redis_url)
    agent = create_agent(
        ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="test"),
        checkpointer=InMemorySaver(),
        settings=Settings(prefix=EMBEDDED_PREFIX),
        **kwargs,
    )
    assert agent.embedded
    return agent

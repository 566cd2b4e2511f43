"""Threads on the bus: runs that continue a conversation, the multitask strategies
(reject, enqueue, interrupt, rollback) with two replicas of every service, one active run
per thread under a race, and events that stay flat as a thread grows over 30 runs.
Services as separate processes, the scripted model over HTTP, a real Redis."""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import redis as syncredis

from contracts import HumanMessage
from contracts.agent import AgentSpec
from contracts.events import TaskCompleted, TaskFailed, TaskSubmitted, parse_event
from contracts.streams import DATA_FIELD, Names
from loopline.client import Client
from loopline.testing import held_tool
from loopline.testing.scripted import Reply, ScriptedOpenAIServer, ScriptedToolCall
from tests.support import ServiceProcesses, run_cli, unique_prefix, wait_for

pytestmark = pytest.mark.asyncio(loop_scope="module")

COUNTER = f"threads-test:{uuid.uuid4().hex[:8]}"


def last_user_text(body: dict[str, Any]) -> str:
    users = [m for m in body["messages"] if m.get("role") == "user"]
    return str(users[-1]["content"]) if users else ""


def respond(body: dict[str, Any]) -> Reply:
    """By the run's own prompt (the last user message): ``hold KEY`` calls the held tool
    once, then answers; ``say X`` answers at once; ``big N`` makes N KB of tool output."""
    text = last_user_text(body)
    messages = body["messages"]
    last_user = max(i for i, m in enumerate(messages) if m.get("role") == "user")
    turn = sum(1 for m in messages[last_user:] if m.get("role") == "assistant")
    word, _, rest = text.partition(" ")
    if word == "hold" and turn == 0:
        call = ScriptedToolCall("wait_for_release", {"call_key": rest, "timeout_s": 60})
        return Reply(tool_calls=(call,))
    if word == "big" and turn == 0:
        return Reply(tool_calls=(ScriptedToolCall("big_output", {"n": 3000}),))
    return Reply(content=f"answer to {text}")


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(responder=respond) as srv:
        yield srv


@pytest.fixture(scope="module")
def stack(redis_url: str, server: ScriptedOpenAIServer) -> Iterator[ServiceProcesses]:
    env = {
        "OPENAI_BASE_URL": server.url,
        "OPENAI_API_KEY": "test",
        "CHAOS_COUNTER_URL": redis_url,
        "CHAOS_COUNTER_KEY": COUNTER,
    }
    with ServiceProcesses(
        redis_url, unique_prefix(), env=env, services=("loop", "model", "tools"), replicas=2
    ) as procs:
        yield procs


SPEC = AgentSpec.model_validate(
    {
        "model": "gpt-4o-mini",
        "tools": [
            "loopline.testing.held_tool:wait_for_release",
            "tests.tooling:big_output",
        ],
    }
)


@pytest_asyncio.fixture(loop_scope="module")
async def client(stack: ServiceProcesses) -> Any:
    async with Client(stack.redis_url, stack.prefix) as c:
        yield c


async def run(client: Client, thread: str, prompt: str, strategy: str = "reject") -> str:
    return await client.submit(
        SPEC, [HumanMessage(content=prompt)], thread_id=thread, multitask_strategy=strategy
    )


async def outcome(client: Client, task_id: str) -> TaskCompleted | TaskFailed:
    _, event = await asyncio.wait_for(client.outcome(task_id), 60)
    assert isinstance(event, TaskCompleted | TaskFailed)
    return event


def sync_redis(stack: ServiceProcesses) -> syncredis.Redis:
    return syncredis.Redis.from_url(stack.redis_url)


async def started(stack: ServiceProcesses, key: str) -> None:
    r = sync_redis(stack)
    await wait_for(lambda: r.hexists(held_tool.started_key(COUNTER), key), timeout=30)


def release(stack: ServiceProcesses, key: str) -> None:
    sync_redis(stack).set(held_tool.release_key(COUNTER, key), "1")


def texts(messages: list[Any]) -> list[str]:
    return [m.text() for m in messages]


async def test_runs_of_a_thread_continue_its_conversation(
    client: Client, stack: ServiceProcesses, server: ScriptedOpenAIServer
) -> None:
    thread = f"th-{uuid.uuid4().hex[:8]}"
    first = await run(client, thread, "say one")
    assert isinstance(await outcome(client, first), TaskCompleted)
    second = await run(client, thread, "say two")
    done = await outcome(client, second)
    assert isinstance(done, TaskCompleted) and done.answer == "answer to say two"
    assert texts(await client.messages(second)) == [
        "say one",
        "answer to say one",
        "say two",
        "answer to say two",
    ]
    # the model saw the first run's turn in the second run's request
    request = next(r for r in server.chat_requests() if last_user_text(r) == "say two")
    assert [m["content"] for m in request["messages"]] == [
        "say one",
        "answer to say one",
        "say two",
    ]
    names = Names(stack.prefix)
    r = sync_redis(stack)
    # the run's end is written back just after its log says it ended
    await wait_for(lambda: r.hget(names.thread_state(thread), "active") == b"")
    assert r.llen(names.thread_messages(thread)) == 4
    assert {k.decode(): v.decode() for k, v in r.hgetall(names.thread_runs(thread)).items()} == {
        first: "completed",
        second: "completed",
    }
    # the thread's own log of runs: each run's submission and end, in order
    kinds = [parse_event(f[DATA_FIELD.encode()]) for _, f in r.xrange(names.thread_log(thread))]
    assert [(type(e).__name__, e.task_id) for e in kinds] == [
        ("TaskSubmitted", first),
        ("TaskCompleted", first),
        ("TaskSubmitted", second),
        ("TaskCompleted", second),
    ]
    # nothing silently gone: a thread lasts until deleted (no LOOPLINE_THREAD_TTL_S set)
    assert r.ttl(names.thread_messages(thread)) == -1
    assert r.ttl(names.thread_state(thread)) == -1


async def test_reject_fails_the_new_run_at_once_with_the_reason(
    client: Client, stack: ServiceProcesses
) -> None:
    thread, key = f"th-{uuid.uuid4().hex[:8]}", f"rej-{uuid.uuid4().hex[:6]}"
    busy = await run(client, thread, f"hold {key}")
    await started(stack, key)
    second = await run(client, thread, "say meanwhile")  # reject is the default
    failed = await outcome(client, second)
    assert isinstance(failed, TaskFailed)
    assert f"thread {thread} is busy with run {busy}" in failed.reason
    assert "multitask_strategy='reject'" in failed.reason
    release(stack, key)
    assert isinstance(await outcome(client, busy), TaskCompleted)
    # the refused run left no trace in the conversation
    r = sync_redis(stack)
    thread_texts = [
        m.decode() for m in r.lrange(Names(stack.prefix).thread_messages(thread), 0, -1)
    ]
    assert not any("meanwhile" in m for m in thread_texts)


async def test_enqueue_runs_after_the_busy_run(client: Client, stack: ServiceProcesses) -> None:
    thread, key = f"th-{uuid.uuid4().hex[:8]}", f"enq-{uuid.uuid4().hex[:6]}"
    busy = await run(client, thread, f"hold {key}")
    await started(stack, key)
    queued = await run(client, thread, "say later", "enqueue")
    await asyncio.sleep(0.5)
    assert await client.status(queued) is None  # waits: not started
    release(stack, key)
    assert isinstance(await outcome(client, busy), TaskCompleted)
    try:
        done = await outcome(client, queued)
    except TimeoutError:
        print(
            "LOOP",
            stack.output("loop"),
            "MODEL",
            stack.output("model"),
            "TOOLS",
            stack.output("tools"),
        )
        raise
    assert isinstance(done, TaskCompleted)
    got = texts(await client.messages(queued))
    assert got[0] == f"hold {key}" and got[-2:] == ["say later", "answer to say later"]
    assert len(got) == 6  # the busy run's four messages, then the queued run's two


async def test_interrupt_stops_the_busy_run_at_its_step_boundary_keeping_its_work(
    client: Client, stack: ServiceProcesses
) -> None:
    thread, key = f"th-{uuid.uuid4().hex[:8]}", f"int-{uuid.uuid4().hex[:6]}"
    busy = await run(client, thread, f"hold {key}")
    await started(stack, key)
    newer = await run(client, thread, "say instead", "interrupt")
    await asyncio.sleep(0.5)
    assert await client.status(busy) == "running"  # its tool still runs: no boundary yet
    release(stack, key)
    stopped = await outcome(client, busy)
    assert isinstance(stopped, TaskFailed) and stopped.reason.startswith("interrupted: run")
    done = await outcome(client, newer)
    assert isinstance(done, TaskCompleted)
    got = await client.messages(newer)
    # what the busy run did (its call and the result) stays; its next model call never ran
    assert [m.type for m in got] == ["human", "ai", "tool", "human", "ai"]
    assert got[2].text() == f"released {key}"
    r = sync_redis(stack)
    await wait_for(lambda: r.hget(Names(stack.prefix).thread_state(thread), "active") == b"")
    runs = {
        k.decode(): v.decode()
        for k, v in r.hgetall(Names(stack.prefix).thread_runs(thread)).items()
    }
    assert runs == {busy: "failed", newer: "completed"}


async def test_rollback_stops_the_busy_run_and_drops_its_changes(
    client: Client, stack: ServiceProcesses
) -> None:
    thread, key = f"th-{uuid.uuid4().hex[:8]}", f"rb-{uuid.uuid4().hex[:6]}"
    base = await run(client, thread, "say base")
    assert isinstance(await outcome(client, base), TaskCompleted)
    busy = await run(client, thread, f"hold {key}")
    await started(stack, key)
    newer = await run(client, thread, "say redo", "rollback")
    stopped = await outcome(client, busy)  # at once: the held tool still runs
    assert isinstance(stopped, TaskFailed) and stopped.reason.startswith("rolled back: run")
    done = await outcome(client, newer)
    assert isinstance(done, TaskCompleted)
    release(stack, key)
    assert texts(await client.messages(newer)) == [
        "say base",
        "answer to say base",
        "say redo",
        "answer to say redo",
    ]
    r = sync_redis(stack)
    runs = {
        k.decode(): v.decode()
        for k, v in r.hgetall(Names(stack.prefix).thread_runs(thread)).items()
    }
    assert runs[busy] == "rolled_back"


async def test_one_active_run_per_thread_under_a_race(
    client: Client, stack: ServiceProcesses
) -> None:
    """Two loop replicas take submissions for one thread at once: one run holds the
    thread, the others are refused (reject); queued runs (enqueue) never overlap."""
    thread, key = f"th-{uuid.uuid4().hex[:8]}", f"race-{uuid.uuid4().hex[:6]}"
    ids = [f"race-{i}-{uuid.uuid4().hex[:6]}" for i in range(8)]
    r = sync_redis(stack)
    names = Names(stack.prefix)
    # one write of all eight: both loop replicas read them in the same moment
    pipe = r.pipeline()
    for task_id in ids:
        event = TaskSubmitted(
            task_id=task_id,
            agent=SPEC,
            messages=[HumanMessage(content=f"hold {key}")],
            thread_id=thread,
        )
        pipe.xadd(names.tasks, {DATA_FIELD: event.model_dump_json()})
    pipe.execute()
    await started(stack, key)
    await asyncio.sleep(0.5)
    outcomes = {}
    release(stack, key)
    for task_id in ids:
        outcomes[task_id] = await outcome(client, task_id)
    winners = [t for t, e in outcomes.items() if isinstance(e, TaskCompleted)]
    assert len(winners) == 1
    assert all(
        "is busy with run" in e.reason for e in outcomes.values() if isinstance(e, TaskFailed)
    )
    assert r.hget(COUNTER, key) == b"1"  # the held tool ran for the one winner only

    # enqueue: six runs at once, each ran alone, in some order, and all joined the thread
    queued_thread = f"th-{uuid.uuid4().hex[:8]}"
    order = [f"q-{i}-{uuid.uuid4().hex[:6]}" for i in range(6)]
    pipe = r.pipeline()
    for i, task_id in enumerate(order):
        event = TaskSubmitted(
            task_id=task_id,
            agent=SPEC,
            messages=[HumanMessage(content=f"say q{i}")],
            thread_id=queued_thread,
            multitask_strategy="enqueue",
        )
        pipe.xadd(names.tasks, {DATA_FIELD: event.model_dump_json()})
    pipe.execute()
    spans = []
    for task_id in order:
        assert isinstance(await outcome(client, task_id), TaskCompleted)
        log = r.xrange(names.task_log(task_id))
        spans.append((log[0][0], log[-1][0]))
    spans.sort()
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert end < start  # the next run started only after the previous one ended
    await wait_for(lambda: r.hget(names.thread_state(queued_thread), "active") == b"")
    assert r.llen(names.thread_messages(queued_thread)) == 12


async def test_event_sizes_stay_flat_over_30_runs_on_one_thread(
    client: Client, stack: ServiceProcesses
) -> None:
    thread = f"th-{uuid.uuid4().hex[:8]}"
    tasks = []
    for i in range(30):
        task_id = await run(client, thread, f"big {i}")
        assert isinstance(await outcome(client, task_id), TaskCompleted)
        tasks.append(task_id)
    names = Names(stack.prefix)
    r = sync_redis(stack)
    sizes: dict[str, dict[int, int]] = {}
    wanted = {tasks[0]: 0, tasks[-1]: 29}
    streams = (names.tasks, names.model, names.tools, names.loop, names.thread_log(thread))
    for stream in (*streams, names.task_log(tasks[0]), names.task_log(tasks[-1])):
        for _, fields in r.xrange(stream):
            raw = fields[DATA_FIELD.encode()]
            event = parse_event(raw)
            if event.task_id in wanted:
                kind = f"{event.type}:{getattr(event, 'step', 0)}"
                sizes.setdefault(kind, {})[wanted[event.task_id]] = len(raw)
    for kind in (
        "TaskSubmitted:0",
        "ModelRequested:1",
        "ModelResponded:1",
        "ToolRequested:1",
        "ToolCompleted:1",
        "TaskCompleted:0",
    ):
        assert 0 in sizes[kind] and 29 in sizes[kind], (kind, sizes.get(kind))
        assert sizes[kind][29] - sizes[kind][0] <= 48, (kind, sizes[kind])
    thread_bytes = sum(len(m) for m in r.lrange(names.thread_messages(thread), 0, -1))
    assert thread_bytes > 29 * 3000  # the thread did grow; its events did not


async def test_cli_runs_on_a_thread_and_shows_lists_and_removes_it(
    client: Client, stack: ServiceProcesses, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread = f"cli-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("OPENAI_BASE_URL", stack.env["OPENAI_BASE_URL"])
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    agent_file = tmp_path / "agent.json"
    agent_file.write_text(json.dumps({"model": "gpt-4o-mini", "tools": SPEC.tools}))
    for prompt in ("say first", "say second"):
        done = await asyncio.to_thread(
            run_cli, stack, "run", prompt, "--agent", str(agent_file), "--thread", thread
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"answer to {prompt}"
    r = sync_redis(stack)
    await wait_for(lambda: r.hget(Names(stack.prefix).thread_state(thread), "active") == b"")
    shown = await asyncio.to_thread(run_cli, stack, "threads", "show", thread, "--json")
    assert shown.returncode == 0, shown.stderr
    state = json.loads(shown.stdout)
    assert [m["content"] for m in state["messages"]] == [
        "say first",
        "answer to say first",
        "say second",
        "answer to say second",
    ]
    assert sorted(state["runs"].values()) == ["completed", "completed"]
    history = await asyncio.to_thread(run_cli, stack, "threads", "history", thread, "--json")
    assert history.returncode == 0, history.stderr
    checkpoints = json.loads(history.stdout)  # each turn: its input, __start__, the model
    assert [(c["step"], c["source"], c["next"], c["messages"]) for c in checkpoints] == [
        (4, "loop", [], 4),
        (3, "loop", ["model"], 3),
        (2, "input", ["__start__"], 2),
        (1, "loop", [], 2),
        (0, "loop", ["model"], 1),
        (-1, "input", ["__start__"], 0),
    ]
    listed = await asyncio.to_thread(run_cli, stack, "threads", "list", "--json")
    assert thread in [t["thread_id"] for t in json.loads(listed.stdout)]
    removed = await asyncio.to_thread(run_cli, stack, "threads", "rm", thread)
    assert removed.returncode == 0 and f"removed thread {thread}" in removed.stdout
    gone = await asyncio.to_thread(run_cli, stack, "threads", "show", thread)
    assert gone.returncode != 0 and f"no thread '{thread}'" in gone.stderr
    assert not r.exists(*Names(stack.prefix).thread_keys(thread))


async def test_a_queued_run_can_be_cancelled_before_it_starts(
    client: Client, stack: ServiceProcesses
) -> None:
    thread, key = f"th-{uuid.uuid4().hex[:8]}", f"cq-{uuid.uuid4().hex[:6]}"
    busy = await run(client, thread, f"hold {key}")
    await started(stack, key)
    queued = await run(client, thread, "say never", "enqueue")
    after = await run(client, thread, "say after", "enqueue")
    await wait_for(lambda: sync_redis(stack).llen(Names(stack.prefix).thread_queue(thread)) == 2)
    await client.cancel(queued, "changed my mind", thread_id=thread)
    failed = await outcome(client, queued)
    assert isinstance(failed, TaskFailed) and failed.reason == "cancelled: changed my mind"
    release(stack, key)
    assert isinstance(await outcome(client, busy), TaskCompleted)
    assert isinstance(await outcome(client, after), TaskCompleted)
    got = texts(await client.messages(after))
    assert "say never" not in got and got[-2:] == ["say after", "answer to say after"]
    r = sync_redis(stack)
    assert r.hget(Names(stack.prefix).thread_runs(thread), queued) == b"cancelled"

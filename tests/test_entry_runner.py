"""One entry runner for read and reclaimed entries, on a real Redis: a reclaimed entry
commits what its handler published together with its ack, as a read one does; the
reclaimer gives up on an entry after N deliveries through the same runner; release hands
a leaving consumer's entries on at once."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from redis.exceptions import OutOfMemoryError

from contracts.events import AnyEvent, DeadLettered, StepStarted, dump_event
from contracts.streams import DATA_FIELD, GROUPS
from services.consumer import StreamConsumer
from services.errors import PermanentError
from services.reliability import Reclaimer
from services.runner import NONE_RECORDED, EntryRunner
from services.runtime import Handler, Runtime
from tests.support import MakeRuntime, events_on, pending_on, run_entry

pytestmark = pytest.mark.fast

SERVICE = "tools"
GROUP = GROUPS[SERVICE]


@pytest.fixture
async def rt(make_runtime: MakeRuntime) -> Runtime:
    return await make_runtime(max_deliveries=3)


def runner_of(rt: Runtime, handler: Handler, consumer: str = "alive") -> EntryRunner:
    return EntryRunner(rt, SERVICE, rt.names.tools, handler, consumer)


def reclaimer_of(rt: Runtime, runner: EntryRunner, claim_idle_ms: int = 10) -> Reclaimer:
    return Reclaimer(
        redis=rt.redis,
        service=SERVICE,
        consumer=runner.consumer,
        runners={runner.stream: runner},
        claim_idle_ms=claim_idle_ms,
        consumers_key=rt.names.consumers,
    )


async def put(rt: Runtime, task_id: str, *, fetched: bool = True) -> str:
    """An entry on the tools stream; ``fetched``: by a consumer that then died without
    acking it."""
    event = StepStarted(task_id=task_id, step=1)
    entry_id: Any = await rt.redis.xadd(rt.names.tools, {DATA_FIELD: dump_event(event)})
    if fetched:
        await rt.redis.xreadgroup(GROUP, "dead-one", {rt.names.tools: ">"})
    return str(entry_id.decode())


async def pending(rt: Runtime) -> int:
    return await pending_on(rt.redis, rt.names.tools, SERVICE)


async def published_and_pending(rt: Runtime, out: str) -> tuple[int, int]:
    """The output stream's length and the input's pending count, read at one instant."""
    async with rt.redis.pipeline(transaction=True) as pipe:
        pipe.xlen(out)
        pipe.xpending(rt.names.tools, GROUP)
        length, info = await pipe.execute()
    return int(length), int(info["pending"])


async def test_a_reclaimed_entry_commits_its_publishes_with_its_ack(rt: Runtime) -> None:
    out = f"{rt.names.prefix}:out"
    gate = asyncio.Event()
    reached = asyncio.Event()
    attempts: list[int] = []

    async def handler(event: AnyEvent) -> None:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("the first delivery fails")
        await rt.publish(out, StepStarted(task_id=event.task_id, step=2))
        reached.set()
        await gate.wait()

    entry_id = await put(rt, "t1", fetched=False)
    # The first delivery, read by a consumer, fails: it stays pending, its error recorded.
    consumer = StreamConsumer(rt, runner_of(rt, handler, "first"))
    consumer.start()
    try:
        for _ in range(200):
            if await rt.redis.hlen(rt.names.errors):
                break
            await asyncio.sleep(0.01)
    finally:
        await consumer.stop()
    field = f"{rt.names.tools}|{entry_id}"
    assert await rt.redis.hget(rt.names.errors, field) == b"RuntimeError: the first delivery fails"

    seen: list[tuple[int, int]] = []

    async def watch() -> None:
        while True:
            seen.append(await published_and_pending(rt, out))
            await asyncio.sleep(0)

    watcher = asyncio.create_task(watch())
    await asyncio.sleep(0.03)  # idle past the claim time
    # Another process's reclaimer takes it over and runs it through its own runner.
    reclaim = asyncio.create_task(reclaimer_of(rt, runner_of(rt, handler)).run_once())
    await asyncio.wait_for(reached.wait(), 5)
    # The handler has published and not returned: nothing is out, the entry is pending.
    assert await published_and_pending(rt, out) == (0, 1)
    gate.set()
    assert await asyncio.wait_for(reclaim, 5) == 1
    await asyncio.sleep(0.01)
    watcher.cancel()

    assert await published_and_pending(rt, out) == (1, 0)
    assert [(e.type, e.task_id, e.step) for e in await events_on(rt.redis, out)] == [
        ("StepStarted", "t1", 2)
    ]
    # Published and acked at one instant: never one without the other.
    assert set(seen) <= {(0, 1), (1, 0)} and (1, 0) in seen
    assert await rt.redis.hlen(rt.names.errors) == 0  # cleared with the ack
    assert len(attempts) == 2


async def test_the_reclaimer_gives_up_after_n_deliveries_with_the_last_error(
    rt: Runtime,
) -> None:
    out = f"{rt.names.prefix}:out"
    attempts: list[str] = []

    async def failing(event: AnyEvent) -> None:
        attempts.append(event.task_id)
        await rt.publish(out, StepStarted(task_id=event.task_id, step=len(attempts)))
        raise RuntimeError(f"attempt {len(attempts)} failed")

    runner = runner_of(rt, failing)
    entry_id = await put(rt, "t2")
    reclaimer = reclaimer_of(rt, runner)
    for _ in range(6):
        await asyncio.sleep(0.03)
        await reclaimer.run_once()

    assert len(attempts) == 2  # deliveries 2 and 3; the 4th goes to the DLQ instead
    letters = await events_on(rt.redis, rt.names.dlq)
    assert len(letters) == 1 and isinstance(letters[0], DeadLettered)
    letter = letters[0]
    assert letter.error == "gave up after 3 deliveries; last error: RuntimeError: attempt 2 failed"
    assert (letter.deliveries, letter.entry_id, letter.task_id) == (3, entry_id, "t2")
    assert letter.stream == rt.names.tools
    assert json.loads(letter.payload)["task_id"] == "t2"
    assert await pending(rt) == 0
    assert await rt.redis.hlen(rt.names.errors) == 0
    # A failed delivery still commits what its handler queued (with its error, unacked).
    assert await rt.redis.xlen(out) == 2


async def test_a_permanent_error_on_redelivery_is_dead_lettered_with_its_delivery_count(
    rt: Runtime,
) -> None:
    async def unknown(event: AnyEvent) -> None:
        from services.errors import UnknownTask

        raise UnknownTask(f"no task {event.task_id}")

    runner = runner_of(rt, unknown)
    await put(rt, "t3")
    await asyncio.sleep(0.03)
    assert await reclaimer_of(rt, runner).run_once() == 1
    (letter,) = await events_on(rt.redis, rt.names.dlq)
    assert isinstance(letter, DeadLettered)
    assert (letter.error, letter.deliveries) == ("UnknownTask: no task t3", 2)
    assert await pending(rt) == 0


async def test_release_makes_unfinished_entries_claimable_at_once(rt: Runtime) -> None:
    handled: list[str] = []

    async def ok(event: AnyEvent) -> None:
        handled.append(event.task_id)

    for i in range(3):
        await rt.redis.xadd(
            rt.names.tools, {DATA_FIELD: dump_event(StepStarted(task_id=f"r{i}", step=1))}
        )
    await rt.redis.xreadgroup(GROUP, "leaving", {rt.names.tools: ">"})

    def reclaimer(consumer: str) -> Reclaimer:
        return reclaimer_of(rt, runner_of(rt, ok, consumer), claim_idle_ms=60_000)

    assert await reclaimer("other").run_once() == 0  # not idle for a minute yet
    assert await reclaimer("leaving").release() == 3
    assert await reclaimer("other").run_once() == 3
    assert sorted(handled) == ["r0", "r1", "r2"]
    assert await pending(rt) == 0


async def test_one_heartbeat_keeps_read_and_reclaimed_entries_from_other_reclaimers(
    make_runtime: MakeRuntime,
) -> None:
    rt = await make_runtime(claim_idle_ms=1000)
    handled: list[str] = []

    async def slow(event: AnyEvent) -> None:
        await asyncio.sleep(2.5)  # well past the claim idle time
        handled.append(event.task_id)

    runner = runner_of(rt, slow, "alive")
    runner.start()
    consumer = StreamConsumer(rt, runner)
    other = reclaimer_of(rt, runner_of(rt, slow, "other"), claim_idle_ms=1000)
    try:
        await put(rt, "reclaimed")  # fetched by a consumer that died
        await asyncio.sleep(0.03)
        reclaim = asyncio.create_task(reclaimer_of(rt, runner).run_once())
        await put(rt, "read", fetched=False)
        consumer.start()
        taken_by_other = 0
        while not reclaim.done() or len(handled) < 2:
            await asyncio.sleep(0.1)
            taken_by_other += await other.run_once()
        assert reclaim.result() == 1
    finally:
        await consumer.stop()
        await runner.stop()
    assert taken_by_other == 0
    assert sorted(handled) == ["read", "reclaimed"]


# -- the fate of a read entry: ack, retry, dead letter ------------------------------------


async def test_a_handler_that_returns_commits_its_publishes_and_writes_with_the_ack(
    rt: Runtime,
) -> None:
    out, key = f"{rt.names.prefix}:out", f"{rt.names.prefix}:record"

    async def ok(event: AnyEvent) -> None:
        await rt.publish(out, StepStarted(task_id=event.task_id, step=2))
        await rt.write(key, event.task_id, "done")

    async def out_and_written() -> tuple[int, Any]:
        return await rt.redis.xlen(out), await rt.redis.hget(key, "t1")

    handled = await run_entry(
        rt, SERVICE, StepStarted(task_id="t1", step=1), ok, probe=out_and_written
    )
    assert handled.seen == (0, None)  # nothing is sent while the handler runs...
    assert not handled.acked_by_handler
    assert await out_and_written() == (1, b"done")  # ...then all of it, with the ack
    assert await pending(rt) == 0
    assert await rt.redis.hlen(rt.names.errors) == 0


async def test_a_handler_that_fails_leaves_its_entry_pending_with_the_error(rt: Runtime) -> None:
    out = f"{rt.names.prefix}:out"

    async def flaky(event: AnyEvent) -> None:
        await rt.publish(out, StepStarted(task_id=event.task_id, step=2))
        raise ConnectionError("the model endpoint went away")

    handled = await run_entry(rt, SERVICE, StepStarted(task_id="t1", step=1), flaky)
    assert await pending(rt) == 1  # the reclaimer delivers it again
    field = f"{rt.names.tools}|{handled.entry_id}"
    assert await rt.redis.hget(rt.names.errors, field) == (
        b"ConnectionError: the model endpoint went away"
    )
    assert await rt.redis.xlen(out) == 1  # what it queued is committed (redelivery is idempotent)
    assert await rt.redis.xlen(rt.names.dlq) == 0


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        (b"{not json", "Invalid JSON"),
        (b'{"type": "NoSuchEvent", "task_id": "t1"}', "ValidationError"),
        (b'{"type": "StepStarted", "task_id": "t1"}', "ValidationError"),  # no step
        (b"x" * 1500, "PermanentError: event of 1500 bytes exceeds the limit of 1024 bytes"),
    ],
    ids=["not-json", "unknown-type", "missing-field", "oversized"],
)
async def test_an_entry_that_cannot_be_an_event_is_dead_lettered_unhandled(
    make_runtime: MakeRuntime, payload: bytes, error: str
) -> None:
    rt = await make_runtime(max_event_bytes=1024)
    handled: list[Any] = []

    async def handler(event: AnyEvent) -> None:
        handled.append(event)

    entry = await run_entry(rt, SERVICE, payload, handler)
    assert handled == []
    (letter,) = await events_on(rt.redis, rt.names.dlq)
    assert isinstance(letter, DeadLettered)
    assert error in letter.error, letter.error
    assert (letter.entry_id, letter.stream, letter.deliveries) == (
        entry.entry_id,
        rt.names.tools,
        1,
    )
    assert letter.payload_bytes == len(payload)
    assert await pending(rt) == 0


async def test_a_permanent_error_is_dead_lettered_with_what_the_handler_queued(
    rt: Runtime,
) -> None:
    out = f"{rt.names.prefix}:out"

    async def refuses(event: AnyEvent) -> None:
        await rt.publish(out, StepStarted(task_id=event.task_id, step=2))
        raise PermanentError("this can never work")

    await run_entry(rt, SERVICE, StepStarted(task_id="t9", step=1), refuses)
    (letter,) = await events_on(rt.redis, rt.names.dlq)
    assert (letter.error, letter.task_id) == ("PermanentError: this can never work", "t9")
    assert await rt.redis.xlen(out) == 1


async def test_a_delivery_redis_refused_for_want_of_memory_does_not_count(
    rt: Runtime,
) -> None:
    """While Redis refuses the handler's writes (out of memory), the entry is retried far
    past the delivery limit without being given up on; once a delivery goes through, it
    is acknowledged and nothing is dead-lettered."""
    attempts: list[int] = []

    async def memory_full_for_a_while(event: AnyEvent) -> None:
        attempts.append(1)
        if len(attempts) <= 6:  # what Redis answers a write at maxmemory with noeviction
            raise OutOfMemoryError("command not allowed when used memory > 'maxmemory'.")

    runner = runner_of(rt, memory_full_for_a_while)
    await put(rt, "t-oom")
    reclaimer = reclaimer_of(rt, runner)
    counts = []
    for _ in range(12):
        await asyncio.sleep(0.03)
        await reclaimer.run_once()
        info: Any = await rt.redis.xpending_range(rt.names.tools, GROUP, "-", "+", 1)
        counts.extend(int(p["times_delivered"]) for p in info)

    assert len(attempts) == 7  # six refused, then one that went through
    assert max(counts) <= 1  # a refused delivery was taken back (the read counted once)
    assert await events_on(rt.redis, rt.names.dlq) == []
    assert await pending(rt) == 0


async def test_an_entry_given_up_on_with_no_recorded_error_says_so(rt: Runtime) -> None:
    """Deliveries that recorded no error (their process stopped mid-run): the dead
    letter says none was recorded, never "unknown"."""

    async def never_called(event: AnyEvent) -> None:
        raise AssertionError("an entry past its deliveries is not handled again")

    entry_id = await put(rt, "t-none")
    await rt.redis.xclaim(
        rt.names.tools, GROUP, "dead-one", 0, [entry_id], retrycount=3, justid=True
    )  # three deliveries that each ended with their process
    await asyncio.sleep(0.03)
    await reclaimer_of(rt, runner_of(rt, never_called)).run_once()

    (letter,) = await events_on(rt.redis, rt.names.dlq)
    assert letter.error == f"gave up after 3 deliveries; last error: {NONE_RECORDED}"
    assert "unknown" not in letter.error
    assert await pending(rt) == 0

"""Forged and replayed events do nothing, on a real Redis, through the services' own entry
runner (parse, handle, dead-letter, end the task or not): a second submission of a task
id is refused and leaves the first task as it was, while the first submission's own
redeliveries still drive (and, given up, still end) its task; an event that does not
belong on the tasks stream ends no task; a ToolRequested for a call no state issued is
refused and never runs its tool, and a late one for a call that ran is dropped."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from contracts.events import (
    DeadLettered,
    DecisionsSubmitted,
    ModelFailed,
    TaskSubmitted,
    ToolRequested,
    dump_event,
    parse_event,
)
from contracts.messages import HumanMessage, ToolCall
from contracts.streams import DATA_FIELD, GROUPS
from loopline.agentfile import agent_from_dict
from services.loop.handlers import handlers as loop_handlers
from services.runner import EntryRunner
from services.runtime import Runtime
from services.seal import Sealer
from services.settings import Settings
from services.tasks.issued import call_digest, call_seal, record_field
from services.tasks.loop import Loop
from services.tools.handlers import handlers as tools_handlers
from tests.support import issue_calls

SPEC = agent_from_dict({"model": "gpt-4o-mini", "tools": ["tests.tooling:slow_effect"]})[0]


@pytest.fixture
async def rt(redis_url: str, prefix: str) -> AsyncIterator[Runtime]:
    runtime = Runtime(redis_url, Settings(prefix=prefix, max_deliveries=2))
    for service in ("loop", "tools"):
        for stream in runtime.names.inputs_of(service):
            await runtime.redis.xgroup_create(stream, GROUPS[service], id="0", mkstream=True)
    runtime.on_refused = Loop(runtime).event_refused
    yield runtime
    await runtime.close()


async def run_entry(
    rt: Runtime, service: str, stream: str, data: bytes | str, deliveries: int = 1
) -> str:
    """Publish ``data`` on ``stream`` and run it as the service's consumer would."""
    await rt.redis.xadd(stream, {DATA_FIELD: data})
    reply: Any = await rt.redis.xreadgroup(GROUPS[service], "test", {stream: ">"}, count=1)
    entry_id, fields = reply[0][1][0]
    handler = (loop_handlers if service == "loop" else tools_handlers)(rt)[stream]
    await EntryRunner(rt, service, stream, handler, "test").run(entry_id, fields, deliveries)
    return str(entry_id.decode())


async def rerun(rt: Runtime, service: str, stream: str, entry_id: str, deliveries: int) -> None:
    """The same entry again (a redelivery)."""
    (_, fields), *_ = await rt.redis.xrange(stream, entry_id, entry_id)
    handler = (loop_handlers if service == "loop" else tools_handlers)(rt)[stream]
    await EntryRunner(rt, service, stream, handler, "test").run(entry_id, fields, deliveries)


async def dead_letters(rt: Runtime) -> list[DeadLettered]:
    found = [parse_event(f[DATA_FIELD.encode()]) for _, f in await rt.redis.xrange(rt.names.dlq)]
    return [e for e in found if isinstance(e, DeadLettered)]


async def snapshot(rt: Runtime, task_id: str) -> tuple[Any, ...]:
    names = rt.names
    return (
        await rt.redis.hgetall(names.task_state(task_id)),
        await rt.redis.lrange(names.task_messages(task_id), 0, -1),
        await rt.redis.xrange(names.task_log(task_id)),
        await rt.redis.zscore(names.deadlines, task_id),
    )


def submission(task_id: str, text: str = "hi", **more: Any) -> TaskSubmitted:
    return TaskSubmitted(task_id=task_id, agent=SPEC, messages=[HumanMessage(content=text)], **more)


async def test_a_replayed_task_id_is_refused_and_leaves_the_task_as_it_was(rt: Runtime) -> None:
    first = await run_entry(rt, "loop", rt.names.tasks, dump_event(submission("t1")))
    before = await snapshot(rt, "t1")
    assert before[0][b"status"] == b"running" and before[3] is None  # no deadline set
    requests = await rt.redis.xlen(rt.names.model)

    # a valid replay (another prompt, a deadline already due) and a malformed one
    await run_entry(rt, "loop", rt.names.tasks, dump_event(submission("t1", "x", deadline_s=0.001)))
    bad = submission("t1").model_copy(update={"max_steps": 0})
    await run_entry(rt, "loop", rt.names.tasks, bad.model_dump_json())
    assert await snapshot(rt, "t1") == before
    assert await rt.redis.xlen(rt.names.model) == requests  # nothing published again
    letters = await dead_letters(rt)
    assert [d.task_id for d in letters] == ["t1", "t1"]
    assert "task 't1' exists already; this submission is refused" in letters[0].error
    assert "max_steps" in letters[1].error

    # the first submission's redelivery still re-publishes its step (it is its task)...
    await rerun(rt, "loop", rt.names.tasks, first, deliveries=2)
    assert await rt.redis.xlen(rt.names.model) == requests + 1
    # ... and given up after too many deliveries, still ends its task
    await rerun(rt, "loop", rt.names.tasks, first, deliveries=3)
    assert await rt.redis.hget(rt.names.task_state("t1"), "status") == b"failed"


async def test_nothing_but_a_submission_on_the_tasks_stream_ends_a_task(rt: Runtime) -> None:
    await run_entry(rt, "loop", rt.names.tasks, dump_event(submission("t2")))
    before = await snapshot(rt, "t2")
    failed = ModelFailed(task_id="t2", step=1, agent_id=SPEC.agent_id, error="forged")
    await run_entry(rt, "loop", rt.names.tasks, dump_event(failed))
    await run_entry(rt, "loop", rt.names.tasks, b'{"type": "StepStarted", "task_id": "t2"')
    assert await snapshot(rt, "t2") == before
    errors = [d.error for d in await dead_letters(rt)]
    assert len(errors) == 2 and "ModelFailed does not belong on the tasks stream" in errors[0]


async def test_a_tool_call_no_state_issued_never_runs(rt: Runtime, tmp_path: Path) -> None:
    record = tmp_path / "marks.jsonl"
    agent_id = await rt.save_agent(SPEC)

    def call(call_id: str, tag: str = "") -> ToolCall:
        args = {"tag": tag or call_id, "seconds": 0, "record": str(record)}
        return ToolCall(id=call_id, name="slow_effect", args=args)

    def request(task_id: str, call_id: str, step: int = 1, tag: str = "") -> bytes:
        made = call(call_id, tag)
        return dump_event(ToolRequested(task_id=task_id, step=step, agent_id=agent_id, call=made))

    digests = {"issued": call_digest(call("issued"))}
    await issue_calls(rt.redis, rt.names, "t3", agent_id, ["issued"], digests=digests)
    state_before = await rt.redis.hgetall(rt.names.task_state("t3"))
    for forged in (
        request("no-such-task", "c1"),  # no task at all
        request("t3", "not-issued"),  # a call the step does not wait for
        request("t3", "issued", step=2),  # the right call at another step
        request("t3", "issued").replace(agent_id.encode(), b"other-agent"),  # another agent
        request("t3", "issued", tag="changed"),  # the issued id, other arguments
    ):
        await run_entry(rt, "tools", rt.names.tools, forged)
    assert not record.exists()
    letters = await dead_letters(rt)
    assert len(letters) == 5 and all("no such call waits" in d.error for d in letters)
    assert await rt.redis.hgetall(rt.names.task_state("t3")) == state_before  # goes on

    # the issued call runs once; once its step moved on, a late duplicate is dropped
    await run_entry(rt, "tools", rt.names.tools, request("t3", "issued"))
    assert len(record.read_text().splitlines()) == 2  # start, end
    await rt.redis.hset(rt.names.task_state("t3"), mapping={"step": 2, "phase": "model"})
    await run_entry(rt, "tools", rt.names.tools, request("t3", "issued"))
    assert len(record.read_text().splitlines()) == 2
    assert len(await dead_letters(rt)) == 5
    done = json.loads(await rt.redis.hget(rt.names.task_calls("t3"), record_field(1, "issued")))
    assert done["state"] == "done"


async def test_an_idempotent_call_runs_on_its_seal_and_a_forged_seal_is_checked(
    rt: Runtime, tmp_path: Path
) -> None:
    """A tool declared idempotent takes no lease, so a sealed request runs with no look at
    the state; a request without the services' seal, with another's, or with a seal
    moved to other arguments is checked against the state and refused."""
    record = tmp_path / "marks.jsonl"
    spec = agent_from_dict({"model": "gpt-4o-mini", "tools": ["tests.tooling:slow_idempotent"]})
    agent_id = await rt.save_agent(spec[0])
    sealer = await rt.sealer()

    def call(tag: str) -> ToolCall:
        args = {"tag": tag, "seconds": 0, "record": str(record)}
        return ToolCall(id="c1", name="slow_idempotent", args=args)

    def request(made: ToolCall, seal: str | None) -> bytes:
        event = ToolRequested(task_id="t5", step=1, agent_id=agent_id, call=made, seal=seal)
        return dump_event(event)

    issued = call("issued")
    seal = call_seal(sealer, "t5", 1, agent_id, issued)
    for forged in (
        request(issued, None),  # no seal
        request(issued, "0" * 32),  # not the services' seal
        request(call("changed"), seal),  # the issued call's seal on other arguments
        request(issued, Sealer(b"another key of 32 bytes, not ours").seal("t5")),
    ):
        await run_entry(rt, "tools", rt.names.tools, forged)
    assert not record.exists()  # no task t5: no state issued anything
    letters = await dead_letters(rt)
    assert len(letters) == 4 and all("no such call waits" in d.error for d in letters)

    await run_entry(rt, "tools", rt.names.tools, request(issued, seal))
    assert [json.loads(line)["tag"] for line in record.read_text().splitlines()] == [
        "issued",
        "issued",
    ]
    assert len(await dead_letters(rt)) == 4


async def test_a_decision_for_a_task_that_does_not_wait_changes_nothing(rt: Runtime) -> None:
    await run_entry(rt, "loop", rt.names.tasks, dump_event(submission("t4")))
    before = await snapshot(rt, "t4")
    decided = DecisionsSubmitted(task_id="t4", decisions=[{"type": "approve"}])
    await run_entry(rt, "loop", rt.names.tasks, dump_event(decided))
    assert await snapshot(rt, "t4") == before
    (letter,) = await dead_letters(rt)
    assert "task t4 is not waiting for a decision" in letter.error

"""The agent loop (``services.tasks.loop.Loop``) as the loop service runs it, in this
process: its handlers on its two streams, each entry run by the services' entry runner
on a real Redis, with the app's wiring (a dead-lettered event ends its task). What is
asserted is what a client and the other services see: the task's log and state, what
is published on each stream, what stays pending, and the dead letters."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from contracts.agent import AgentSpec
from contracts.events import (
    ApprovalRequested,
    CancelRequested,
    DeadLettered,
    DecisionsRefused,
    DecisionsSubmitted,
    Event,
    ModelFailed,
    ModelRequested,
    ModelResponded,
    TaskCompleted,
    TaskFailed,
    TaskSubmitted,
    ToolCompleted,
    ToolRequested,
)
from contracts.messages import AIMessage, HumanMessage, ToolCall, ToolMessage
from loopline.agentfile import agent_from_dict
from services.errors import PermanentError
from services.loop.deadlines import DeadlineSweeper
from services.loop.handlers import handlers as loop_handlers
from services.runtime import Runtime
from services.tasks.loop import Loop
from services.tools.handlers import handlers as tools_handlers
from tests.support import SPEC, Handled, events_on, pending_on, run_entry

pytestmark = pytest.mark.fast

TASK_STREAM_EVENTS = (TaskSubmitted, CancelRequested, DecisionsSubmitted)


class LoopService:
    """The loop service's handlers on a runtime, wired as ``services.app`` wires them."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.handlers = loop_handlers(rt)
        rt.on_refused = Loop(rt).event_refused

    async def send(self, event: Event) -> Handled:
        names = self.rt.names
        stream = names.tasks if isinstance(event, TASK_STREAM_EVENTS) else names.loop
        return await run_entry(self.rt, "loop", event, self.handlers[stream], stream=stream)

    async def log(self, task_id: str) -> list[Any]:
        return await events_on(self.rt.redis, self.rt.names.task_log(task_id))

    async def status(self, task_id: str) -> str:
        value: Any = await self.rt.redis.hget(self.rt.names.task_state(task_id), "status")
        return value.decode() if value else ""

    async def nothing_pending(self) -> bool:
        names = self.rt.names
        return not any([
            await pending_on(self.rt.redis, names.tasks, "loop"),
            await pending_on(self.rt.redis, names.loop, "loop"),
        ])  # fmt: skip


@pytest.fixture
def loop(rt: Runtime) -> LoopService:
    return LoopService(rt)


def submitted(task_id: str, spec: AgentSpec = SPEC, **extra: Any) -> TaskSubmitted:
    return TaskSubmitted(
        task_id=task_id, agent=spec, messages=[HumanMessage(content="add things")], **extra
    )


def model_reply(
    task_id: str, step: int, transcript_len: int, *calls: ToolCall, text: str = ""
) -> ModelResponded:
    return ModelResponded(
        task_id=task_id,
        step=step,
        agent_id=SPEC.agent_id,
        message=AIMessage(content=text, tool_calls=list(calls)),
        transcript_len=transcript_len,
    )


def add_call(call_id: str, a: int = 1, b: int = 2) -> ToolCall:
    return ToolCall(id=call_id, name="add", args={"a": a, "b": b})


def tool_done(task_id: str, step: int, call_id: str, content: str) -> ToolCompleted:
    return ToolCompleted(
        task_id=task_id,
        step=step,
        agent_id=SPEC.agent_id,
        message=ToolMessage(content=content, tool_call_id=call_id, name="add"),
    )


async def requests_of(rt: Runtime, task_id: str, kind: type, stream: str) -> list[Any]:
    return [e for e in await events_on(rt.redis, stream, kind) if e.task_id == task_id]


# -- a task's steps ----------------------------------------------------------------------


async def test_a_task_runs_its_steps_and_completes(loop: LoopService, rt: Runtime) -> None:
    await loop.send(submitted("run", deadline_s=60))
    assert await rt.redis.zscore(rt.names.deadlines, "run") is not None
    (first,) = await requests_of(rt, "run", ModelRequested, rt.names.model)
    assert (first.step, first.transcript_len) == (1, 1)

    await loop.send(model_reply("run", 1, 1, add_call("c0"), add_call("c1", 3, 4)))
    calls = await requests_of(rt, "run", ToolRequested, rt.names.tools)
    assert [(c.call.id, c.join_len) for c in calls] == [("c0", 4), ("c1", 4)]

    await loop.send(tool_done("run", 1, "c1", "7"))
    assert len(await requests_of(rt, "run", ModelRequested, rt.names.model)) == 1  # waits for c0
    await loop.send(tool_done("run", 1, "c0", "3"))
    second = (await requests_of(rt, "run", ModelRequested, rt.names.model))[-1]
    assert (second.step, second.transcript_len) == (2, 4)
    transcript = await rt.transcript("run", 4)
    assert [m.text() for m in transcript[2:]] == ["3", "7"]  # call order, not arrival

    await loop.send(model_reply("run", 2, 4, text="3 and 7"))
    assert await loop.status("run") == "completed"
    log = await loop.log("run")
    assert [e.type for e in log] == [
        "TaskSubmitted",
        "StepStarted",
        "ModelResponded",
        "ToolCompleted",
        "ToolCompleted",
        "StepStarted",
        "ModelResponded",
        "TaskCompleted",
    ]
    assert log[-1].answer == "3 and 7" and log[-1].steps == 2
    assert await rt.redis.zscore(rt.names.deadlines, "run") is None
    assert await loop.nothing_pending()


async def test_redelivered_events_change_the_task_once(loop: LoopService, rt: Runtime) -> None:
    for _ in range(2):
        await loop.send(submitted("twice"))
    reply = model_reply("twice", 1, 1, add_call("c0"))
    for _ in range(2):
        await loop.send(reply)
    for _ in range(2):
        await loop.send(tool_done("twice", 1, "c0", "3"))

    assert [e.type for e in await loop.log("twice")] == [
        "TaskSubmitted",
        "StepStarted",
        "ModelResponded",
        "ToolCompleted",
        "StepStarted",
    ]
    assert await rt.redis.llen(rt.names.task_messages("twice")) == 3
    # a redelivery publishes what its state asks for again (it may have been lost), for
    # the same step: the services that read them are idempotent
    requests = await requests_of(rt, "twice", ModelRequested, rt.names.model)
    assert {(r.step, r.transcript_len) for r in requests} == {(1, 1), (2, 3)}
    assert await loop.nothing_pending()


async def test_the_step_limit_fails_the_task_with_a_reason_that_says_how_to_raise_it(
    loop: LoopService,
) -> None:
    await loop.send(submitted("limited", max_steps=1))
    await loop.send(model_reply("limited", 1, 1, add_call("c0")))
    await loop.send(tool_done("limited", 1, "c0", "3"))
    failed = (await loop.log("limited"))[-1]
    assert isinstance(failed, TaskFailed)
    assert failed.reason.startswith("step limit reached") and "max_steps" in failed.reason


# -- failures, cancels, deadlines ----------------------------------------------------------


async def test_a_failed_model_call_fails_the_task(loop: LoopService, rt: Runtime) -> None:
    await loop.send(submitted("broken", deadline_s=60))
    failure = ModelFailed(task_id="broken", step=1, agent_id=SPEC.agent_id, error="HTTP 500")
    await loop.send(failure)
    last = (await loop.log("broken"))[-1]
    assert isinstance(last, TaskFailed)
    assert last.reason == "model call failed at step 1: HTTP 500"
    assert await rt.redis.zscore(rt.names.deadlines, "broken") is None


async def test_a_cancelled_task_fails_and_its_late_results_are_dropped(
    loop: LoopService, rt: Runtime
) -> None:
    await loop.send(submitted("cancelled"))
    await loop.send(model_reply("cancelled", 1, 1, add_call("c0")))
    await loop.send(CancelRequested(task_id="cancelled", reason="enough"))
    await loop.send(tool_done("cancelled", 1, "c0", "3"))

    log = await loop.log("cancelled")
    assert [e.type for e in log] == ["TaskSubmitted", "StepStarted", "ModelResponded", "TaskFailed"]
    assert log[-1].reason == "cancelled: enough"  # and the late result changed nothing
    requests = await requests_of(rt, "cancelled", ModelRequested, rt.names.model)
    assert [r.step for r in requests] == [1]
    assert await loop.nothing_pending()


async def test_cancelling_an_unknown_task_is_dead_lettered_and_creates_nothing(
    loop: LoopService, rt: Runtime
) -> None:
    await loop.send(CancelRequested(task_id="nobody", reason="typo"))
    (letter,) = await events_on(rt.redis, rt.names.dlq, DeadLettered)
    assert letter.error == "UnknownTask: cannot cancel: no task 'nobody'"
    assert letter.task_id == "nobody"
    assert await rt.redis.exists(rt.names.task_state("nobody")) == 0
    assert await loop.nothing_pending()


async def test_a_task_past_its_deadline_fails_even_when_nothing_happens(
    loop: LoopService, rt: Runtime
) -> None:
    await loop.send(submitted("slow", deadline_s=60))
    await loop.send(submitted("on-time", deadline_s=60))
    await rt.redis.zadd(rt.names.deadlines, {"slow": time.time() - 1})

    assert await DeadlineSweeper(rt, Loop(rt).stop).sweep() == 1
    last = (await loop.log("slow"))[-1]
    assert isinstance(last, TaskFailed) and last.reason == "deadline exceeded"
    assert await rt.redis.zscore(rt.names.deadlines, "slow") is None
    assert await loop.status("on-time") == "running"


# -- hooks and approvals -------------------------------------------------------------------


async def test_a_before_model_hook_that_jumps_to_the_end_completes_the_task(
    loop: LoopService, rt: Runtime
) -> None:
    spec = agent_from_dict(
        {
            "model": "gpt-4o-mini",
            "tools": ["tests.tooling:add"],
            "middleware": [{"type": "tests.middlewares:StopAfter", "calls": 1}],
        }
    )[0]
    await loop.send(submitted("stopped", spec))
    reply = model_reply("stopped", 1, 1, add_call("c0"))
    await loop.send(reply.model_copy(update={"agent_id": spec.agent_id}))
    done = tool_done("stopped", 1, "c0", "3")
    await loop.send(done.model_copy(update={"agent_id": spec.agent_id}))

    last = (await loop.log("stopped"))[-1]
    assert isinstance(last, TaskCompleted) and last.answer == "stopped after 1"
    # step 2's model call never happened
    requests = await requests_of(rt, "stopped", ModelRequested, rt.names.model)
    assert [r.step for r in requests] == [1]
    assert (await rt.transcript("stopped", 4))[-1].text() == "stopped after 1"


async def test_a_hook_that_raises_fails_the_task_with_its_reason(
    loop: LoopService, rt: Runtime
) -> None:
    spec = agent_from_dict(
        {
            "model": "gpt-4o-mini",
            "tools": ["tests.tooling:add"],
            "middleware": [
                {"type": "ModelCallLimitMiddleware", "run_limit": 1, "exit_behavior": "error"}
            ],
        }
    )[0]
    await loop.send(submitted("limited-hook", spec, deadline_s=60))
    reply = model_reply("limited-hook", 1, 1, add_call("c0"))
    await loop.send(reply.model_copy(update={"agent_id": spec.agent_id}))
    done = tool_done("limited-hook", 1, "c0", "3")
    await loop.send(done.model_copy(update={"agent_id": spec.agent_id}))

    last = (await loop.log("limited-hook"))[-1]
    assert isinstance(last, TaskFailed) and last.step == 2
    assert last.reason.startswith("ModelCallLimitExceededError: ")
    assert [
        r.step for r in await requests_of(rt, "limited-hook", ModelRequested, rt.names.model)
    ] == [1]
    assert await rt.redis.zscore(rt.names.deadlines, "limited-hook") is None
    assert await loop.nothing_pending()


def gated() -> AgentSpec:
    """An agent whose ``add`` calls wait for a human (built when a test runs, so that
    collecting this module imports no tool)."""
    return agent_from_dict(
        {
            "model": "gpt-4o-mini",
            "tools": ["tests.tooling:add"],
            "middleware": [{"type": "HumanInTheLoopMiddleware", "interrupt_on": {"add": True}}],
        }
    )[0]


async def test_a_gated_call_waits_for_a_human_with_nothing_pending_then_runs_edited(
    loop: LoopService, rt: Runtime
) -> None:
    spec = gated()
    await loop.send(submitted("gated", spec))
    reply = model_reply("gated", 1, 1, add_call("c0", 1, 2))
    waiting = await loop.send(reply.model_copy(update={"agent_id": spec.agent_id}))

    assert waiting.acked_by_handler  # once the log says it waits, nothing is pending
    (asked,) = await requests_of(rt, "gated", ApprovalRequested, rt.names.approvals)
    assert asked.request["action_requests"][0]["name"] == "add"
    assert (await loop.log("gated"))[-1].type == "ApprovalRequested"
    assert await requests_of(rt, "gated", ToolRequested, rt.names.tools) == []

    # decisions that do not fit are refused; the task keeps waiting for good ones
    await loop.send(
        DecisionsSubmitted(task_id="gated", decisions=[{"type": "approve"}, {"type": "approve"}])
    )
    (letter,) = await events_on(rt.redis, rt.names.dlq, DeadLettered)
    assert letter.error.startswith("AnswerRefused: decisions rejected")
    assert await loop.status("gated") == "running"
    refused = (await loop.log("gated"))[-1]  # the client that answered learns why
    assert isinstance(refused, DecisionsRefused) and refused.exception is not None
    assert refused.exception.type == "builtins:ValueError" and "(2)" in refused.reason

    edit = {"type": "edit", "edited_action": {"name": "add", "args": {"a": 10, "b": 20}}}
    await loop.send(DecisionsSubmitted(task_id="gated", decisions=[edit]))
    (call,) = await requests_of(rt, "gated", ToolRequested, rt.names.tools)
    assert call.call.id == "c0"
    # the tools service runs it with the edited arguments (the middleware's own
    # wrap_tool_call), and the model is told, as LangChain does
    (on_tool,) = tools_handlers(rt).values()
    await run_entry(rt, "tools", call, on_tool)
    (result,) = await requests_of(rt, "gated", ToolCompleted, rt.names.loop)
    assert "Executed instead" in result.message.text() and result.message.text().endswith("30")
    assert await loop.nothing_pending()


async def test_a_before_model_interrupt_waits_and_its_answers_come_back_in_order(
    loop: LoopService, rt: Runtime
) -> None:
    """LangGraph's ``interrupt()`` in a custom before_model hook, called twice: the step
    waits with nothing pending; each answer, by the interrupt's id, runs the hook again
    from its start, its first ``interrupt()`` returning the first answer; the second
    answer lets the step call the model with what the hook added."""
    spec = agent_from_dict(
        {
            "model": "gpt-4o-mini",
            "tools": ["tests.tooling:add"],
            "middleware": [{"type": "tests.interrupt_tooling:AskBeforeModel"}],
        }
    )[0]
    started = await loop.send(submitted("ask", spec))
    assert started.acked_by_handler  # once the log says it waits, nothing is pending
    (first,) = await requests_of(rt, "ask", ApprovalRequested, rt.names.approvals)
    assert first.request == {"ask": "topic?", "prompt": "add things"}
    assert first.node == "AskBeforeModel.before_model" and first.interrupt_id
    assert await requests_of(rt, "ask", ModelRequested, rt.names.model) == []

    await loop.send(DecisionsSubmitted(task_id="ask", answers={"not-this-one": "x"}))
    (letter,) = await events_on(rt.redis, rt.names.dlq, DeadLettered)
    assert "interrupt 'not-this-one' is not waiting" in letter.error

    await loop.send(DecisionsSubmitted(task_id="ask", answers={first.interrupt_id: "mountains"}))
    second = (await requests_of(rt, "ask", ApprovalRequested, rt.names.approvals))[-1]
    assert second.request == "tone?" and second.interrupt_id != first.interrupt_id
    assert await requests_of(rt, "ask", ModelRequested, rt.names.model) == []
    # the first interrupt was answered: an answer to it again is refused
    await loop.send(DecisionsSubmitted(task_id="ask", answers={first.interrupt_id: "sea"}))
    assert len(await events_on(rt.redis, rt.names.dlq, DeadLettered)) == 2

    await loop.send(DecisionsSubmitted(task_id="ask", answers={second.interrupt_id: "calm"}))
    (request,) = await requests_of(rt, "ask", ModelRequested, rt.names.model)
    assert (request.step, request.transcript_len) == (1, 2)
    transcript = await rt.transcript("ask", 2)
    assert transcript[-1].text() == "topic: mountains; tone: calm"
    assert await loop.status("ask") == "running" and await loop.nothing_pending()


async def test_on_resume_only_the_node_that_waits_runs_again(
    loop: LoopService, rt: Runtime
) -> None:
    """Two before_model hooks, the second asking twice: as LangGraph keeps a finished
    node's writes, the first (with a side effect) runs once, and its update stays."""
    from tests import interrupt_tooling

    spec = agent_from_dict(
        {
            "model": "gpt-4o-mini",
            "tools": ["tests.tooling:add"],
            "middleware": [
                {"type": "tests.interrupt_tooling:CountedBeforeModel"},
                {"type": "tests.interrupt_tooling:AskBeforeModel"},
            ],
        }
    )[0]
    interrupt_tooling.CALLS.clear()
    await loop.send(submitted("once", spec))
    for answer in ("mountains", "calm"):
        asked = (await requests_of(rt, "once", ApprovalRequested, rt.names.approvals))[-1]
        assert asked.node == "AskBeforeModel.before_model"
        await loop.send(DecisionsSubmitted(task_id="once", answers={asked.interrupt_id: answer}))
    assert interrupt_tooling.CALLS == ["add things"]
    (request,) = await requests_of(rt, "once", ModelRequested, rt.names.model)
    transcript = await rt.transcript("once", request.transcript_len)
    assert [m.text() for m in transcript] == [
        "add things",
        "(counted)",
        "topic: mountains; tone: calm",
    ]


async def test_decisions_for_a_task_that_is_not_waiting_are_refused(loop: LoopService) -> None:
    await loop.send(submitted("busy"))
    await loop.send(DecisionsSubmitted(task_id="busy", decisions=[{"type": "approve"}]))
    letters = await events_on(loop.rt.redis, loop.rt.names.dlq, DeadLettered)
    assert [d.error for d in letters] == ["BadEvent: task busy is not waiting for a decision"]
    assert await loop.status("busy") == "running"


# -- refused events end their task ---------------------------------------------------------


async def test_a_refused_submission_ends_for_its_client(loop: LoopService, rt: Runtime) -> None:
    # (an empty submission is a task, as LangChain runs an empty input: refused here is
    # an inline spec with overrides)
    refused = TaskSubmitted(
        task_id="refused", agent=SPEC, messages=[], overrides={"system_prompt": "x"}
    )
    await loop.send(refused)
    (letter,) = await events_on(rt.redis, rt.names.dlq, DeadLettered)
    why = "BadEvent: overrides apply to deployed agents; an inline spec is whole"
    assert letter.error == why
    (failed,) = await loop.log("refused")
    assert isinstance(failed, TaskFailed)
    assert failed.reason == f"the loop stage could not handle TaskSubmitted: {why}"
    assert await loop.nothing_pending()


async def test_an_event_another_stage_dead_letters_ends_its_task(
    loop: LoopService, rt: Runtime
) -> None:
    await loop.send(submitted("doomed", deadline_s=60))
    await loop.send(model_reply("doomed", 1, 1, add_call("c0")))
    (call,) = await requests_of(rt, "doomed", ToolRequested, rt.names.tools)

    async def refuses(event: Any) -> None:
        raise PermanentError("no such tool")

    await run_entry(rt, "tools", call, refuses)
    last = (await loop.log("doomed"))[-1]
    assert isinstance(last, TaskFailed)
    assert (
        last.reason
        == "the tools stage could not handle ToolRequested: PermanentError: no such tool"
    )
    assert await rt.redis.zscore(rt.names.deadlines, "doomed") is None
    assert await pending_on(rt.redis, rt.names.tools, "tools") == 0


async def _thread_run_status(rt: Runtime, thread_id: str, task_id: str) -> str:
    """The thread's record of a run, once the run's end is written back (after the
    entry's commit)."""
    deadline = time.monotonic() + 5
    while True:
        found: Any = await rt.redis.hget(rt.names.thread_runs(thread_id), task_id)
        status = found.decode() if found else ""
        if status not in ("", "active") or time.monotonic() > deadline:
            return status
        await asyncio.sleep(0.02)


async def test_a_cancel_with_rollback_leaves_the_thread_as_before_the_run(
    loop: LoopService, rt: Runtime
) -> None:
    await loop.send(submitted("first", thread_id="t"))
    await loop.send(model_reply("first", 1, 1, text="done"))
    assert await _thread_run_status(rt, "t", "first") == "completed"
    kept = await rt.redis.lrange(rt.names.thread_messages("t"), 0, -1)

    await loop.send(submitted("undone", thread_id="t"))
    await loop.send(model_reply("undone", 1, 3, add_call("c0")))
    await loop.send(CancelRequested(task_id="undone", thread_id="t", rollback=True))

    assert (await loop.log("undone"))[-1].reason == "cancelled: cancelled by request"
    assert await _thread_run_status(rt, "t", "undone") == "rolled_back"
    assert await rt.redis.lrange(rt.names.thread_messages("t"), 0, -1) == kept
    assert len(kept) == 2  # the first run's input and answer, nothing of the second

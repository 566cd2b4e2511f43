"""Every transition of the task state machine (``services.tasks.transitions``), applied
with ``TaskStore.apply`` on a real Redis: what each does to the task's state, transcript,
results and log, that each applies at most once per cause, and what each refuses."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, replace
from typing import Any

import pytest
import redis.asyncio as aioredis

from contracts.events import (
    ApprovalRequested,
    ModelResponded,
    NodesUpdated,
    NodeUpdate,
    StepStarted,
    TaskCompleted,
    TaskFailed,
    TaskSubmitted,
    TodosUpdated,
    ToolCompleted,
    ToolInterrupted,
    dump_event,
)
from contracts.messages import AIMessage, HumanMessage, SystemMessage, ToolCall, ToolMessage
from contracts.streams import Names
from contracts.todos import Todo
from services.runtime import Runtime
from services.spec.statecodec import CORE_CODEC
from services.tasks.issued import call_digests
from services.tasks.state import Cause, Phase, Status
from services.tasks.store import TaskStore, waiting_calls
from services.tasks.transition import Args, build_script
from services.tasks.transitions import (
    ApplyHooks,
    AskHuman,
    DecideCall,
    FailTask,
    ParkCall,
    RecordReply,
    RecordResult,
    RefuseTask,
    StartTask,
)
from tests.support import SPEC, events_on

pytestmark = pytest.mark.fast

TASK = "task-1"
AGENT = SPEC.agent_id


@pytest.fixture
def store(rt: Runtime) -> TaskStore:
    return TaskStore(rt.redis, rt.names, rt.register_script)


@dataclass
class Seen:
    """A task as Redis holds it."""

    state: dict[str, str]
    transcript: list[dict[str, Any]]
    log: list[str]
    """The types of the events on the task's log, oldest first."""
    results: dict[str, str]


async def seen(redis: aioredis.Redis, names: Names, task_id: str = TASK) -> Seen:
    raw: Any = await redis.hgetall(names.task_state(task_id))
    state = {k.decode(): v.decode() for k, v in raw.items()}
    transcript = [json.loads(m) for m in await redis.lrange(names.task_messages(task_id), 0, -1)]
    log = [e.type for e in await events_on(redis, names.task_log(task_id))]
    results: Any = await redis.hgetall(names.task_results(task_id))
    return Seen(state, transcript, log, {k.decode(): v.decode() for k, v in results.items()})


def start(max_steps: int = 5, retention: int = 3600) -> StartTask:
    return StartTask(
        agent_id=AGENT,
        max_steps=max_steps,
        submitted_event=dump_event(
            TaskSubmitted(task_id=TASK, agent=SPEC, messages=[HumanMessage(content="hi")])
        ),
        step_event=dump_event(StepStarted(task_id=TASK, step=1)),
        retention=retention,
        messages=[HumanMessage(content="hi", id="in:0").model_dump_json()],
        entry="",
    )


def ai_with_calls(*ids: str, step: int = 1) -> AIMessage:
    calls = [ToolCall(id=i, name="add", args={"a": 1, "b": 2}) for i in ids]
    return AIMessage(content="", tool_calls=calls, id=f"ai:{step}")


def reply(
    ai: AIMessage,
    step: int = 1,
    *,
    pre_results: dict[str, ToolMessage] | None = None,
    after_ai: list[Any] | None = None,
    extra: str = "",
) -> RecordReply:
    decided = pre_results or {}
    expected = [c.id for c in ai.tool_calls if c.id in decided]
    expected += [c.id for c in ai.tool_calls if c.id not in decided]
    responded = ModelResponded(task_id=TASK, step=step, agent_id=AGENT, message=ai)
    return RecordReply(
        step=step,
        cause=Cause.model(step),
        ai_message=ai.model_dump_json().encode(),
        responded_event=dump_event(responded),
        expected=expected,
        pre_results={k: v.model_dump_json() for k, v in decided.items()},
        completed_event=dump_event(TaskCompleted(task_id=TASK, steps=step, answer=ai.text())),
        step_event=dump_event(StepStarted(task_id=TASK, step=step + 1)),
        failed_event=dump_event(TaskFailed(task_id=TASK, step=step, reason="step limit")),
        after_ai=[m.model_dump_json() for m in after_ai or []],
        extra=extra,
        issued=call_digests(ai, decided),
    )


def tool_result(call_id: str, step: int = 1, content: str = "3", update: str = "") -> RecordResult:
    message = ToolMessage(content=content, tool_call_id=call_id, name="add")
    done = ToolCompleted(task_id=TASK, step=step, agent_id=AGENT, message=message)
    return RecordResult(
        step=step,
        cause=Cause.tool(step, call_id),
        call_id=call_id,
        tool_message=message.model_dump_json().encode(),
        tool_event=dump_event(done),
        step_event=dump_event(StepStarted(task_id=TASK, step=step + 1)),
        failed_event=dump_event(TaskFailed(task_id=TASK, step=step, reason="step limit")),
        update=update,
    )


def fail(reason: str, cause: str = Cause.CANCEL) -> FailTask:
    return FailTask(
        failed_event=dump_event(TaskFailed(task_id=TASK, step=1, reason=reason)), cause=cause
    )


# -- start -------------------------------------------------------------------------------


async def test_a_task_starts_once_at_step_one_in_the_model_phase(
    store: TaskStore, rt: Runtime
) -> None:
    state = await store.apply(TASK, start())
    assert state.applied and state.running
    assert (state.step, state.phase, state.cause, state.transcript_len) == (
        1,
        Phase.MODEL,
        Cause.START,
        1,
    )
    task = await seen(rt.redis, rt.names)
    assert task.state["status"] == Status.RUNNING and task.state["agent"] == AGENT
    assert [m["content"] for m in task.transcript] == ["hi"]
    assert task.log == ["TaskSubmitted", "StepStarted"]

    again = await store.apply(TASK, start())  # a redelivered submission
    assert not again.applied and again.cause == Cause.START
    assert (await seen(rt.redis, rt.names)).log == ["TaskSubmitted", "StepStarted"]


# -- the model's reply, the tools' results and their join ---------------------------------


async def test_a_reply_with_calls_moves_to_the_tools_phase_once(
    store: TaskStore, rt: Runtime
) -> None:
    await store.apply(TASK, start())
    state = await store.apply(TASK, reply(ai_with_calls("c0", "c1")))
    assert state.applied and state.phase == Phase.TOOLS
    assert state.expected == ["c0", "c1"] and state.done == frozenset()
    assert state.transcript_len == 2

    assert not (await store.apply(TASK, reply(ai_with_calls("c0", "c1")))).applied
    assert not (await store.apply(TASK, reply(ai_with_calls("x"), step=2))).applied  # not its step
    task = await seen(rt.redis, rt.names)
    assert len(task.transcript) == 2 and task.log[-1] == "ModelResponded"


async def test_parallel_results_join_in_call_order_when_the_last_arrives(
    store: TaskStore, rt: Runtime
) -> None:
    await store.apply(TASK, start())
    await store.apply(TASK, reply(ai_with_calls("c0", "c1", "c2")))

    first = await store.apply(TASK, tool_result("c2", content="two"))
    assert first.applied and first.phase == Phase.TOOLS and first.done == {"c2"}
    assert not (await store.apply(TASK, tool_result("c2", content="again"))).applied
    assert not (await store.apply(TASK, tool_result("not-a-call"))).applied
    assert (await seen(rt.redis, rt.names)).results.keys() == {"c2"}
    await store.apply(TASK, tool_result("c0", content="zero"))
    assert len((await seen(rt.redis, rt.names)).transcript) == 2  # nothing joins early

    last = await store.apply(TASK, tool_result("c1", content="one"))
    assert last.applied and (last.step, last.phase) == (2, Phase.MODEL)
    assert last.cause == Cause.tool(1, "c1") and last.transcript_len == 5
    task = await seen(rt.redis, rt.names)
    assert [m["content"] for m in task.transcript[2:]] == ["zero", "one", "two"]
    assert task.results == {}  # the step's results moved into the transcript
    assert task.log[-4:] == ["ToolCompleted", "ToolCompleted", "ToolCompleted", "StepStarted"]
    assert not (await store.apply(TASK, tool_result("c0"))).applied  # a late duplicate


async def test_tool_state_updates_wait_for_the_join_which_takes_the_state_its_caller_computed(
    store: TaskStore, rt: Runtime
) -> None:
    """A tool's ``Command(update=...)`` keys: kept with the call, nothing changes before
    the step's results join; the result that joins asks for the joined state first
    (the keys' reducers are Python: ``Loop._joined`` computes it) and changes nothing
    until it comes, then the state is the one given."""
    kept = {"empty": [], "visits": 0}
    await store.apply(TASK, start())
    await store.apply(TASK, reply(ai_with_calls("c0", "c1"), extra=json.dumps(kept)))

    def pairs(update: dict[str, Any]) -> str:
        return json.dumps([p for k, v in update.items() for p in (k, json.dumps(v))])

    await store.apply(TASK, tool_result("c1", update=pairs({"visits": 2, "who": {"x": []}})))
    before = await seen(rt.redis, rt.names)
    assert json.loads(before.state["extra"]) == kept  # not applied before the join
    updates, _ = await store.step_updates(TASK, ["c0", "c1"], CORE_CODEC)
    assert _ == {"c1": [("visits", 2), ("who", {"x": []})]} and updates == kept
    asked = await store.apply(TASK, tool_result("c0"))
    assert asked.joining and not asked.applied and asked.expected == ["c0", "c1"]
    assert (await seen(rt.redis, rt.names)).log == before.log  # nothing changed
    joined = json.dumps({**kept, "visits": 2, "who": {"x": []}})
    state = await store.apply(TASK, dataclasses.replace(tool_result("c0"), joined=joined))
    assert state.applied and state.phase == Phase.MODEL and state.step == 2
    task = await seen(rt.redis, rt.names)
    assert task.state["extra"] == joined
    assert "updates" not in task.state
    assert await store.step_updates(TASK, ["c1"], CORE_CODEC) == (json.loads(joined), {})


async def test_a_reply_without_calls_completes_the_task_and_its_keys_expire(
    store: TaskStore, rt: Runtime
) -> None:
    await store.apply(TASK, start(retention=600))
    state = await store.apply(TASK, reply(AIMessage(content="the answer", id="ai:1")))
    assert state.applied and state.status == Status.COMPLETED and state.phase == Phase.DONE
    task = await seen(rt.redis, rt.names)
    assert task.log[-2:] == ["ModelResponded", "TaskCompleted"]
    (done,) = await events_on(rt.redis, rt.names.task_log(TASK), TaskCompleted)
    assert done.answer == "the answer"
    for key in (rt.names.task_state(TASK), rt.names.task_messages(TASK), rt.names.task_log(TASK)):
        assert 0 < await rt.redis.ttl(key) <= 600
    assert not (await store.apply(TASK, tool_result("c0"))).applied  # an ended task stays


async def test_calls_answered_by_after_model_hooks_start_the_next_step_at_once(
    store: TaskStore, rt: Runtime
) -> None:
    await store.apply(TASK, start())
    ai = ai_with_calls("t0", "t1")
    answered = {
        i: ToolMessage(content="refused", tool_call_id=i, status="error") for i in ("t0", "t1")
    }
    note = HumanMessage(content="a note after the reply", id="note")
    state = await store.apply(
        TASK, reply(ai, pre_results=answered, after_ai=[note], extra='{"seen": 1}')
    )
    assert state.applied and (state.step, state.phase) == (2, Phase.MODEL)
    task = await seen(rt.redis, rt.names)
    assert [m["type"] for m in task.transcript] == ["human", "ai", "human", "tool", "tool"]
    assert json.loads(task.state["extra"]) == {"seen": 1}
    assert task.log[-2:] == ["ModelResponded", "StepStarted"]


async def test_the_step_limit_fails_the_task_at_the_join(store: TaskStore, rt: Runtime) -> None:
    await store.apply(TASK, start(max_steps=1))
    await store.apply(TASK, reply(ai_with_calls("c0")))
    state = await store.apply(TASK, tool_result("c0"))
    assert state.applied and state.status == Status.FAILED and state.phase == Phase.DONE
    task = await seen(rt.redis, rt.names)
    assert task.log[-2:] == ["ToolCompleted", "TaskFailed"]
    assert len(task.transcript) == 3  # the result joined before the task stopped


async def test_a_result_at_the_step_limit_asks_for_its_failure(
    store: TaskStore, rt: Runtime
) -> None:
    """The step limit's TaskFailed is not sent with every result: the one result that
    needs it, sent without it, changes nothing and says so; sent again with it, the task
    fails. A result that does not reach the limit needs none."""
    await store.apply(TASK, start(max_steps=2))
    await store.apply(TASK, reply(ai_with_calls("c0")))
    state = await store.apply(TASK, replace(tool_result("c0"), failed_event=b""))
    assert state.applied and (state.step, state.phase) == (2, Phase.MODEL)
    await store.apply(TASK, reply(ai_with_calls("c1", "c2", step=2), step=2))
    first = await store.apply(TASK, replace(tool_result("c1", step=2), failed_event=b""))
    assert first.applied and first.phase == Phase.TOOLS  # not joining: nothing asked
    asked = await store.apply(TASK, replace(tool_result("c2", step=2), failed_event=b""))
    assert not asked.applied and asked.limit_event_needed
    assert (asked.status, asked.phase, asked.done) == (Status.RUNNING, Phase.TOOLS, {"c1"})
    task = await seen(rt.redis, rt.names)
    assert task.log[-1] == "ToolCompleted" and len(task.transcript) == 4
    state = await store.apply(TASK, tool_result("c2", step=2))
    assert state.applied and state.status == Status.FAILED and not state.limit_event_needed
    task = await seen(rt.redis, rt.names)
    assert task.log[-3:] == ["ToolCompleted", "ToolCompleted", "TaskFailed"]
    assert [m["type"] for m in task.transcript] == ["human", "ai", "tool", "ai", "tool", "tool"]


# -- hooks and approvals -------------------------------------------------------------------


def hooks(
    step: int = 1,
    *,
    append: list[Any] | None = None,
    rewrite: list[Any] | None = None,
    end_now: bool = False,
    extra: str = "",
) -> ApplyHooks:
    return ApplyHooks(
        step=step,
        cause=Cause.hooks(step),
        append=[m.model_dump_json() for m in append or []],
        rewrite=None if rewrite is None else [m.model_dump_json() for m in rewrite],
        extra=extra,
        end_now=end_now,
        completed_event=dump_event(TaskCompleted(task_id=TASK, steps=step - 1, answer="early")),
    )


async def test_before_model_hooks_apply_once_a_step_appending_or_rewriting(
    store: TaskStore, rt: Runtime
) -> None:
    await store.apply(TASK, start())
    added = SystemMessage(content="be brief", id="sys")
    state = await store.apply(TASK, hooks(append=[added], extra='{"n": 1}'))
    assert state.applied and state.hooks_step == 1 and state.rev == 0
    assert state.cause == Cause.hooks(1) and state.transcript_len == 2
    assert not (await store.apply(TASK, hooks(append=[added]))).applied  # once per step
    task = await seen(rt.redis, rt.names)
    assert [m["content"] for m in task.transcript] == ["hi", "be brief"]
    assert json.loads(task.state["extra"]) == {"n": 1}

    # the next step's hooks rewrite the transcript: the revision moves
    await store.apply(TASK, reply(ai_with_calls("c0")))
    await store.apply(TASK, tool_result("c0"))
    summary = HumanMessage(content="summary of it all", id="sum")
    state = await store.apply(TASK, hooks(step=2, rewrite=[summary]))
    assert state.applied and state.rev == 1 and state.transcript_len == 1
    assert [m["content"] for m in (await seen(rt.redis, rt.names)).transcript] == [
        "summary of it all"
    ]


async def test_hooks_that_jump_to_the_end_complete_the_task(store: TaskStore, rt: Runtime) -> None:
    await store.apply(TASK, start())
    state = await store.apply(TASK, hooks(end_now=True))
    assert state.applied and state.status == Status.COMPLETED
    assert (await seen(rt.redis, rt.names)).log[-1] == "TaskCompleted"


async def test_asking_a_human_waits_in_the_approval_phase_until_the_reply_is_recorded(
    store: TaskStore, rt: Runtime
) -> None:
    await store.apply(TASK, start())
    ai = ai_with_calls("c0")
    pending = dump_event(ModelResponded(task_id=TASK, step=1, agent_id=AGENT, message=ai))
    asked = ApprovalRequested(task_id=TASK, step=1, request={"action_requests": []})
    ask = AskHuman(
        step=1,
        cause=Cause.approval(1),
        pending=pending,
        approval_event=dump_event(asked),
        node="HumanInTheLoopMiddleware.after_model",
        interrupt_id="i0",
        at="after",
        resume={},
    )
    state = await store.apply(TASK, ask)
    assert state.applied and state.phase == Phase.APPROVAL and state.cause == Cause.approval(1)
    waiting = await store.waiting(TASK)
    assert (waiting.phase, waiting.pending, waiting.interrupt_id) == (Phase.APPROVAL, pending, "i0")
    assert waiting.node == "HumanInTheLoopMiddleware.after_model"
    assert (await seen(rt.redis, rt.names)).log[-1] == "ApprovalRequested"
    assert not (await store.apply(TASK, ask)).applied
    # before_model hooks cannot be applied while an after_model hook waits
    assert not (await store.apply(TASK, hooks())).applied

    # answered, the same node asks again: it waits for its next interrupt in its place
    again = AskHuman(
        step=1,
        cause=Cause.approval(1),
        pending=pending,
        approval_event=dump_event(asked),
        node="HumanInTheLoopMiddleware.after_model",
        interrupt_id="i1",
        at="after",
        resume={"HumanInTheLoopMiddleware.after_model": ["first"]},
        answered="i0",
    )
    assert (await store.apply(TASK, again)).applied
    assert not (await store.apply(TASK, again)).applied  # i0 was answered once
    waiting = await store.waiting(TASK)
    assert waiting.interrupt_id == "i1"
    assert waiting.resume == {"HumanInTheLoopMiddleware.after_model": ["first"]}

    # answered: the reply is recorded from the approval phase
    state = await store.apply(TASK, reply(ai))
    assert state.applied and state.phase == Phase.TOOLS
    waiting = await store.waiting(TASK)
    assert (waiting.pending, waiting.interrupt_id, waiting.resume) == (None, "", {})


async def test_a_before_model_hook_waits_and_its_answer_applies_the_hooks(
    store: TaskStore, rt: Runtime
) -> None:
    await store.apply(TASK, start())
    started = dump_event(StepStarted(task_id=TASK, step=1))
    asked = ApprovalRequested(task_id=TASK, step=1, request="go?", node="Gate.before_model")
    ask = AskHuman(
        step=1,
        cause=Cause.approval(1),
        pending=started,
        approval_event=dump_event(asked),
        node="Gate.before_model",
        interrupt_id="i0",
        at="before",
        resume={},
    )
    assert (await store.apply(TASK, ask)).applied
    ai = ai_with_calls("c0")
    assert not (await store.apply(TASK, reply(ai))).applied  # no reply before the model call
    state = await store.apply(TASK, hooks())
    assert state.applied and state.phase == Phase.MODEL and state.hooks_step == 1
    assert (await store.waiting(TASK)).pending is None


def nodes(step: int, *names: str) -> bytes:
    ran = [NodeUpdate(node=name, update=None) for name in names]
    return dump_event(NodesUpdated(task_id=TASK, step=step, nodes=ran))


async def test_the_hook_nodes_that_ran_are_logged_with_their_transition(
    store: TaskStore, rt: Runtime
) -> None:
    """Where stream modes read them (``NodesUpdated``): before_model hooks when they are
    applied, after_model hooks after the reply they ran on and before the end, and the
    nodes that ran before one that asks a human before its request; once each."""
    await store.apply(TASK, start())
    before = replace(hooks(), nodes_event=nodes(1, "Limit.before_model"))
    assert (await store.apply(TASK, before)).applied
    assert not (await store.apply(TASK, before)).applied
    ai = ai_with_calls("c0")
    pending = dump_event(ModelResponded(task_id=TASK, step=1, agent_id=AGENT, message=ai))
    asked = ApprovalRequested(task_id=TASK, step=1, request="ok?", node="Gate.after_model")
    ask = AskHuman(
        step=1,
        cause=Cause.approval(1),
        pending=pending,
        approval_event=dump_event(asked),
        node="Gate.after_model",
        interrupt_id="i0",
        at="after",
        resume={},
        nodes_event=nodes(1, "Limit.after_model"),
    )
    assert (await store.apply(TASK, ask)).applied
    answer = AIMessage(content="done", id="ai:1")
    done = replace(reply(answer), nodes_event=nodes(1, "Gate.after_model"))
    assert (await store.apply(TASK, done)).applied
    assert not (await store.apply(TASK, done)).applied
    assert (await seen(rt.redis, rt.names)).log == [
        "TaskSubmitted",
        "StepStarted",
        "NodesUpdated",
        "NodesUpdated",
        "ApprovalRequested",
        "ModelResponded",
        "NodesUpdated",
        "TaskCompleted",
    ]
    logged = [e for e in await events_on(rt.redis, rt.names.task_log(TASK))]
    ran = [[n.node for n in e.nodes] for e in logged if isinstance(e, NodesUpdated)]
    assert ran == [["Limit.before_model"], ["Limit.after_model"], ["Gate.after_model"]]


def interrupted(call_id: str) -> ToolInterrupted:
    return ToolInterrupted(
        task_id=TASK,
        step=1,
        agent_id=AGENT,
        call=ToolCall(id=call_id, name="add", args={}),
        request={"name": "add"},
    )


def park(call_id: str, refused: str = "", answered: int = 0) -> ParkCall:
    asked = ApprovalRequested(task_id=TASK, step=1, request={"name": "add"})
    return ParkCall(
        step=1,
        call_id=call_id,
        interrupted_event=dump_event(interrupted(call_id)),
        approval_event=dump_event(asked),
        refused_decision=refused,
        answered=answered,
    )


async def test_a_gated_call_parks_once_and_takes_one_decision(
    store: TaskStore, rt: Runtime
) -> None:
    await store.apply(TASK, start())
    await store.apply(TASK, reply(ai_with_calls("gated", "free")))
    assert (await store.apply(TASK, park("gated"))).applied
    assert not (await store.apply(TASK, park("gated"))).applied
    assert not (await store.apply(TASK, park("unknown"))).applied
    step, waiting = await waiting_calls(rt.redis, rt.names, TASK)
    assert step == 1 and [(w.call_id, w.decision) for w in waiting] == [("gated", None)]
    assert (await seen(rt.redis, rt.names)).log[-1] == "ApprovalRequested"

    approve, reject = '{"type":"approve"}', '{"type":"reject"}'
    decide = DecideCall(step=1, call_id="gated", decision=approve)
    assert await store.decide_call(TASK, decide) == ("decided", approve)
    other = DecideCall(step=1, call_id="gated", decision=reject)
    assert await store.decide_call(TASK, other) == ("taken", approve)
    free = DecideCall(step=1, call_id="free", decision=approve)
    assert await store.decide_call(TASK, free) == ("not-waiting", "")

    # the decision was refused by the call's schema: it waits again, asked anew
    assert (await store.apply(TASK, park("gated", refused=approve))).applied
    assert (await seen(rt.redis, rt.names)).log[-2:] == ["ToolInterrupted", "ApprovalRequested"]
    assert await store.decide_call(TASK, other) == ("decided", reject)

    await store.apply(TASK, tool_result("gated"))
    assert await store.decide_call(TASK, decide) == ("done", "")


async def test_a_call_that_interrupts_again_waits_with_its_earlier_answers(
    store: TaskStore, rt: Runtime
) -> None:
    """A tool whose ``interrupt()`` is answered and that calls it once more: the second
    interrupt waits in its place, with an id of its own, and the first answer is kept
    for the call's next run (its first ``interrupt()`` returns it again)."""
    await store.apply(TASK, start())
    await store.apply(TASK, reply(ai_with_calls("asks")))
    assert (await store.apply(TASK, park("asks"))).applied
    # a second interrupt before the first was answered is a redelivery: nothing changes
    assert not (await store.apply(TASK, park("asks", answered=1))).applied
    first = '"mountains"'
    assert await store.decide_call(TASK, DecideCall(step=1, call_id="asks", decision=first)) == (
        "decided",
        first,
    )
    asked_before = len((await seen(rt.redis, rt.names)).log)
    assert (await store.apply(TASK, park("asks", answered=1))).applied  # it asks again
    assert not (await store.apply(TASK, park("asks", answered=1))).applied  # once
    assert not (await store.apply(TASK, park("asks"))).applied  # the first one is answered
    assert (await seen(rt.redis, rt.names)).log[asked_before:] == ["ApprovalRequested"]
    _, (waiting,) = await waiting_calls(rt.redis, rt.names, TASK)
    assert (waiting.decision, waiting.earlier, waiting.interrupt_id) == (
        None,
        ["mountains"],
        "asks#1",
    )
    second = '{"tone":"calm"}'
    decide = DecideCall(step=1, call_id="asks", decision=second)
    assert await store.decide_call(TASK, decide) == ("decided", second)
    assert (await store.apply(TASK, park("asks", answered=2))).applied
    _, (waiting,) = await waiting_calls(rt.redis, rt.names, TASK)
    assert waiting.earlier == ["mountains", {"tone": "calm"}]


# -- endings -------------------------------------------------------------------------------


async def test_a_running_task_fails_once_and_an_ended_one_stays(
    store: TaskStore, rt: Runtime
) -> None:
    await store.apply(TASK, start())
    state = await store.apply(TASK, fail("cancelled: enough"))
    assert state.applied and state.status == Status.FAILED and state.cause == Cause.CANCEL
    assert not (await store.apply(TASK, fail("deadline exceeded", Cause.DEADLINE))).applied
    (failed,) = await events_on(rt.redis, rt.names.task_log(TASK), TaskFailed)
    assert failed.reason == "cancelled: enough"
    assert not (await store.apply("no-such-task", fail("x"))).exists


async def test_a_refused_event_ends_its_task_and_a_refused_submission_gets_a_record(
    store: TaskStore, rt: Runtime
) -> None:
    def refuse(task_id: str, create: bool) -> RefuseTask:
        failed = TaskFailed(task_id=task_id, step=0, reason="the tools stage could not ...")
        return RefuseTask(
            failed_event=dump_event(failed),
            cause=Cause.refused("tools"),
            retention=600,
            create=create,
            entry="",
        )

    await store.apply(TASK, start())
    state = await store.apply(TASK, refuse(TASK, create=False))
    assert state.applied and state.status == Status.FAILED
    assert state.cause == Cause.refused("tools")
    assert not (await store.apply(TASK, refuse(TASK, create=False))).applied

    # an event of a task that never started: nothing is created for it...
    assert not (await store.apply("ghost", refuse("ghost", create=False))).exists
    assert await rt.redis.exists(rt.names.task_state("ghost")) == 0
    # ...but a refused submission ends for its waiting client, and is kept for a while
    state = await store.apply("refused", refuse("refused", create=True))
    assert state.applied and state.status == Status.FAILED and state.step == 0
    (failed,) = await events_on(rt.redis, rt.names.task_log("refused"), TaskFailed)
    assert failed.task_id == "refused"
    assert 0 < await rt.redis.ttl(rt.names.task_state("refused")) <= 600


# -- no state change ----------------------------------------------------------------------


async def test_log_once_logs_an_event_once_per_key(store: TaskStore, rt: Runtime) -> None:
    await store.apply(TASK, start())
    update = TodosUpdated(
        task_id=TASK, step=1, todos=[Todo(content="x", status="pending")], counts={"pending": 1}
    )
    assert await store.log_once(TASK, "todos:1:c0", dump_event(update))
    assert not await store.log_once(TASK, "todos:1:c0", dump_event(update))
    assert await store.log_once(TASK, "todos:1:c1", dump_event(update))
    assert (await seen(rt.redis, rt.names)).log.count("TodosUpdated") == 2


def test_a_transition_whose_lua_names_other_arguments_is_refused() -> None:
    @dataclass(frozen=True, slots=True)
    class Misnamed(Args):
        LUA = "fail"
        cause: str
        failed_event: bytes

    with pytest.raises(ValueError, match="declares ARGV"):
        build_script(Misnamed)

"""The stream-mode translator (``loopline.stream_modes.ModeTranslator``) on a log of
events, in this process: where a run that waits for a human ends, how a resumed run
goes on (the supersteps counted on, the waiting step's results replayed, the results
applied in call order), and a hook's update that names unchanged messages by reference.
What the same items look like next to LangChain's: ``tests/test_interrupt_stream.py``."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage as LcHumanMessage
from langgraph.types import Interrupt

from contracts.events import (
    AnyEvent,
    ApprovalRequested,
    ModelResponded,
    NodesUpdated,
    NodeUpdate,
    StepStarted,
    ToolCompleted,
)
from contracts.messages import AIMessage, ToolCall, ToolMessage, to_langchain
from loopline.stream_modes import ModeTranslator

pytestmark = pytest.mark.fast

TASK = "t1"
MODES = ["messages", "updates", "values"]
HITL = "HumanInTheLoopMiddleware.after_model"
AI = AIMessage(
    content="",
    id="ai-1",
    tool_calls=[ToolCall(id="a", name="add", args={}), ToolCall(id="b", name="hang", args={})],
)


def result(call_id: str, content: str) -> ToolCompleted:
    message = ToolMessage(content=content, tool_call_id=call_id, name="add")
    return ToolCompleted(task_id=TASK, step=1, agent_id="x", message=message)


def per_call_wait() -> list[AnyEvent]:
    """Call ``a`` asks a human, then ``b`` ends."""
    return [
        StepStarted(task_id=TASK, step=1),
        ModelResponded(task_id=TASK, step=1, agent_id="x", message=AI),
        NodesUpdated(task_id=TASK, step=1, nodes=[NodeUpdate(node=HITL)]),
        ApprovalRequested(
            task_id=TASK, step=1, request={"name": "add"}, interrupt_id="a", node="tools"
        ),
        result("b", "woke up"),
    ]


def kinds(items: list[Any]) -> list[tuple[str, Any]]:
    out = []
    for mode, data in items:
        if mode == "messages":
            out.append((mode, (data[0].content, data[1]["langgraph_step"])))
        elif mode == "updates":
            out.append((mode, next(iter(data))))
        else:
            out.append((mode, [m.content for m in data["messages"]]))
    return out


def test_a_waiting_call_ends_the_run_once_the_steps_other_calls_ended() -> None:
    translator = ModeTranslator(TASK, MODES, [LcHumanMessage(content="hi", id="h")])
    events = per_call_wait()
    items = translator.take([], events[:-1])
    assert not translator.done  # b still runs
    assert kinds(items)[-5:] == [
        ("updates", "model"),
        ("values", ["hi", ""]),
        ("updates", HITL),
        ("updates", "__interrupt__"),
        ("values", ["hi", ""]),  # the state at the interrupt, with it
    ]
    assert items[-1][1]["__interrupt__"] == (Interrupt({"name": "add"}, "a"),)
    items = translator.take([], events[-1:])
    assert translator.done
    assert kinds(items) == [
        ("messages", ("woke up", 3)),  # model 1, the HITL node 2, the tools 3
        ("updates", "tools"),
        ("values", ["hi", "", "woke up"]),
    ]


def test_a_resumed_run_goes_on_from_the_log_before_it() -> None:
    translator = ModeTranslator(TASK, MODES, [])
    translator.prime(per_call_wait())
    checkpoint = [LcHumanMessage(content="hi", id="h"), to_langchain(AI)]
    translator.resume_from(checkpoint, ["a"], {})
    begun = translator.begin()
    assert begun[1] == (
        "updates",
        {
            "tools": {"messages": [to_langchain(result("b", "woke up").message)]},
            "__metadata__": {"cached": True},
        },
    )
    items = translator.take([], [result("a", "no")])
    assert kinds(begun[:1] + items) == [
        ("values", ["hi", ""]),
        ("messages", ("no", 3)),  # the same superstep, the first call sent
        ("updates", "tools"),
        ("values", ["hi", "", "no", "woke up"]),  # in call order
    ]
    assert items[0][1][1]["langgraph_path"] == ("__pregel_push", 0, False)


def test_a_hook_update_names_unchanged_messages_by_reference() -> None:
    """A message the node returned unchanged (here one stored without an id, named by
    its stand-in) is the state's own: not a new message, not duplicated."""
    translator = ModeTranslator(TASK, MODES, [LcHumanMessage(content="hi")])
    added = {"type": "human", "content": "more", "id": "m2"}
    update = {"messages": [{"type": "ref", "id": "loopline-stand-in:0"}, added], "n": 1}
    ran = NodesUpdated(
        task_id=TASK, step=1, nodes=[NodeUpdate(node="X.before_model", update=update)]
    )
    items = translator.take([], [StepStarted(task_id=TASK, step=1), ran])
    assert [(m, d[0].content) for m, d in items if m == "messages"] == [("messages", "more")]
    (updated,) = [d for m, d in items if m == "updates"]
    assert [m.content for m in updated["X.before_model"]["messages"]] == ["hi", "more"]
    assert updated["X.before_model"]["messages"][0].id is None  # shown as stored
    (values,) = [d for m, d in items if m == "values"]
    assert [m.content for m in values["messages"]] == ["hi", "more"] and values["n"] == 1


def test_a_hook_update_joins_the_state_keys_through_their_reducers() -> None:
    """What a hook node returns folds into ``values`` as LangGraph's channels fold it
    (a reducer key grows), and the view decides which keys show."""
    import operator

    from langgraph.channels.binop import BinaryOperatorAggregate
    from langgraph.channels.last_value import LastValue

    from loopline.stream_modes import StateView
    from services.spec.channels import StateChannels

    channels = StateChannels(
        {"seen": BinaryOperatorAggregate(list, operator.add), "hidden": LastValue(int)}
    )
    view = StateView(initial={"seen": ["a"]}, channels=channels, shown=lambda k: k != "hidden")
    translator = ModeTranslator(TASK, MODES, [LcHumanMessage(content="hi")], view)
    assert translator.begin() == [("values", {"messages": translator.state, "seen": ["a"]})]
    update = {"seen": ["b"], "hidden": 1}
    ran = NodesUpdated(
        task_id=TASK, step=1, nodes=[NodeUpdate(node="X.before_model", update=update)]
    )
    items = translator.take([], [StepStarted(task_id=TASK, step=1), ran])
    (updated,) = [d for m, d in items if m == "updates"]
    assert updated == {"X.before_model": {"seen": ["b"]}}  # as the node returned it
    (values,) = [d for m, d in items if m == "values"]
    assert values["seen"] == ["a", "b"] and "hidden" not in values
    assert translator.keys["hidden"] == 1  # in the state, not shown


def test_an_after_model_hooks_items_read_with_a_tools_result_come_before_the_tools() -> None:
    """The after_model hook wrote before the loop let the tools run, but a reader that
    lagged finds its batch in the same read as a tool's result: the hook's items still
    go out first, as LangGraph streams them (the hook's node ran before the tools)."""
    from contracts.chunks import ChunkBatch

    translator = ModeTranslator(TASK, ["custom"], [LcHumanMessage(content="hi", id="h")])
    ai = AIMessage(content="", id="ai-1", tool_calls=[ToolCall(id="a", name="add", args={})])
    early = [
        StepStarted(task_id=TASK, step=1),
        ModelResponded(task_id=TASK, step=1, agent_id="x", message=ai),
    ]
    assert translator.take([], early) == []
    hook = ChunkBatch(task_id=TASK, step=1, attempt=1, custom=["hook"], stage="after_model")
    tool = ChunkBatch(
        task_id=TASK, step=1, attempt=1, custom=["tool"], stage="tools", call_id="a"
    )
    items = translator.take([hook, tool], [result("a", "5")])
    assert items == [("custom", "hook"), ("custom", "tool")]

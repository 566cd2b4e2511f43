"""The thread routes of the Agent Server API (search, count, update, copy, prune,
delete; the state now and at a checkpoint, state updates with ``as_node``, the history of
checkpoints with its filters) through the real ``langgraph_sdk`` client against
``loopline serve api`` with the services as processes (the fixtures of
``test_http_gateway``).

What LangGraph's own server (``langgraph dev``, langgraph-api 0.16.7 in memory) answered
to the same calls, on a ``create_agent`` graph and the same scripted replies, is kept
below as data (``REFERENCE_*``, ids and times left out).
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

import httpx
import pytest
from langgraph_sdk.errors import NotFoundError

from tests import test_http_gateway as shared
from tests.test_http_gateway import ANSWER, hello

scripted = shared.scripted
deployment = shared.deployment
gateway = shared.gateway
sdk = shared.sdk

REFERENCE_THREAD_KEYS = {
    "thread_id",
    "created_at",
    "updated_at",
    "state_updated_at",
    "metadata",
    "status",
    "config",
    "values",
}
"""``threads.create``, ``search``, ``update``: every field of the thread (loopline adds
``error`` and ``interrupts``, as LangGraph's server shows on a thread that has run)."""
REFERENCE_RAN_METADATA = {"graph_id": "agent", "assistant_id": "agent"}
"""What a run adds to its thread's metadata (LangGraph's server: the graph's name and the
assistant's id, here the deployed agent's name)."""
REFERENCE_PRUNED = {"pruned_count": 1}
REFERENCE_PRUNED_NOTHING = {"pruned_count": 0}  # a thread id that does not exist
REFERENCE_STATUS = {  # the status codes of refused or impossible calls
    "search_bad_status": 422,
    "search_bad_sort": 422,
    "search_bad_select": 422,
    "update_missing": 404,
    "copy_missing": 409,
    "prune_bad_strategy": 422,
    "prune_keep_latest": 422,  # "keep_latest strategy is not supported in in-memory runtime"
    "get_pruned": 404,
}


async def _status_of(call: Any) -> int:
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await call
    return int(refused.value.response.status_code)


async def test_threads_are_searched_counted_updated_copied_and_pruned(sdk: Any) -> None:
    tag = str(uuid.uuid4())  # this test's threads among every other test's
    ann = await sdk.threads.create(metadata={"owner": "ann", "n": 1, "tag": tag})
    bob = await sdk.threads.create(metadata={"owner": "bob", "n": 2, "tag": tag})
    assert set(ann) >= REFERENCE_THREAD_KEYS
    await sdk.runs.wait(bob["thread_id"], "agent", input=hello())

    found = await sdk.threads.search(metadata={"owner": "ann", "tag": tag})
    assert [t["thread_id"] for t in found] == [ann["thread_id"]]
    assert set(found[0]) >= REFERENCE_THREAD_KEYS and found[0]["values"] is None
    by_id = await sdk.threads.search(ids=[bob["thread_id"]])
    assert [t["thread_id"] for t in by_id] == [bob["thread_id"]]
    assert [m["content"] for m in by_id[0]["values"]["messages"]] == ["hello", ANSWER]
    idle = await sdk.threads.search(status="idle", metadata={"owner": "bob", "tag": tag})
    assert len(idle) == 1
    assert await sdk.threads.search(status="busy", metadata={"tag": tag}) == []
    said = await sdk.threads.search(values={"messages": [{"content": ANSWER}]}, limit=1000)
    assert bob["thread_id"] in [t["thread_id"] for t in said]
    assert ann["thread_id"] not in [t["thread_id"] for t in said]
    selected = await sdk.threads.search(
        metadata={"owner": "ann", "tag": tag}, select=["thread_id", "metadata"]
    )
    assert selected == [{"thread_id": ann["thread_id"], "metadata": ann["metadata"]}]
    oldest_first = await sdk.threads.search(
        sort_by="created_at", sort_order="asc", limit=2, metadata={"tag": tag}
    )
    assert [t["metadata"]["owner"] for t in oldest_first] == ["ann", "bob"]
    page = await sdk.threads.search(
        sort_by="created_at", sort_order="asc", limit=1, offset=1, metadata={"tag": tag}
    )
    assert [t["metadata"]["owner"] for t in page] == ["bob"]
    assert await sdk.threads.count(metadata={"owner": "ann", "tag": tag}) == 1
    assert await sdk.threads.count(status="idle", metadata={"tag": tag}) == 2

    updated = await sdk.threads.update(ann["thread_id"], metadata={"n": 5, "x": "y"})
    assert updated["metadata"] == {"owner": "ann", "n": 5, "tag": tag, "x": "y"}
    assert updated["created_at"] == ann["created_at"]
    assert updated["updated_at"] > ann["updated_at"]
    assert (await sdk.threads.get(ann["thread_id"]))["metadata"] == updated["metadata"]

    ran = await sdk.threads.get(bob["thread_id"])  # its metadata name who ran on it
    assert ran["metadata"] == {**bob["metadata"], **REFERENCE_RAN_METADATA}
    by_graph = await sdk.threads.search(metadata={"graph_id": "agent", "tag": tag})
    assert [t["thread_id"] for t in by_graph] == [bob["thread_id"]]
    copied = await sdk.threads.copy(bob["thread_id"])
    assert copied["thread_id"] != bob["thread_id"] and copied["status"] == "idle"
    assert copied["metadata"] == ran["metadata"]
    state = await sdk.threads.get_state(copied["thread_id"])
    original = await sdk.threads.get_state(bob["thread_id"])
    assert state["values"] == original["values"]
    assert state["checkpoint"]["thread_id"] == copied["thread_id"]
    # the copy goes on by itself: the original does not see its turn
    await sdk.runs.wait(copied["thread_id"], "agent", input=hello("again"))
    turns = (await sdk.threads.get_state(copied["thread_id"]))["values"]["messages"]
    assert [m["content"] for m in turns] == ["hello", ANSWER, "again", "answer to again"]
    assert (await sdk.threads.get_state(bob["thread_id"]))["values"] == original["values"]

    statuses = {
        "search_bad_status": await _status_of(sdk.threads.search(status="nope")),
        "search_bad_sort": await _status_of(sdk.threads.search(sort_by="nope")),
        "search_bad_select": await _status_of(sdk.threads.search(select=["nope"])),
        "update_missing": await _status_of(sdk.threads.update(str(uuid.uuid4()), metadata={})),
        "copy_missing": await _status_of(sdk.threads.copy(str(uuid.uuid4()))),
        "prune_bad_strategy": await _status_of(
            sdk.threads.prune([ann["thread_id"]], strategy="nope")
        ),
        "prune_keep_latest": await _status_of(
            sdk.threads.prune([ann["thread_id"]], strategy="keep_latest")
        ),
    }
    assert await sdk.threads.prune([str(uuid.uuid4())]) == REFERENCE_PRUNED_NOTHING
    assert await sdk.threads.prune([bob["thread_id"]]) == REFERENCE_PRUNED
    statuses["get_pruned"] = await _status_of(sdk.threads.get(bob["thread_id"]))
    assert statuses == REFERENCE_STATUS
    assert (await sdk.threads.get(copied["thread_id"]))["thread_id"] == copied["thread_id"]

    await sdk.threads.delete(ann["thread_id"])
    assert await sdk.threads.count(metadata={"owner": "ann", "tag": tag}) == 0
    with pytest.raises(NotFoundError):
        await sdk.threads.delete(ann["thread_id"])


REFERENCE_UPDATE_KEYS = {"checkpoint", "checkpoint_id", "configurable"}
"""``threads.update_state``'s answer, as LangGraph's server gave it."""
REFERENCE_MISSING_CHECKPOINT = {  # the state at an id the thread does not have: empty
    "values": {},
    "next": [],
    "tasks": [],
    "metadata": None,
    "created_at": None,
    "parent_checkpoint": None,
    "interrupts": [],
    "parent_checkpoint_id": None,
}
REFERENCE_NEW_THREAD_STATE = {
    **REFERENCE_MISSING_CHECKPOINT,
    "checkpoint": None,
    "checkpoint_id": None,
}
REFERENCE_REFUSED = {  # status codes, and what the detail says
    "update_unknown_node": (400, "Node nope does not exist"),
    "update_before_any_run": (400, "has not run"),  # LangGraph's: "no assigned graph ID"
    "history_before_not_a_config": (422, "before"),  # LangGraph's server: 500
}


async def _refused(call: Any) -> tuple[int, str]:
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await call
    return refused.value.response.status_code, str(refused.value.response.json()["detail"])


async def test_state_at_a_checkpoint_and_state_updates(sdk: Any, scripted: Any) -> None:
    tid = (await sdk.threads.create())["thread_id"]
    await sdk.runs.wait(tid, "agent", input=hello())
    first = await sdk.threads.get_state(tid)
    await sdk.runs.wait(tid, "agent", input=hello("again"))
    at_first = await sdk.threads.get_state(tid, checkpoint_id=first["checkpoint_id"])
    assert at_first["values"] == first["values"]
    assert at_first["checkpoint_id"] == first["checkpoint_id"]
    by_config = await sdk.threads.get_state(tid, checkpoint=first["checkpoint"])
    assert by_config["values"] == first["values"]
    missing = str(uuid.uuid4())
    nowhere = await sdk.threads.get_state(tid, checkpoint_id=missing)
    assert nowhere["checkpoint_id"] == missing
    assert {k: nowhere[k] for k in REFERENCE_MISSING_CHECKPOINT} == REFERENCE_MISSING_CHECKPOINT
    looped = await sdk.threads.get_history(tid, metadata={"source": "loop"})
    assert looped and all(h["metadata"]["source"] == "loop" for h in looped)
    assert await sdk.threads.get_history(tid, metadata={"source": "nowhere"}) == []

    note = {"role": "user", "content": "remember: blue", "id": "note-1"}
    answer = await sdk.threads.update_state(tid, {"messages": [note]})
    assert set(answer) >= REFERENCE_UPDATE_KEYS
    assert answer["checkpoint"]["thread_id"] == tid
    now = await sdk.threads.get_state(tid)
    assert now["checkpoint_id"] == answer["checkpoint_id"] and now["metadata"]["source"] == "update"
    assert [m["content"] for m in now["values"]["messages"]][-2:] == [
        "answer to again",
        "remember: blue",
    ]
    edited = {**note, "content": "remember: green"}  # same id: replaced, as add_messages does
    await sdk.threads.update_state(tid, {"messages": [edited]})
    shown = (await sdk.threads.get_state(tid))["values"]["messages"]
    assert [m["content"] for m in shown][-1:] == ["remember: green"] and len(shown) == 5

    scripted.reset()
    await sdk.runs.wait(tid, "agent", input=hello("third"))
    (sent,) = scripted.chat_requests()
    assert [m["content"] for m in sent["messages"]][-2:] == ["remember: green", "third"]

    fresh = (await sdk.threads.create())["thread_id"]
    assert await sdk.threads.get_state(fresh) == REFERENCE_NEW_THREAD_STATE
    assert await sdk.threads.get_history(fresh) == []
    refused = {
        "update_unknown_node": await _refused(
            sdk.threads.update_state(tid, {"messages": []}, as_node="nope")
        ),
        "update_before_any_run": await _refused(
            sdk.threads.update_state(fresh, {"messages": [note]})
        ),
        "history_before_not_a_config": await _refused(
            sdk.threads.get_history(tid, before=first["checkpoint"])
        ),
    }
    for name, (status, says) in REFERENCE_REFUSED.items():
        assert refused[name][0] == status and says in refused[name][1], (name, refused[name])


# What LangGraph's server answered for a thread of the plain agent that called a tool
# ("gated": the model calls add(2, 3), then answers), each state outlined by
# ``outline``: its metadata's source and step, next, tasks (name, path, the messages
# written) and the messages of its values, newest first.
REFERENCE_TOOL_HISTORY = [
    ["loop", 3, [], [], [["human", "gated"], ["ai", ""], ["tool", "5"], ["ai", "2 + 3 is 5."]]],
    [
        "loop",
        2,
        ["model"],
        [["model", ["__pregel_pull", "model"], [["ai", "2 + 3 is 5."]]]],
        [["human", "gated"], ["ai", ""], ["tool", "5"]],
    ],
    [
        "loop",
        1,
        ["tools"],
        [["tools", ["__pregel_push", 0, False], [["tool", "5"]]]],
        [["human", "gated"], ["ai", ""]],
    ],
    [
        "loop",
        0,
        ["model"],
        [["model", ["__pregel_pull", "model"], [["ai", ""]]]],
        [["human", "gated"]],
    ],
    [
        "input",
        -1,
        ["__start__"],
        [["__start__", ["__pregel_pull", "__start__"], [["user", "gated"]]]],
        [],
    ],
]
REFERENCE_AFTER_MODEL_UPDATE = [  # as_node="model", an AI message without calls
    "update",
    4,
    [],
    [],
    [["human", "gated"], ["ai", ""], ["tool", "5"], ["ai", "2 + 3 is 5."], ["ai", "x"]],
]
REFERENCE_AFTER_TOOLS_UPDATE = [  # then as_node="tools", a tool message
    "update",
    5,
    ["model"],
    [["model", ["__pregel_pull", "model"], None]],
    [
        ["human", "gated"],
        ["ai", ""],
        ["tool", "5"],
        ["ai", "2 + 3 is 5."],
        ["ai", "x"],
        ["tool", "5"],
    ],
]
REFERENCE_UPDATE_AT_CHECKPOINT = [  # a user message at the state of step 1 (as_node None)
    "update",
    2,
    ["tools"],
    [["tools", ["__pregel_push", 0, False], None]],
    [["human", "gated"], ["ai", ""], ["human", "y"]],
]


def _input_as_a_message(states: list[list[Any]]) -> list[list[Any]]:
    """The one known difference: the ``__start__`` task's result is the input as
    LangGraph's server got it from the client (``{"role": "user", ...}``); loopline
    shows the message it became (``type`` "human"), as its run's log holds it."""
    shown = copy.deepcopy(states)
    for state in shown:
        for task in state[3]:
            if task[0] == "__start__":
                task[2] = [["human" if t == "user" else t, c] for t, c in task[2]]
    return shown


def _written(result: Any) -> Any:
    if result is None:
        return None
    return [[m.get("type", m.get("role")), m["content"]] for m in result.get("messages", [])]


def outline(state: dict[str, Any]) -> list[Any]:
    """What of a ``ThreadState`` is compared with LangGraph's (ids and times apart)."""
    metadata = state["metadata"] or {}
    return [
        metadata.get("source"),
        metadata.get("step"),
        state["next"],
        [[t["name"], t["path"], _written(t["result"])] for t in state["tasks"]],
        [[m["type"], m["content"]] for m in (state["values"] or {}).get("messages", [])],
    ]


def _chained(states: list[dict[str, Any]]) -> bool:
    """Each state's parent is the one after it (newest first), the oldest has none."""
    parents = [s["parent_checkpoint_id"] for s in states]
    return parents == [s["checkpoint_id"] for s in states[1:]] + [None]


async def test_history_of_a_thread_with_tool_calls_as_langgraph_shows_it(sdk: Any) -> None:
    tid = (await sdk.threads.create())["thread_id"]
    await sdk.runs.wait(tid, "agent", input=hello("gated"))
    states = await sdk.threads.get_history(tid)
    assert [outline(s) for s in states] == _input_as_a_message(REFERENCE_TOOL_HISTORY)
    assert _chained(states)
    now = await sdk.threads.get_state(tid)
    assert outline(now) == REFERENCE_TOOL_HISTORY[0]
    assert now["checkpoint_id"] == states[0]["checkpoint_id"]
    assert now["parent_checkpoint_id"] == states[1]["checkpoint_id"]

    step1 = states[2]  # the model asked for the tool: next, the tools
    at = await sdk.threads.get_state(tid, checkpoint_id=step1["checkpoint_id"])
    assert outline(at) == REFERENCE_TOOL_HISTORY[2] and at == step1
    assert await sdk.threads.get_state(tid, checkpoint=step1["checkpoint"]) == step1

    newest_two = await sdk.threads.get_history(tid, limit=2)
    assert [s["checkpoint_id"] for s in newest_two] == [s["checkpoint_id"] for s in states[:2]]
    older = await sdk.threads.get_history(tid, before={"configurable": step1["checkpoint"]})
    assert [outline(s) for s in older] == _input_as_a_message(REFERENCE_TOOL_HISTORY[3:])
    inputs = await sdk.threads.get_history(tid, metadata={"source": "input"})
    assert [outline(s) for s in inputs] == _input_as_a_message(REFERENCE_TOOL_HISTORY[4:])
    by_step = await sdk.threads.get_history(tid, metadata={"step": 1})
    assert [s["checkpoint_id"] for s in by_step] == [step1["checkpoint_id"]]
    only = await sdk.threads.get_history(tid, checkpoint={"checkpoint_id": step1["checkpoint_id"]})
    assert only == [step1]

    ai = {"role": "ai", "content": "x", "id": "ai-x"}
    made = await sdk.threads.update_state(tid, {"messages": [ai]}, as_node="model")
    after_model = await sdk.threads.get_state(tid)
    assert after_model["checkpoint_id"] == made["checkpoint_id"]
    assert after_model["parent_checkpoint_id"] == now["checkpoint_id"]
    assert outline(after_model) == REFERENCE_AFTER_MODEL_UPDATE
    result = {"role": "tool", "content": "5", "tool_call_id": "nope"}
    await sdk.threads.update_state(tid, {"messages": [result]}, as_node="tools")
    after_tools = await sdk.threads.get_state(tid)
    assert outline(after_tools) == REFERENCE_AFTER_TOOLS_UPDATE
    assert after_tools["parent_checkpoint_id"] == made["checkpoint_id"]

    user = {"role": "user", "content": "y", "id": "u-y"}
    forked = await sdk.threads.update_state(
        tid, {"messages": [user]}, checkpoint_id=step1["checkpoint_id"]
    )
    newest = await sdk.threads.get_history(tid, limit=4)
    assert [outline(s) for s in newest] == [
        REFERENCE_UPDATE_AT_CHECKPOINT,
        REFERENCE_AFTER_TOOLS_UPDATE,
        REFERENCE_AFTER_MODEL_UPDATE,
        REFERENCE_TOOL_HISTORY[0],
    ]
    assert newest[0]["checkpoint_id"] == forked["checkpoint_id"]
    assert newest[0]["parent_checkpoint_id"] == step1["checkpoint_id"]

    hook = "HumanInTheLoopMiddleware.after_model"  # not a node of this agent: unknown
    status, says = await _refused(sdk.threads.update_state(tid, {}, as_node=hook))
    assert status == 400 and hook in says
    gated = (await sdk.threads.create())["thread_id"]
    await sdk.runs.wait(gated, "gated", input=hello())
    # a node of that agent, but the bus runs on from the model or the tools only
    status, says = await _refused(sdk.threads.update_state(gated, {}, as_node=hook))
    assert status == 422 and "as_node" in says and "not implemented" in says


ASKED = {  # what HumanInTheLoopMiddleware asks before add(2, 3)
    "action_requests": [
        {
            "name": "add",
            "args": {"a": 2, "b": 3},
            "description": "Tool execution requires approval\n\nTool: add\nArgs: {'a': 2, 'b': 3}",
        }
    ],
    "review_configs": [
        {"action_name": "add", "allowed_decisions": ["approve", "edit", "reject", "respond"]}
    ],
}
HITL = "HumanInTheLoopMiddleware.after_model"
_PULL_HITL = ["__pregel_pull", HITL]
_INPUT = [
    "input",
    -1,
    ["__start__"],
    [["__start__", ["__pregel_pull", "__start__"], [["user", "gated"]], []]],
    [],
    [],
]
_FIRST_MODEL = [
    "loop",
    0,
    ["model"],
    [["model", ["__pregel_pull", "model"], [["ai", ""]], []]],
    [["human", "gated"]],
    [],
]
# LangGraph's server, for the agent with HumanInTheLoopMiddleware on add: its history
# while the run waits for the answer, then once approved and done (``asked_outline``:
# ``outline`` with each task's interrupts and the state's), newest first
REFERENCE_WAITING_HISTORY = [
    [
        "loop",
        1,
        [HITL],
        [[HITL, _PULL_HITL, None, [ASKED]]],
        [["human", "gated"], ["ai", ""]],
        [ASKED],
    ],
    _FIRST_MODEL,
    _INPUT,
]
REFERENCE_ANSWERED_HISTORY = [
    ["loop", 5, [], [], [["human", "gated"], ["ai", ""], ["tool", "5"], ["ai", "2 + 3 is 5."]], []],
    [
        "loop",
        4,
        [HITL],
        [[HITL, _PULL_HITL, [], []]],
        [["human", "gated"], ["ai", ""], ["tool", "5"], ["ai", "2 + 3 is 5."]],
        [],
    ],
    [
        "loop",
        3,
        ["model"],
        [["model", ["__pregel_pull", "model"], [["ai", "2 + 3 is 5."]], []]],
        [["human", "gated"], ["ai", ""], ["tool", "5"]],
        [],
    ],
    [
        "loop",
        2,
        ["tools"],
        [["tools", ["__pregel_push", 0, False], [["tool", "5"]], []]],
        [["human", "gated"], ["ai", ""]],
        [],
    ],
    [
        "loop",
        1,
        [HITL],
        [[HITL, _PULL_HITL, [["ai", ""]], [ASKED]]],
        [["human", "gated"], ["ai", ""]],
        [ASKED],
    ],
    _FIRST_MODEL,
    _INPUT,
]


def asked_outline(state: dict[str, Any]) -> list[Any]:
    source, step, next_, tasks, messages = outline(state)
    for task, shown in zip(tasks, state["tasks"], strict=True):
        task.append([i["value"] for i in shown["interrupts"]])
    return [source, step, next_, tasks, messages, [i["value"] for i in state["interrupts"]]]


async def test_history_of_a_thread_that_waited_for_a_human(sdk: Any) -> None:
    tid = (await sdk.threads.create())["thread_id"]
    await sdk.runs.wait(tid, "gated", input=hello("gated"))
    waiting = await sdk.threads.get_history(tid)
    assert [asked_outline(s) for s in waiting] == _input_as_a_message(REFERENCE_WAITING_HISTORY)
    assert asked_outline(await sdk.threads.get_state(tid)) == REFERENCE_WAITING_HISTORY[0]
    approve = {"decisions": [{"type": "approve"}]}
    await sdk.runs.wait(tid, "gated", command={"resume": approve})
    answered = await sdk.threads.get_history(tid, limit=20)
    assert [asked_outline(s) for s in answered] == _input_as_a_message(REFERENCE_ANSWERED_HISTORY)
    assert _chained(answered)


REFERENCE_SUPERSTEPS_NO_GRAPH = "was created, but there were problems updating the state"
"""``threads.create(supersteps=...)`` on a thread whose metadata names no graph: LangGraph's
server makes the thread and answers with this in ``detail``."""


async def test_create_with_supersteps_writes_the_states_in_turn(sdk: Any) -> None:
    first = {"values": {"messages": [{"type": "human", "content": "hi", "id": "h1"}]}}
    second = {"values": {"messages": [{"type": "ai", "content": "hello", "id": "a1"}]}}
    steps = [
        {"updates": [{**first, "as_node": "model"}]},
        {"updates": [{**second, "as_node": "model"}]},
    ]
    made = await sdk.threads.create(metadata={"graph_id": "agent"}, supersteps=steps)
    state = await sdk.threads.get_state(made["thread_id"])
    assert [(m["type"], m["content"]) for m in state["values"]["messages"]] == [
        ("human", "hi"),
        ("ai", "hello"),
    ]
    history = await sdk.threads.get_history(made["thread_id"])
    assert [h["metadata"]["source"] for h in history][:2] == ["update", "update"]

    unnamed = await sdk.threads.create(supersteps=steps)
    assert REFERENCE_SUPERSTEPS_NO_GRAPH in unnamed["detail"]
    with pytest.raises(httpx.HTTPStatusError) as refused:  # one node's write per superstep
        await sdk.threads.create(
            metadata={"graph_id": "agent"},
            supersteps=[
                {"updates": [{**first, "as_node": "model"}, {**second, "as_node": "model"}]}
            ],
        )
    assert refused.value.response.status_code == 422

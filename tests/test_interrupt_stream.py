"""Interrupts in stream modes, as LangGraph streams them: the same agents and scripted
replies (twin servers) through LangChain's ``create_agent`` with an ``InMemorySaver`` and
through loopline, streamed with ``stream_mode=["updates", "messages", "values"]`` on a
thread until the run stops for a human, then resumed with ``Command(resume=...)`` and
streamed to the end. Both give the same items in the same order: the model's chunks
and update, ``{"__interrupt__": (Interrupt(...),)}`` in ``updates`` and the state with it
in ``values``; after the answer, HumanInTheLoopMiddleware's tool messages for rejected
calls (or the human's response) from its ``after_model`` node (batched) or the ``tools``
node (per call), the tool results, the next model call, at the supersteps LangGraph
counts. Agents: HumanInTheLoopMiddleware batched (each decision type) and per call, and
``interrupt()`` called in hooks (before_agent, before_model, after_model), in
``wrap_model_call`` and in tools. Loopline embedded (every service in this process), and
deployed with the services as processes.
"""

from __future__ import annotations

import json
import re
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from langchain.agents import create_agent as lc_create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware, TodoListMiddleware
from langchain_core.messages import BaseMessage
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, Interrupt

from loopline import create_agent
from loopline.testing.scripted import Reply, ScriptedOpenAIServer, ScriptedToolCall
from services.settings import Settings
from tests import tooling
from tests.interrupt_tooling import AskAround, AskBeforeModel, ConfirmModelCall, ask_human
from tests.runtime_tools import TrailState, step_on
from tests.support import ServiceProcesses, embedded_agent, services_on

MODES = ["updates", "messages", "values"]
INTERRUPT = "__interrupt__"
SLOW = 0.4
"""The ungated call of a step takes this long: it ends after the gated one asked (per
call) or ran (approved), in the same order on both sides."""

ADD_AND_WAIT = [
    Reply(
        content="Let me add.",
        tool_calls=(
            ScriptedToolCall("add", {"a": 1, "b": 2}),
            ScriptedToolCall("hang", {"seconds": SLOW}),
        ),
    ),
    Reply(content="Done with the numbers."),
]
"""A gated call and an ungated slow one, then the answer (both approval modes)."""

SCRIPTS: dict[str, list[Reply]] = {
    "batched": ADD_AND_WAIT,
    "per call": ADD_AND_WAIT,
    "plan a trip": [
        Reply(
            tool_calls=(
                ScriptedToolCall("ask_human", {"question": "where to?"}),
                ScriptedToolCall("ask_human", {"question": "when?"}),
            )
        ),
        Reply(content="Trip planned."),
    ],
    "both gated one by one": ADD_AND_WAIT,
    "plan and step beside a gated call": [
        Reply(
            tool_calls=(
                ScriptedToolCall("add", {"a": 1, "b": 2}),
                ScriptedToolCall("write_todos", {"todos": [{"content": "x", "status": "pending"}]}),
                ScriptedToolCall("step_on", {"label": "a"}),
            )
        ),
        Reply(content="Planned and stepped."),
    ],
    "confirm first": [Reply(content="Confirmed.")],
    "review me": [Reply(content="Draft answer.")],
}
DECISIONS: dict[str, dict[str, Any]] = {
    "reject": {"type": "reject", "message": "not these numbers"},
    "respond": {"type": "respond", "message": "the human says 3"},
    "edit": {"type": "edit", "edited_action": {"name": "add", "args": {"a": 10, "b": 20}}},
    "approve": {"type": "approve"},
}


# -- what both sides must agree on -----------------------------------------------------

NAMESPACE = re.compile(r"^(.+):[0-9a-f-]{36}$")


def message_shape(message: BaseMessage) -> dict[str, Any]:
    """A message without its id (LangChain's are random)."""
    shape: dict[str, Any] = {"type": message.type, "content": message.content}
    for key in ("tool_call_chunks", "usage_metadata", "chunk_position", "tool_call_id", "name"):
        value = getattr(message, key, None)
        if value:
            shape[key] = value
    if message.type == "tool":
        shape["status"] = getattr(message, "status", None)
    calls = getattr(message, "tool_calls", None)
    if calls:
        shape["tool_calls"] = [(c["name"], c["args"], c["id"]) for c in calls]
    return shape


def metadata_shape(meta: dict[str, Any]) -> list[tuple[str, Any]]:
    """The metadata in its order, its checkpoint namespaces checked for form (random
    uuids) and cut to the node's name."""
    out = []
    for key, value in meta.items():
        if key in ("langgraph_checkpoint_ns", "checkpoint_ns"):
            assert NAMESPACE.match(value), value
            value = value.rpartition(":")[0]
        out.append((key, value))
    return out


def interrupts_shape(asked: Any) -> list[Any]:
    """Interrupts by value and schema: the ids are each side's own (LangGraph's hash of
    a checkpoint namespace), but there is one, and it is LangGraph's type."""
    assert isinstance(asked, tuple), asked
    assert all(isinstance(i, Interrupt) and i.id for i in asked), asked
    return [(i.value, i.response_schema) for i in asked]


def state_shape(data: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key == "messages":
            out[key] = [message_shape(m) for m in value]
        elif key == INTERRUPT:
            out[key] = interrupts_shape(value)
        else:
            out[key] = value
    return out


def task_shape(task: Any) -> Any:
    """A ``StateSnapshot`` task: where it stands, what it asked, what it gave."""
    result = task.result and state_shape(task.result)
    return task.name, task.path, interrupts_shape(task.interrupts), result


def item_shape(mode: str, data: Any) -> Any:
    if mode == "messages":
        message, meta = data
        return mode, message_shape(message), metadata_shape(meta)
    if mode == "values":
        return mode, state_shape(data)
    shown = {}
    for node, update in data.items():
        if node == INTERRUPT:
            shown[node] = interrupts_shape(update)
        elif isinstance(update, dict) and node != "__metadata__":
            shown[node] = state_shape(update)
        else:
            shown[node] = update
    return mode, shown


def canonical(items: list[Any]) -> list[Any]:
    """Items as compared. The calls of one step run at once: what they report comes in
    the order they happen to end or ask (on both sides, LangGraph defines none). So each
    run of tool results (their ``messages`` and ``updates`` items) is sorted by call, and
    each run of interrupts (an ``updates`` item with the ``values`` one after it) by
    value."""
    return _sorted_runs(_sorted_runs(items, _tool_call, None), _asks, _pairs)


def _tool_call(item: Any) -> Any:
    """The call a tools node item reports (None: not one)."""
    mode, data = item[0], item[1]
    if mode == "messages" and dict(item[2]).get("langgraph_node") == "tools":
        return (data["tool_call_id"], 0)
    if mode == "updates" and "tools" in data and isinstance(data["tools"], dict):
        return (data["tools"]["messages"][0]["tool_call_id"], 1, json.dumps(data))
    return None


def _asks(item: Any) -> Any:
    return (item[0] != "messages" and INTERRUPT in item[1]) or None


def _pairs(run: list[Any]) -> list[Any]:
    pairs = [run[i : i + 2] for i in range(0, len(run), 2)]
    pairs.sort(key=lambda pair: json.dumps(pair, default=str))
    return [x for pair in pairs for x in pair]


def _sorted_runs(
    items: list[Any], key: Callable[[Any], Any], order: Callable[[list[Any]], list[Any]] | None
) -> list[Any]:
    out: list[Any] = []
    run: list[Any] = []
    for item in [*items, None]:
        if item is not None and key(item):
            run.append(item)
            continue
        out.extend(order(run) if order else sorted(run, key=key))
        run = []
        if item is not None:
            out.append(item)
    return out


def shapes(items: list[Any]) -> list[Any]:
    return canonical([item_shape(mode, data) for mode, data in items])


def check_same(lc_phases: list[list[Any]], ll_phases: list[list[Any]]) -> None:
    assert len(ll_phases) == len(lc_phases)
    for p, (expected, got) in enumerate(zip(lc_phases, ll_phases, strict=True)):
        want, have = shapes(expected), shapes(got)
        for n, (a, b) in enumerate(zip(want, have, strict=False)):
            assert b == a, f"phase {p}, item {n} differs"
        assert len(have) == len(want), f"phase {p}: {len(have)} items, LangChain {len(want)}"


# -- the conversations -----------------------------------------------------------------

Resume = Callable[[Any], Any]
"""What a phase answers, from the snapshot of the thread that waits: a resume value."""


def stream_conversation(
    agent: Any, thread: str, prompt: str, resumes: Sequence[Resume], modes: Any = MODES
) -> list[list[Any]]:
    """Each phase's stream items: the first run, then one per resume, each with the
    thread's waiting snapshot turned into the resume value."""
    config: Any = {"configurable": {"thread_id": thread}}
    phases: list[list[Any]] = []
    payload: Any = {"messages": [{"role": "user", "content": prompt}]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for resume in [None, *resumes]:
            if resume is not None:
                payload = Command(resume=resume(agent.get_state(config)))
            phases.append(list(agent.stream(payload, config, stream_mode=modes)))
        assert not agent.get_state(config).interrupts, "the conversation ended"
    return phases


def chat_model(server: ScriptedOpenAIServer, **params: Any) -> ChatOpenAI:
    return ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="test", **params)  # type: ignore[arg-type]


def langchain_phases(
    server: ScriptedOpenAIServer,
    thread: str,
    prompt: str,
    resumes: Sequence[Resume],
    *,
    model_params: dict[str, Any] | None = None,
    **kwargs: Any,
) -> list[list[Any]]:
    model = chat_model(server, **(model_params or {}))
    agent = lc_create_agent(model, checkpointer=InMemorySaver(), **kwargs)
    return stream_conversation(agent, thread, prompt, resumes)


def twin_agents(
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    **kwargs: Any,
) -> dict[str, Any]:
    """The same agent through LangChain (with an ``InMemorySaver``) and through loopline
    (embedded), each calling its twin server."""
    lc_server, ll_server = servers
    return {
        "lc": lc_create_agent(chat_model(lc_server), checkpointer=InMemorySaver(), **kwargs),
        "ll": embedded_agent(redis_url, monkeypatch, ll_server, **kwargs),
    }


def new_thread() -> str:
    """A thread id for both sides (LangChain puts it in the metadata): new for
    loopline, whose threads outlive a test run."""
    return f"t-{uuid.uuid4().hex[:8]}"


def decided(decision: dict[str, Any]) -> Resume:
    """HumanInTheLoopMiddleware's batched answer: one decision for its one gated call."""
    return lambda snapshot: {"decisions": [decision]}


def each_call(decision: dict[str, Any]) -> Resume:
    """Per-call answers: ``decision`` for every call that waits, by interrupt id."""
    return lambda snapshot: {i.id: decision for i in snapshot.interrupts}


def answered(value: Any) -> Resume:
    return lambda snapshot: value


def by_question(snapshot: Any) -> dict[str, str]:
    return {i.id: f"answer to {i.value['question']}" for i in snapshot.interrupts}


HITL_TOOLS = [tooling.add, tooling.hang]


def hitl(mode: str) -> HumanInTheLoopMiddleware:
    return HumanInTheLoopMiddleware(interrupt_on={"add": True}, interrupt_mode=mode)  # type: ignore[arg-type]


# -- HumanInTheLoopMiddleware --------------------------------------------------------


@pytest.mark.parametrize("decision", list(DECISIONS))
def test_batched_approval_streams_as_langchain(
    decision: str,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
) -> None:
    """The reply, its interrupt, and after the decision the after_model node's update
    (a rejected or answered call's tool message), the other call's result, the answer."""
    lc_server, ll_server = servers
    prompt, resumes = f"batched {decision}", [decided(DECISIONS[decision])]
    kwargs: Any = {"tools": HITL_TOOLS, "middleware": [hitl("batched")]}
    thread = new_thread()
    lc_phases = langchain_phases(lc_server, thread, prompt, resumes, **kwargs)
    agent = embedded_agent(redis_url, monkeypatch, ll_server, **kwargs)
    ll_phases = stream_conversation(agent, thread, prompt, resumes)
    check_same(lc_phases, ll_phases)
    first, resumed = ll_phases
    assert [m for m, _ in first][-2:] == ["updates", "values"]
    assert INTERRUPT in first[-1][1] and INTERRUPT in first[-2][1]
    asked = first[-2][1][INTERRUPT][0].value["action_requests"]
    assert [(a["name"], a["args"]) for a in asked] == [("add", {"a": 1, "b": 2})]
    hitl_node = "HumanInTheLoopMiddleware.after_model"
    nodes = [next(iter(d)) for m, d in resumed if m == "updates"]
    ran = ["tools"] if decision in ("reject", "respond") else ["tools", "tools"]
    assert nodes == [hitl_node, *ran, "model", hitl_node]
    tool_items = [(d[0].content, d[1]["langgraph_node"]) for m, d in resumed if m == "messages"]
    tool_items = [t for t in tool_items if t[1] != "model"]
    if decision in ("reject", "respond"):
        # the human's answer is the call's tool message, from the node that asked
        text = "the human says 3" if decision == "respond" else "not these numbers"
        assert text in tool_items[0][0] and tool_items[0][1] == hitl_node
        assert tool_items[1:] == [("woke up", "tools")]
    else:
        assert [node for _, node in tool_items] == ["tools", "tools"]


def test_a_later_run_of_the_thread_counts_its_steps_on_as_langchain(
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
) -> None:
    """LangGraph's steps go on across a thread's runs (a resume counts on within its
    run, each new run adds its input's and ``__start__``'s): the run after an answered
    interrupt streams what LangChain's does, ``langgraph_step`` included."""
    lc_server, ll_server = servers
    prompt, resumes = "batched approve", [decided(DECISIONS["approve"])]
    kwargs: Any = {"tools": HITL_TOOLS, "middleware": [hitl("batched")]}
    thread = new_thread()
    agents = [
        lc_create_agent(chat_model(lc_server), checkpointer=InMemorySaver(), **kwargs),
        embedded_agent(redis_url, monkeypatch, ll_server, **kwargs),
    ]
    later: list[list[Any]] = []
    for agent in agents:
        stream_conversation(agent, thread, prompt, resumes)
        config: Any = {"configurable": {"thread_id": thread}}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            next_run = {"messages": [{"role": "user", "content": "and then?"}]}
            later.append(list(agent.stream(next_run, config, stream_mode=MODES)))
    check_same([later[0]], [later[1]])
    steps = [d[1]["langgraph_step"] for m, d in later[1] if m == "messages"]
    assert steps and min(steps) > 5  # after the first run's five


def test_per_call_approval_streams_as_langchain(
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
) -> None:
    """A gated call asks while the step's other call runs: the interrupt, then the
    other call's result and the state with it; resumed, that result is replayed as
    LangGraph replays cached writes, then the rejected call's tool message."""
    lc_server, ll_server = servers
    prompt, resumes = "per call reject", [each_call(DECISIONS["reject"])]
    kwargs: Any = {"tools": HITL_TOOLS, "middleware": [hitl("per_call")]}
    thread = new_thread()
    lc_phases = langchain_phases(lc_server, thread, prompt, resumes, **kwargs)
    agent = embedded_agent(redis_url, monkeypatch, ll_server, **kwargs)
    ll_phases = stream_conversation(agent, thread, prompt, resumes)
    check_same(lc_phases, ll_phases)
    first, resumed = ll_phases
    updates = [d for m, d in first if m == "updates"]
    assert [next(iter(u)) for u in updates][-2:] == [INTERRUPT, "tools"]
    assert resumed[1] == ("updates", {**updates[-1], "__metadata__": {"cached": True}})
    rejected = next(d for m, d in resumed if m == "messages")
    assert rejected[0].content.endswith("not these numbers")
    assert rejected[1]["langgraph_node"] == "tools" and rejected[1]["langgraph_step"] == 3


def call_of(name: str, decision: dict[str, Any]) -> Resume:
    """A per-call answer for the waiting call of tool ``name`` alone (the others wait on)."""
    return lambda snapshot: {i.id: decision for i in snapshot.interrupts if i.value["name"] == name}


def test_per_call_answers_one_at_a_time_stream_as_langchain(
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
) -> None:
    """Both calls of a step gated, answered one by one: the first resume shows the call
    that still waits asking again (LangGraph runs it again and it interrupts again), then
    the answered call's result and the state with it; the second runs the other call."""
    lc_server, ll_server = servers
    prompt = "both gated one by one"
    resumes = [call_of("hang", DECISIONS["approve"]), call_of("add", DECISIONS["reject"])]
    gate_both = HumanInTheLoopMiddleware(
        interrupt_on={"add": True, "hang": True}, interrupt_mode="per_call"
    )
    kwargs: Any = {"tools": HITL_TOOLS, "middleware": [gate_both]}
    thread = new_thread()
    lc_phases = langchain_phases(lc_server, thread, prompt, resumes, **kwargs)
    agent = embedded_agent(redis_url, monkeypatch, ll_server, **kwargs)
    ll_phases = stream_conversation(agent, thread, prompt, resumes)
    check_same(lc_phases, ll_phases)
    updates = [d for m, d in ll_phases[1] if m == "updates"]
    first_asks = [d[INTERRUPT][0] for m, d in ll_phases[0] if m == "updates" and INTERRUPT in d]
    (asked,) = updates[0][INTERRUPT]  # the add call asks again, under the id it had
    assert asked.value["name"] == "add" and asked.id in [i.id for i in first_asks]
    assert [u["tools"]["messages"][0].name for u in updates[1:]] == ["hang"]


def test_invoke_and_state_at_a_per_call_interrupt_hold_the_steps_results_as_langchain(
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
) -> None:
    """While a gated call waits, what the step's other calls gave is in ``invoke``'s
    result and in ``get_state``'s values (LangGraph's pending writes): their tool
    messages and their Commands' state updates through the keys' reducers, before and
    after an answer that leaves a call waiting."""
    gate_both = HumanInTheLoopMiddleware(
        interrupt_on={"add": True, "hang": True}, interrupt_mode="per_call"
    )
    with_state: Any = {
        "tools": [*HITL_TOOLS, step_on],
        "middleware": [hitl("per_call"), TodoListMiddleware()],
        "state_schema": TrailState,
    }
    cases: list[tuple[str, dict[str, Any], list[Resume], str]] = [
        ("per call approve", {"middleware": [hitl("per_call")]}, [], "hang"),
        (
            "both gated one by one",
            {"middleware": [gate_both]},
            [call_of("hang", DECISIONS["approve"])],
            "hang",
        ),
        ("plan and step beside a gated call", with_state, [], "step_on"),
    ]
    for prompt, kwargs, resumes, last_tool in cases:
        kwargs = {"tools": HITL_TOOLS, **kwargs}
        thread = new_thread()
        seen: dict[str, list[Any]] = {}
        agents = twin_agents(servers, redis_url, monkeypatch, **kwargs)
        for name, agent in agents.items():
            config: Any = {"configurable": {"thread_id": thread}}
            payload: Any = {"messages": [{"role": "user", "content": prompt}]}
            seen[name] = []
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for resume in [None, *resumes]:
                    if resume is not None:
                        payload = Command(resume=resume(agent.get_state(config)))
                    result = agent.invoke(payload, config)
                    snapshot = agent.get_state(config)
                    seen[name].append(
                        (
                            [message_shape(m) for m in result["messages"]],
                            # the calls asked at once: in the order they happened to
                            sorted(interrupts_shape(tuple(result[INTERRUPT])), key=json.dumps),
                            result.get("trail"),
                            state_shape(snapshot.values),
                            interrupts_shape(snapshot.interrupts),  # in call order
                            snapshot.next,
                            [task_shape(t) for t in snapshot.tasks],
                        )
                    )
        assert seen["ll"] == seen["lc"], prompt
        messages = seen["ll"][-1][3]["messages"]
        assert messages[-1]["type"] == "tool" and messages[-1]["name"] == last_tool, prompt
    assert seen["ll"][-1][2] == ["a"] and seen["ll"][-1][3]["trail"] == ["a"]


def test_a_single_mode_gives_the_interrupt_as_langchain(
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
) -> None:
    """``stream_mode="updates"`` alone: dicts, the last ``{"__interrupt__": (...)}``."""
    lc_server, ll_server = servers
    kwargs: Any = {"tools": HITL_TOOLS, "middleware": [hitl("batched")]}
    resumes = [decided(DECISIONS["reject"])]
    thread = new_thread()
    seen = {}
    for name, agent in (
        ("lc", lc_create_agent(chat_model(lc_server), checkpointer=InMemorySaver(), **kwargs)),
        ("ll", embedded_agent(redis_url, monkeypatch, ll_server, **kwargs)),
    ):
        phases = stream_conversation(agent, thread, "batched single", resumes, "updates")
        seen[name] = [[item_shape("updates", d) for d in phase] for phase in phases]
    assert seen["ll"] == seen["lc"]
    assert list(seen["ll"][0][-1][1]) == [INTERRUPT]


# -- interrupt() in hooks, in wrap_model_call, in tools ---------------------------------


HOOK_CASES: dict[str, tuple[str, dict[str, Any], list[Resume]]] = {
    "before_model and tools": (
        "plan a trip",
        {"tools": [ask_human], "middleware": [AskBeforeModel()]},
        [answered("mountains"), answered("calm"), by_question],
    ),
    "wrap_model_call": (
        "confirm first",
        {"middleware": [ConfirmModelCall()]},
        [answered("yes")],
    ),
    "before_agent and after_model": (
        "review me",
        {"middleware": [AskAround()]},
        [answered("Ana"), answered("fine")],
    ),
}


@pytest.mark.parametrize("case", list(HOOK_CASES))
def test_interrupts_of_hooks_and_tools_stream_as_langchain(
    case: str,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
) -> None:
    lc_server, ll_server = servers
    prompt, kwargs, resumes = HOOK_CASES[case]
    thread = new_thread()
    lc_phases = langchain_phases(lc_server, thread, prompt, resumes, **kwargs)
    agent = embedded_agent(redis_url, monkeypatch, ll_server, **kwargs)
    ll_phases = stream_conversation(agent, thread, prompt, resumes)
    check_same(lc_phases, ll_phases)
    for phase in ll_phases[:-1]:  # every phase but the last stops at an interrupt
        assert INTERRUPT in phase[-1][1]


# -- deployed: the services as processes ------------------------------------------------


@pytest.fixture(scope="module")
def stack(
    redis_url: str, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> Iterator[ServiceProcesses]:
    with services_on(redis_url, servers[1]) as procs:
        yield procs


@pytest.mark.parametrize("mode", ["batched", "per_call"])
def test_deployed_approvals_stream_as_langchain(
    mode: str, stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    lc_server, _ = servers
    prompt = "batched deployed" if mode == "batched" else "per call deployed"
    answer = decided if mode == "batched" else each_call
    resumes = [answer(DECISIONS["reject"])]
    thread = new_thread()
    lc_phases = langchain_phases(
        lc_server,
        thread,
        prompt,
        resumes,
        model_params={"stream_usage": True},  # as the model service streams
        tools=HITL_TOOLS,
        middleware=[hitl(mode)],
    )
    agent = create_agent(
        "gpt-4o-mini",
        ["tests.tooling:add", "tests.tooling:hang"],
        middleware=[hitl(mode)],
        checkpointer=InMemorySaver(),
        settings=Settings(redis_url=stack.redis_url, prefix=stack.prefix),
    )
    ll_phases = stream_conversation(agent, thread, prompt, resumes)
    check_same(lc_phases, ll_phases)


def test_a_refused_answer_raises_as_langchain_and_the_thread_still_waits(
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
) -> None:
    """Three decisions for one gated call: HumanInTheLoopMiddleware refuses them with a
    ValueError, which LangGraph's resume raises (``stream`` and ``invoke`` alike), and
    the thread stays at its interrupt."""
    kwargs: Any = {"tools": HITL_TOOLS, "middleware": [hitl("batched")]}
    thread = new_thread()
    approve = {"type": "approve"}
    bad = Command(resume={"decisions": [approve, approve, approve]})
    seen: dict[str, list[Any]] = {}
    agents = twin_agents(servers, redis_url, monkeypatch, **kwargs)
    for name, agent in agents.items():
        config: Any = {"configurable": {"thread_id": thread}}
        first = {"messages": [{"role": "user", "content": "batched approve"}]}
        errors: list[Any] = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            list(agent.stream(first, config, stream_mode=MODES))
            for streamed in (True, False):
                with pytest.raises(ValueError) as raised:
                    if streamed:
                        list(agent.stream(bad, config, stream_mode=MODES))
                    else:
                        agent.invoke(bad, config)
                errors.append((type(raised.value), str(raised.value)))
            assert len(agent.get_state(config).interrupts) == 1, name
        seen[name] = errors
    assert seen["ll"] == seen["lc"]
    assert "does not match number of hanging tool calls" in seen["ll"][0][1]
    # LangGraph keeps the refused resume value in the checkpoint: its next resume fails
    # the same way whatever it says. loopline drops the refused answer: one that fits
    # goes on (a deliberate difference, README parity notes).
    good = Command(resume={"decisions": [approve]})
    done = agents["ll"].invoke(good, {"configurable": {"thread_id": thread}})
    assert done["messages"][-1].content == "Done with the numbers."

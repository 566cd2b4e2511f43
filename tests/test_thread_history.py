"""A thread's checkpoints, one per superstep, as LangGraph keeps them: ``get_state_history``
(with ``filter``, ``before``, ``limit``), ``get_state`` at any checkpoint id, a run from an
earlier checkpoint (time travel, a fork), ``update_state(as_node=...)``,
``bulk_update_state``, a thread copied. The same program through LangChain's
``create_agent`` and loopline's (embedded), on the same kind of saver (LangGraph's
``InMemorySaver``, and ``PostgresSaver`` / ``AsyncPostgresSaver`` on a local PostgreSQL),
against twin scripted servers: the same states, ``next``, metadata, tasks, parents, the
same model requests and results. loopline folds these from the runs' logs
(``loopline.history``)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import pytest
from langchain.agents import create_agent as lc_create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware, TodoListMiddleware
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, StateUpdate

from contracts.replies import Reply, ScriptedToolCall
from loopline import create_agent
from loopline.history import ThreadHistory, copy_thread
from loopline.testing.scripted import ScriptedOpenAIServer
from tests import tooling
from tests.test_thread_checkpoints import POSTGRES_URL, need_postgres, postgres_saver

pytestmark = pytest.mark.fast

HITL = "HumanInTheLoopMiddleware.after_model"


def RESPONDER(body: dict[str, Any]) -> Reply:
    """A user's message gets a tool call, a tool's result an answer counting the
    messages it was sent."""
    last = body["messages"][-1]
    if last["role"] == "user" and str(last["content"]).startswith("plan"):
        todos = {"todos": [{"content": "sum", "status": "in_progress"}]}
        return Reply(
            tool_calls=(
                ScriptedToolCall("write_todos", todos),
                ScriptedToolCall("add", {"a": 1, "b": 2}),
            )
        )
    if last["role"] == "user":
        return Reply(tool_calls=(ScriptedToolCall("add", {"a": 1, "b": 2}),))
    return Reply(content=f"answer after {len(body['messages'])}")


@pytest.fixture(params=["memory", "postgres"])
def savers(request: pytest.FixtureRequest) -> Iterator[tuple[Any, Any]]:
    """A saver for each side: two ``InMemorySaver``s, or one ``PostgresSaver`` (each
    side on threads of its own)."""
    if request.param == "memory":
        yield InMemorySaver(), InMemorySaver()
    else:
        for saver in postgres_saver():
            yield saver, saver


def model(server: ScriptedOpenAIServer) -> ChatOpenAI:
    return ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="test")


def both(
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer], savers: tuple[Any, Any]
) -> list[Any]:
    return [
        lc_create_agent(model(servers[0]), [tooling.add], checkpointer=savers[0]),
        create_agent(model(servers[1]), [tooling.add], checkpointer=savers[1]),
    ]


def configs() -> list[dict[str, Any]]:
    """A thread for each side (a saver they share must not mix them)."""
    thread = uuid.uuid4().hex[:8]
    return [{"configurable": {"thread_id": f"{side}-{thread}"}} for side in ("lc", "ll")]


def shape(state: Any) -> tuple[Any, ...]:
    """What must match in a state: ``next``, metadata, the messages (kind, content,
    the calls), the other keys, the tasks (node, what they wrote), a parent or none."""
    messages = [
        (type(m).__name__, m.content, [c["name"] for c in getattr(m, "tool_calls", [])])
        for m in state.values.get("messages", [])
    ]
    return (
        state.next,
        {k: v for k, v in (state.metadata or {}).items()},
        messages,
        sorted(k for k in state.values if k != "messages"),
        [
            (t.name, t.path[0], sorted(t.result) if t.result else t.result, bool(t.interrupts))
            for t in state.tasks
        ],
        state.parent_config is None,
    )


def linked(history: list[Any]) -> bool:
    """Each state's parent is the one before it (a thread without forks)."""
    return all(newer.parent_config == older.config for newer, older in pairwise(history))


def sent(server: ScriptedOpenAIServer, since: int) -> list[Any]:
    return [r["messages"] for r in server.chat_requests()[since:]]


def two_turns(agents: list[Any], cfgs: list[dict[str, Any]]) -> None:
    for agent, config in zip(agents, cfgs, strict=True):
        agent.invoke({"messages": "first"}, config)
        agent.invoke({"messages": "second"}, config)


def test_history_is_a_checkpoint_per_superstep_as_langgraphs(
    embedded: None,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    savers: tuple[Any, Any],
) -> None:
    agents, cfgs = both(servers, savers), configs()
    two_turns(agents, cfgs)
    lc_history, history = (list(a.get_state_history(c)) for a, c in zip(agents, cfgs, strict=True))
    assert len(lc_history) == 10  # two turns of input, start, model, tools, model
    assert [shape(s) for s in history] == [shape(s) for s in lc_history]
    assert linked(history) and linked(lc_history)
    assert len({s.config["configurable"]["checkpoint_id"] for s in history}) == 10
    ll = agents[1]
    now = ll.get_state(cfgs[1])
    assert now.config == history[0].config and shape(now) == shape(history[0])
    for past in history:  # every checkpoint read back by its id
        at = ll.get_state(past.config)
        assert shape(at) == shape(past) and at.config == past.config


@pytest.mark.parametrize("kind", ["todos", "approval", "approval per call"])
def test_middleware_nodes_and_interrupts_in_the_history_as_langgraphs(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer], kind: str
) -> None:
    """Each hook is a node with a superstep of its own; a run waiting for a human shows
    the node (or the tool call) that asked next, its task with the interrupt, and keeps
    it once answered."""
    middleware: list[Any] = [TodoListMiddleware()]
    resume: Any = None
    if kind == "approval":
        middleware = [HumanInTheLoopMiddleware(interrupt_on={"add": True})]
        resume = {"decisions": [{"type": "approve"}]}
    elif kind == "approval per call":
        middleware = [
            HumanInTheLoopMiddleware(interrupt_on={"add": True}, interrupt_mode="per_call")
        ]
        resume = {"type": "approve"}
    cfgs, got = configs(), []
    agents: list[Any] = [
        lc_create_agent(
            model(servers[0]), [tooling.add], middleware=middleware, checkpointer=InMemorySaver()
        ),
        create_agent(
            model(servers[1]), [tooling.add], middleware=middleware, checkpointer=InMemorySaver()
        ),
    ]
    for agent, config in zip(agents, cfgs, strict=True):
        agent.invoke({"messages": "plan a sum"}, config)
        shapes = [[shape(s) for s in agent.get_state_history(config)]]
        if resume is not None:
            agent.invoke(Command(resume=resume), config)
            shapes.append([shape(s) for s in agent.get_state_history(config)])
        got.append(shapes)
    assert got[1] == got[0]
    asked = [t for state in got[0][-1] for t in state[4] if t[3]]
    if kind == "todos":
        nodes = {t[0] for state in got[0][-1] for t in state[4]}
        assert "TodoListMiddleware.after_model" in nodes and not asked
    else:  # the task that asked keeps its interrupt
        assert [t[0] for t in asked] == [HITL if kind == "approval" else "tools"]


def test_filter_before_and_limit_as_langgraphs(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    agents, cfgs = both(servers, (InMemorySaver(), InMemorySaver())), configs()
    two_turns(agents, cfgs)

    def steps(agent: Any, config: Any, **kwargs: Any) -> list[int]:
        return [s.metadata["step"] for s in agent.get_state_history(config, **kwargs)]

    for agent, config in zip(agents, cfgs, strict=True):
        history = list(agent.get_state_history(config))
        asked: list[dict[str, Any]] = [
            {"filter": {"source": "input"}},
            {"filter": {"source": "loop", "step": 2}},
            {"filter": {"source": "update"}},
            {"before": history[2].config},
            {"before": history[2].config, "limit": 2},
            {"limit": 3},
            {"filter": {"source": "loop"}, "limit": 4},
        ]
        got = [steps(agent, config, **kwargs) for kwargs in asked]
        if agent is agents[0]:
            reference = got
    assert got == reference
    assert reference[0] == [4, -1] and reference[4] == [5, 4]


@pytest.mark.parametrize("where", ["model", "turn end, new input", "turn end, no input"])
def test_a_run_from_an_earlier_checkpoint_forks_as_langgraphs(
    embedded: None,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    savers: tuple[Any, Any],
    where: str,
) -> None:
    agents, cfgs = both(servers, savers), configs()
    two_turns(agents, cfgs)
    results, requests, after = [], [], []
    for agent, config, server in zip(agents, cfgs, servers, strict=True):
        history = list(agent.get_state_history(config))
        if where == "model":  # the first turn's input in, the model still to run
            past, given = history[-2], None
        else:  # the first turn ended
            past = history[5]
            given = {"messages": "instead"} if where == "turn end, new input" else None
        assert past.next == (("model",) if where == "model" else ())
        before = len(server.chat_requests())
        result = agent.invoke(given, past.config)
        results.append([(type(m).__name__, m.content) for m in result["messages"]])
        requests.append(sent(server, before))
        after.append([shape(s) for s in agent.get_state_history(config)])
        now = agent.get_state(config)
        assert [m.content for m in now.values["messages"]] == [c for _, c in results[-1]]
    assert results[1] == results[0]
    assert requests[1] == requests[0]
    assert after[1] == after[0]  # the fork's checkpoints, and the old branch kept
    assert len(after[0]) > 10


def test_update_state_as_a_node_sets_what_runs_next_as_langgraphs(
    embedded: None,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    savers: tuple[Any, Any],
) -> None:
    agents, cfgs = both(servers, savers), configs()
    seen = []
    for agent, config, server in zip(agents, cfgs, servers, strict=True):
        agent.invoke({"messages": "first"}, config)
        states = []
        call = {"name": "add", "args": {"a": 2, "b": 5}, "id": "call_by_hand"}
        updated = agent.update_state(
            config, {"messages": [AIMessage("", tool_calls=[call], id="by-hand")]}, "model"
        )
        states.append(agent.get_state(config))
        assert agent.get_state(updated).config["configurable"] == updated["configurable"]
        agent.update_state(
            config,
            {"messages": [ToolMessage("7", tool_call_id="call_by_hand", id="t-hand")]},
            as_node="tools",
        )
        states.append(agent.get_state(config))
        before = len(server.chat_requests())
        result = agent.invoke(None, config)  # goes on from the update: the model
        seen.append(
            (
                [shape(s) for s in states],
                sent(server, before),
                [(type(m).__name__, m.content) for m in result["messages"]],
                [shape(s) for s in list(agent.get_state_history(config))[:5]],
            )
        )
    assert seen[0][0][0][0] == ("tools",) and seen[0][0][1][0] == ("model",)
    assert seen[1] == seen[0]


def test_bulk_update_state_as_langgraphs(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    agents, cfgs = both(servers, (InMemorySaver(), InMemorySaver())), configs()
    got = []
    for agent, config in zip(agents, cfgs, strict=True):
        agent.invoke({"messages": "first"}, config)
        agent.bulk_update_state(
            config,
            [
                [StateUpdate({"messages": [HumanMessage("one", id="h1")]}, "tools")],
                [StateUpdate({"messages": [HumanMessage("two", id="h2")]}, None)],
            ],
        )
        got.append([shape(s) for s in list(agent.get_state_history(config))[:3]])
    assert got[1] == got[0]
    with pytest.raises(NotImplementedError, match="several updates"):
        agents[1].bulk_update_state(
            cfgs[1], [[StateUpdate({"messages": []}, "tools"), StateUpdate({}, "model")]]
        )


def test_streaming_from_an_earlier_checkpoint_as_langgraphs(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    agents, cfgs = both(servers, (InMemorySaver(), InMemorySaver())), configs()
    two_turns(agents, cfgs)
    streamed = []
    for agent, config in zip(agents, cfgs, strict=True):
        past = list(agent.get_state_history(config))[5]  # the first turn ended
        items = agent.stream({"messages": "instead"}, past.config, stream_mode="updates")
        streamed.append(
            [(node, [m.content for m in u["messages"]]) for i in items for node, u in i.items()]
        )
    assert streamed[1] == streamed[0]
    assert [node for node, _ in streamed[0]] == ["model", "tools", "model"]


async def test_async_history_and_time_travel_on_an_async_postgres_saver(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    need_postgres()
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    cfgs = configs()
    async with AsyncPostgresSaver.from_conn_string(POSTGRES_URL) as saver:
        await saver.setup()
        agents = both(servers, (saver, saver))
        got = []
        for agent, config in zip(agents, cfgs, strict=True):
            await agent.ainvoke({"messages": "first"}, config)
            history = [s async for s in agent.aget_state_history(config)]
            result = await agent.ainvoke({"messages": "again"}, history[-2].config)
            at = await agent.aget_state(history[2].config)
            note = {"messages": [ToolMessage("by hand", tool_call_id="none", id="t1")]}
            await agent.aupdate_state(config, note, as_node="tools")
            await agent.abulk_update_state(
                config, [[StateUpdate({"messages": [HumanMessage("bulk", id="b1")]}, None)]]
            )
            got.append(
                (
                    [shape(s) for s in history],
                    [m.content for m in result["messages"]],
                    shape(at),
                    [shape(s) async for s in agent.aget_state_history(config, limit=4)],
                )
            )
    assert got[1] == got[0]


def test_a_copied_thread_has_every_checkpoint_and_goes_on_alone(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    ll = create_agent(model(servers[1]), [tooling.add], checkpointer=InMemorySaver())
    source = f"copied-{uuid.uuid4().hex[:6]}"
    target = f"{source}-copy"
    ll.invoke({"messages": "first"}, {"configurable": {"thread_id": source}})

    async def copy() -> None:
        async with ll.client() as client:
            await copy_thread(client.threads(), source, target)
            with pytest.raises(ValueError, match="exists already"):
                await copy_thread(client.threads(), source, target)
            history = ThreadHistory(client.threads(), ll.spec)
            assert len(await history.checkpoints(target)) == 5

    from loopline.syncrun import run_sync

    run_sync(ll._on_private_loop(copy()))
    original = list(ll.get_state_history({"configurable": {"thread_id": source}}))
    copied = list(ll.get_state_history({"configurable": {"thread_id": target}}))
    assert [shape(s) for s in copied] == [shape(s) for s in original]
    ll.invoke({"messages": "only the copy"}, {"configurable": {"thread_id": target}})
    assert len(list(ll.get_state_history({"configurable": {"thread_id": source}}))) == 5
    assert len(list(ll.get_state_history({"configurable": {"thread_id": target}}))) == 10


def test_a_checkpoint_the_thread_does_not_have_reads_empty_as_langgraphs(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    agents, cfgs = both(servers, (InMemorySaver(), InMemorySaver())), configs()
    got = []
    for agent, config in zip(agents, cfgs, strict=True):
        agent.invoke({"messages": "first"}, config)
        missing = {"configurable": {**config["configurable"], "checkpoint_id": str(uuid.uuid4())}}
        state = agent.get_state(missing)
        got.append((state.values, state.next, state.metadata, state.tasks, state.parent_config))
    assert got[1] == got[0] == ({}, (), None, (), None)


def test_a_turn_langgraph_ran_on_the_saver_joins_the_history(
    embedded: None,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    savers: tuple[Any, Any],
) -> None:
    """A thread's turn run by LangChain's agent on the saver: loopline's history goes on
    from it (its state taken in), so an update and the next run keep it."""
    saver = savers[0]
    lc, ll = both(servers, (saver, saver))
    config = configs()[1]
    ll.invoke({"messages": "first"}, config)
    lc.invoke({"messages": "second"}, config)
    ll.update_state(config, {"messages": [HumanMessage("a note", id="note")]})
    state = ll.get_state(config)
    said = [m.content for m in state.values["messages"] if isinstance(m, HumanMessage)]
    assert said == ["first", "second", "a note"]
    newest = next(iter(ll.get_state_history(config)))
    assert newest.config == state.config and newest.metadata["source"] == "update"
    assert [m.content for m in newest.values["messages"]] == [
        m.content for m in state.values["messages"]
    ]
    result = ll.invoke({"messages": "third"}, config)
    said = [m.content for m in result["messages"] if isinstance(m, HumanMessage)]
    assert said == ["first", "second", "a note", "third"]


def test_the_fold_kept_between_reads_is_the_fold_of_the_whole_thread(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    """Reads go on from the fold of the thread's ended runs (``loopline.history``'s
    memo): after runs, an update, a fork and a waiting run, the same checkpoints as
    folding the whole thread again."""
    ll = create_agent(
        model(servers[1]),
        [tooling.add],
        middleware=[HumanInTheLoopMiddleware(interrupt_on={"add": True})],
        checkpointer=InMemorySaver(),
    )
    config = configs()[1]
    thread_id = config["configurable"]["thread_id"]

    async def both_folds() -> tuple[list[Any], list[Any]]:
        async with ll.client() as client:
            kept = ThreadHistory(client.threads(), ll.spec)
            fresh = ThreadHistory(client.threads(), ll.spec, remember=False)
            return await kept.checkpoints(thread_id), await fresh.checkpoints(thread_id)

    from loopline.syncrun import run_sync

    def same() -> int:
        kept, fresh = run_sync(ll._on_private_loop(both_folds()))
        assert [repr(c) for c in kept] == [repr(c) for c in fresh]
        return len(kept)

    ll.invoke({"messages": "first"}, config)  # waits for a human
    waiting = same()
    ll.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config)
    assert same() > waiting
    history = list(ll.get_state_history(config))
    ll.update_state(config, {"messages": [HumanMessage("noted", id="n1")]})
    same()
    model_next = next(s for s in history if s.next == ("model",))
    ll.invoke(None, model_next.config)  # a fork from a checkpoint before a model call
    same()


def test_running_on_from_a_checkpoint_before_the_tools_is_refused_with_the_reason(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    ll = create_agent(model(servers[1]), [tooling.add], checkpointer=InMemorySaver())
    config = configs()[1]
    ll.invoke({"messages": "first"}, config)
    before_tools = next(s for s in ll.get_state_history(config) if s.next == ("tools",))
    with pytest.raises(NotImplementedError, match="next node is the tools"):
        ll.invoke(None, before_tools.config)
    with pytest.raises(ValueError, match="has no checkpoint"):
        ll.invoke(None, {"configurable": {**config["configurable"], "checkpoint_id": "nope"}})


def test_no_input_where_nothing_is_next_as_langgraphs(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    """``invoke(None)`` on a new thread: LangGraph's ``EmptyInputError``; on a thread
    whose newest checkpoint has nothing next: its values, run nothing."""
    from langgraph.errors import EmptyInputError

    agents, cfgs = both(servers, (InMemorySaver(), InMemorySaver())), configs()
    got = []
    for agent, config, server in zip(agents, cfgs, servers, strict=True):
        with pytest.raises(EmptyInputError, match="Received no input for __start__"):
            agent.invoke(None, config)
        agent.invoke({"messages": "first"}, config)
        before = len(server.chat_requests())
        result = agent.invoke(None, config)
        streamed = list(agent.stream(None, config, stream_mode="values"))
        got.append(
            (
                [m.content for m in result["messages"]],
                [[m.content for m in item["messages"]] for item in streamed],
                len(server.chat_requests()) - before,
            )
        )
    assert got[1] == got[0]
    assert got[0][2] == 0 and len(got[0][1]) == 1


def test_an_update_after_the_runs_logs_are_gone_keeps_the_conversation(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer], redis_url: str
) -> None:
    """Runs' logs last the retention time; the thread's state lasts longer. An update
    of a thread whose history lost its runs applies to the state the thread has."""
    import redis as syncredis

    from contracts.streams import Names
    from tests.support import EMBEDDED_PREFIX

    ll = create_agent(model(servers[1]), [tooling.add], checkpointer=InMemorySaver())
    config = configs()[1]
    result = ll.invoke({"messages": "first"}, config)
    r = syncredis.Redis.from_url(redis_url)
    keys = Names(EMBEDDED_PREFIX).task_keys(result["task_id"])
    # as the retention does, long after the run: a stage's write landing just after the
    # answer (the run's last acknowledgements) must not bring a key back
    while r.delete(*keys):
        time.sleep(0.2)
    assert list(ll.get_state_history(config)) == []
    ll.update_state(config, {"messages": [HumanMessage("noted", id="n1")]})
    said = [m.content for m in ll.get_state(config).values["messages"]]
    assert said == ["first", "", "3", "answer after 3", "noted"]
    history = list(ll.get_state_history(config))
    assert [s.metadata["source"] for s in history] == ["update", "update"]
    assert [m.content for m in history[0].values["messages"]] == said

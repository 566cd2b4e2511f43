"""The checkpointer a loopline agent is given receives a checkpoint per superstep, in
LangGraph's own format: LangChain's ``create_agent`` reading the same saver lists the
same history as for the same runs of its own (``next``, metadata, tasks and what they
wrote, values, parents), with the ids loopline's own history shows, and runs on from
any of those checkpoints as from its own. Twin scripted servers; LangGraph's
``InMemorySaver``, and ``PostgresSaver`` / ``AsyncPostgresSaver`` on a local
PostgreSQL (``LOOPLINE_TEST_POSTGRES=1`` asks for them)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent as lc_create_agent
from langgraph.checkpoint.memory import InMemorySaver

from contracts.replies import Reply, ScriptedToolCall
from loopline.testing.scripted import ScriptedOpenAIServer
from tests import tooling
from tests.test_thread_checkpoints import POSTGRES_URL, need_postgres, postgres_saver
from tests.test_thread_history import RESPONDER as HISTORY_RESPONDER
from tests.test_thread_history import (
    both,
    configs,
    linked,
    model,
    shape,
    two_turns,
)

pytestmark = pytest.mark.fast


def RESPONDER(body: dict[str, Any]) -> Reply:
    """``test_thread_history``'s replies (a tool call for a user's message, then an
    answer), and a call of the tool that raises for "explode"."""
    last = body["messages"][-1]
    if last["role"] == "user" and last["content"] == "explode":
        return Reply(tool_calls=(ScriptedToolCall("explode", {"x": 1}),))
    return HISTORY_RESPONDER(body)


@pytest.fixture(params=["memory", "postgres"])
def savers(request: pytest.FixtureRequest) -> Iterator[tuple[Any, Any]]:
    """LangChain's saver and loopline's: two ``InMemorySaver``s, or one
    ``PostgresSaver`` (each side on threads of its own)."""
    if request.param == "memory":
        yield InMemorySaver(), InMemorySaver()
    else:
        for saver in postgres_saver():
            yield saver, saver


def messages(result: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(type(m).__name__, m.content) for m in result["messages"]]


def test_langgraph_lists_the_history_loopline_wrote_to_the_saver(
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    embedded: None,
    savers: tuple[Any, Any],
) -> None:
    """Two turns with a tool call each: 10 checkpoints, listed by LangGraph from the
    saver loopline wrote as LangGraph lists its own run's."""
    agents: Any = both(servers, savers)
    lc, ll = agents
    cfgs = configs()
    two_turns([lc, ll], cfgs)
    reader: Any = lc_create_agent(model(servers[0]), [tooling.add], checkpointer=savers[1])

    theirs = list(lc.get_state_history(cfgs[0]))
    written = list(reader.get_state_history(cfgs[1]))

    assert len(theirs) == 10
    assert [shape(s) for s in written] == [shape(s) for s in theirs]
    assert [s.next for s in written][:5] == [(), ("model",), ("tools",), ("model",), ("__start__",)]
    assert linked(written)
    # the ids are loopline's own: get_state at any of them means the same state on both
    assert [s.config for s in written] == [s.config for s in ll.get_state_history(cfgs[1])]
    assert reader.get_state(cfgs[1]).values["messages"][-1].content == "answer after 7"


def test_langgraph_runs_on_from_any_checkpoint_loopline_wrote(
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    embedded: None,
    savers: tuple[Any, Any],
) -> None:
    """LangGraph's time travel (``invoke(None, config)`` at a checkpoint) from each
    checkpoint of a loopline run gives what it gives from its own run's."""
    agents: Any = both(servers, savers)
    lc, ll = agents
    cfgs = configs()
    for agent, config in zip([lc, ll], cfgs, strict=True):
        agent.invoke({"messages": "first"}, config)
    reader: Any = lc_create_agent(model(servers[0]), [tooling.add], checkpointer=savers[1])
    theirs = list(lc.get_state_history(cfgs[0]))
    written = list(reader.get_state_history(cfgs[1]))
    assert [s.next for s in written] == [s.next for s in theirs]

    for their_state, written_state in zip(theirs, written, strict=True):
        if not their_state.next:
            continue
        expected = messages(lc.invoke(None, their_state.config))
        assert messages(reader.invoke(None, written_state.config)) == expected
        # and with a new input from there, a fork
        fork = {"messages": "again"}
        expected = messages(lc.invoke(fork, their_state.config))
        assert messages(reader.invoke(fork, written_state.config)) == expected


async def test_an_async_postgres_saver_gets_a_checkpoint_per_superstep(
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer], embedded: None
) -> None:
    """``AsyncPostgresSaver`` (async methods only): the same history as LangChain's own
    run on it, read by LangGraph."""
    need_postgres()
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    async with AsyncPostgresSaver.from_conn_string(POSTGRES_URL) as saver:
        await saver.setup()
        lc, ll = both(servers, (saver, saver))
        cfgs = configs()
        for agent, config in zip([lc, ll], cfgs, strict=True):
            await agent.ainvoke({"messages": "first"}, config)
            await agent.ainvoke({"messages": "second"}, config)
        theirs = [shape(s) async for s in lc.aget_state_history(cfgs[0])]
        written = [shape(s) async for s in lc.aget_state_history(cfgs[1])]
    assert len(theirs) == 10
    assert written == theirs


def test_updates_and_the_run_after_them_are_in_the_saver_as_langgraph_writes_them(
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    embedded: None,
    savers: tuple[Any, Any],
) -> None:
    """``update_state`` as the model (a tool call by hand), as the tools (its answer),
    then ``invoke(None)`` going on from the update: LangGraph reads from loopline's
    saver the history (``source`` "update" included) and the state it has from its own."""
    from langchain_core.messages import AIMessage, ToolMessage

    agents: Any = both(servers, savers)
    lc, ll = agents
    cfgs = configs()
    for agent, config in zip([lc, ll], cfgs, strict=True):
        agent.invoke({"messages": "first"}, config)
        call = {"name": "add", "args": {"a": 2, "b": 5}, "id": "call_by_hand"}
        agent.update_state(
            config, {"messages": [AIMessage("", tool_calls=[call], id="by-hand")]}, "model"
        )
        agent.update_state(
            config, {"messages": [ToolMessage("7", tool_call_id="call_by_hand")]}, "tools"
        )
        agent.invoke(None, config)
    reader: Any = lc_create_agent(model(servers[0]), [tooling.add], checkpointer=savers[1])

    theirs = list(lc.get_state_history(cfgs[0]))
    written = list(reader.get_state_history(cfgs[1]))

    def outline(state: Any) -> tuple[Any, ...]:  # an update's task results aside
        return (
            state.next,
            state.metadata,
            [(type(m).__name__, m.content) for m in state.values.get("messages", [])],
        )

    assert [outline(s) for s in written] == [outline(s) for s in theirs]
    assert [s.metadata["source"] for s in written][:3] == ["loop", "update", "update"]
    assert outline(reader.get_state(cfgs[1])) == outline(lc.get_state(cfgs[0]))


def test_a_run_that_waited_for_a_human_is_in_the_saver_as_langgraph_keeps_it(
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    embedded: None,
    savers: tuple[Any, Any],
) -> None:
    """A tool call approved by a human (``HumanInTheLoopMiddleware``): once the run
    ended, LangGraph lists from loopline's saver the supersteps it lists for its own,
    the interrupt on the task that asked, a hook that wrote nothing done with ``{}``."""
    from langchain.agents.middleware import HumanInTheLoopMiddleware
    from langgraph.types import Command

    from loopline import create_agent

    def hitl() -> list[Any]:
        return [HumanInTheLoopMiddleware(interrupt_on={"add": True})]

    lc = lc_create_agent(
        model(servers[0]), [tooling.add], middleware=hitl(), checkpointer=savers[0]
    )
    ll = create_agent(model(servers[1]), [tooling.add], middleware=hitl(), checkpointer=savers[1])
    cfgs = configs()
    for agent, config in zip([lc, ll], cfgs, strict=True):
        agent.invoke({"messages": "first"}, config)
        agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config)
    reader: Any = lc_create_agent(
        model(servers[0]), [tooling.add], middleware=hitl(), checkpointer=savers[1]
    )

    theirs = [shape(s) for s in lc.get_state_history(cfgs[0])]
    written = [shape(s) for s in reader.get_state_history(cfgs[1])]
    assert written == theirs


def _todo_list() -> list[Any]:
    from langchain.agents.middleware import TodoListMiddleware

    return [TodoListMiddleware()]


def _call_limit() -> list[Any]:
    from langchain.agents.middleware import ModelCallLimitMiddleware

    return [ModelCallLimitMiddleware(run_limit=1, exit_behavior="end")]


@pytest.mark.parametrize(
    ("middleware", "prompt"),
    [(_todo_list, "plan a sum"), (_call_limit, "first")],
    ids=["todos", "model-call-limit-ends-the-run"],
)
def test_hooks_and_their_jumps_are_in_the_saver_as_langgraph_keeps_them(
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    embedded: None,
    middleware: Any,
    prompt: str,
) -> None:
    """Middleware whose hooks are nodes of the graph, a tool the todos service runs
    (``write_todos``), a hook that jumps to the end: the same history from loopline's
    saver as from LangChain's."""
    from loopline import create_agent

    savers = (InMemorySaver(), InMemorySaver())
    lc = lc_create_agent(
        model(servers[0]), [tooling.add], middleware=middleware(), checkpointer=savers[0]
    )
    ll = create_agent(
        model(servers[1]), [tooling.add], middleware=middleware(), checkpointer=savers[1]
    )
    cfgs = configs()
    for agent, config in zip([lc, ll], cfgs, strict=True):
        agent.invoke({"messages": prompt}, config)
        agent.invoke({"messages": "second"}, config)
    reader: Any = lc_create_agent(
        model(servers[0]), [tooling.add], middleware=middleware(), checkpointer=savers[1]
    )
    theirs = [shape(s) for s in lc.get_state_history(cfgs[0])]
    written = [shape(s) for s in reader.get_state_history(cfgs[1])]
    assert written == theirs


@pytest.mark.parametrize("with_input", [False, True], ids=["go-on", "new-input"])
def test_loopline_time_travel_is_in_the_saver_as_langgraphs(
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    embedded: None,
    with_input: bool,
) -> None:
    """A run from an earlier checkpoint, through each side's own agent (``invoke`` at
    the checkpoint before the model's second call): LangGraph lists the fork from
    loopline's saver as from its own, both branches kept."""
    savers = (InMemorySaver(), InMemorySaver())
    agents: Any = both(servers, savers)
    cfgs = configs()
    for agent, config in zip(agents, cfgs, strict=True):
        agent.invoke({"messages": "first"}, config)
        at = next(s for s in agent.get_state_history(config) if s.next == ("model",))
        agent.invoke({"messages": "again"} if with_input else None, at.config)
    reader: Any = lc_create_agent(model(servers[0]), [tooling.add], checkpointer=savers[1])
    theirs = [shape(s) for s in agents[0].get_state_history(cfgs[0])]
    written = [shape(s) for s in reader.get_state_history(cfgs[1])]
    assert written == theirs


def test_a_run_that_failed_keeps_its_supersteps_in_the_saver_as_langgraphs(
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer], embedded: None
) -> None:
    """A tool that raises (LangChain's agent lets the error out of ``invoke``), twice: the
    checkpoints before each failure are in both savers, ``next`` naming the tools."""
    from loopline import create_agent

    savers = (InMemorySaver(), InMemorySaver())
    lc = lc_create_agent(model(servers[0]), [tooling.explode], checkpointer=savers[0])
    ll = create_agent(model(servers[1]), [tooling.explode], checkpointer=savers[1])
    cfgs = configs()
    for agent, config in zip([lc, ll], cfgs, strict=True):
        for _ in range(2):  # and a second turn on from the failed one
            with pytest.raises(ValueError, match="bad x"):
                agent.invoke({"messages": "explode"}, config)
    reader: Any = lc_create_agent(model(servers[0]), [tooling.explode], checkpointer=savers[1])
    theirs = [(s.next, s.metadata) for s in lc.get_state_history(cfgs[0])]
    written = [(s.next, s.metadata) for s in reader.get_state_history(cfgs[1])]
    assert written == theirs
    assert theirs[0][0] == ("tools",)


class KeepsWhatIsPut(InMemorySaver):
    """Every checkpoint as it was put, beside what the saver returns for it later (as
    LangChain's own ``MemorySaverAssertImmutable`` checks a stored parent)."""

    def __init__(self) -> None:
        super().__init__()
        self.put_as: dict[str, Any] = {}

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        self.put_as[checkpoint["id"]] = dict(checkpoint)
        return super().put(config, checkpoint, metadata, new_versions)


def test_the_saver_returns_each_checkpoint_as_it_was_put(
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer], embedded: None
) -> None:
    """A checkpoint's fields as LangGraph's loop puts them (a v4 checkpoint: no
    ``pending_sends``), so what the saver gives back for it equals what was put."""
    savers = KeepsWhatIsPut(), KeepsWhatIsPut()
    agents, cfgs = both(servers, savers), configs()
    two_turns(agents, cfgs)
    for saver, config in zip(savers, cfgs, strict=True):
        for snap in saver.list(config):
            put = saver.put_as[snap.checkpoint["id"]]
            assert set(put) == set(snap.checkpoint), sorted(set(put) ^ set(snap.checkpoint))
    lc_keys = {k for c in savers[0].put_as.values() for k in c}
    assert {k for c in savers[1].put_as.values() for k in c} == lc_keys

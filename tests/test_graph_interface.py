"""The agent is, to every caller, the compiled graph LangChain's ``create_agent`` returns:
a ``Runnable`` with LangGraph's introspection (``nodes``, ``stream_channels``,
``get_graph``, schemas) equal to LangChain's graph for the same arguments, ``with_config``
binding a config under every call as LangGraph's does, ``batch``, and LangChain's keyword
arguments (the ones the bus does not implement refused with the reason). The same
arguments and scripted replies through LangChain and through loopline (embedded): the same
graph, the same model requests, the same results."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from langchain.agents import create_agent as lc_create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware as LcHumanInTheLoop
from langchain.agents.middleware import ModelCallLimitMiddleware as LcModelCallLimit
from langchain_core.runnables import Runnable
from langgraph.cache.memory import InMemoryCache
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import StateGraph

from contracts.replies import Reply
from loopline import create_agent
from loopline.agent import Agent
from loopline.middleware import HumanInTheLoopMiddleware, ModelCallLimitMiddleware
from loopline.testing.scripted import ScriptedOpenAIServer, first_user_text
from tests import tooling
from tests.error_cases import model_for
from tests.structured_cases import shape


def respond(body: dict[str, Any]) -> Reply:
    text = first_user_text(body)
    return Reply(content=f"answered {text!r} after {len(body['messages'])} messages")


RESPONDER = respond


def both(
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer], **kwargs: Any
) -> tuple[Any, Agent]:
    """LangChain's graph and loopline's agent for the same arguments (middleware made
    fresh per side: LangChain's classes for LangChain, loopline's for loopline)."""
    lc_kwargs = dict(kwargs)
    ll_kwargs = dict(kwargs)
    if "hitl" in kwargs:
        lc_kwargs.pop("hitl"), ll_kwargs.pop("hitl")
        lc_kwargs["middleware"] = [
            LcModelCallLimit(run_limit=5),
            LcHumanInTheLoop(interrupt_on={"add": True}),
        ]
        ll_kwargs["middleware"] = [
            ModelCallLimitMiddleware(run_limit=5),
            HumanInTheLoopMiddleware(interrupt_on={"add": True}),
        ]
    lc = lc_create_agent(model_for(servers[0]), [tooling.add], **lc_kwargs)
    ours = create_agent(model_for(servers[1]), [tooling.add], **ll_kwargs)
    return lc, ours


def requests_of(server: ScriptedOpenAIServer, marker: str) -> list[dict[str, Any]]:
    return [r for r in server.chat_requests() if marker in str(r["messages"])]


def test_the_agent_is_a_runnable_with_langchains_graph(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    lc, ours = both(servers, hitl=True, system_prompt="Graph.", name="adder")
    assert isinstance(ours, Runnable)
    assert ours.name == lc.name == "adder"
    assert list(ours.nodes) == list(lc.nodes)
    assert "HumanInTheLoopMiddleware.after_model" in ours.nodes
    assert ours.stream_channels == lc.stream_channels
    assert ours.get_graph().to_json() == lc.get_graph().to_json()
    assert ours.get_graph().draw_mermaid() == lc.get_graph().draw_mermaid()
    assert ours.get_input_jsonschema() == lc.get_input_jsonschema()
    assert ours.get_output_jsonschema() == lc.get_output_jsonschema()
    assert set(ours.builder.nodes) == set(lc.builder.nodes)
    assert ours.interrupt_before_nodes == lc.interrupt_before_nodes == []


def test_a_graph_without_a_name_is_named_as_langgraph_names_it(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    lc, ours = both(servers)
    assert ours.name == lc.name == "LangGraph"
    assert ours.get_name() == lc.get_name()


def test_with_config_binds_a_config_under_every_call_as_langgraph_does(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    lc, _ = both(servers, system_prompt="Bound.", checkpointer=InMemorySaver())
    _, ours = both(servers, system_prompt="Bound.", checkpointer=InMemorySaver())  # its own
    bound_lc = lc.with_config({"configurable": {"thread_id": "bound"}, "recursion_limit": 50})
    bound = ours.with_config({"configurable": {"thread_id": "bound"}, "recursion_limit": 50})
    assert isinstance(bound, Agent) and bound is not ours
    assert type(bound_lc) is type(lc)  # LangGraph's is a copy too, not a RunnableBinding
    assert bound.config["recursion_limit"] == 50 and ours.config == {}
    assert list(bound.nodes) == list(ours.nodes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for text in ("first", "second"):  # the bound thread keeps the conversation
            lc_result = bound_lc.invoke({"messages": [{"role": "user", "content": text}]})
            result = bound.invoke({"messages": [{"role": "user", "content": text}]})
    assert shape(result["messages"]) == shape(lc_result["messages"])
    assert len(result["messages"]) == 4
    assert requests_of(servers[1], "Bound.") == requests_of(servers[0], "Bound.")


def test_a_bound_recursion_limit_stops_the_run_as_langgraphs(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    from langgraph.errors import GraphRecursionError

    lc, ours = both(servers, system_prompt="Limited.")
    given = {"messages": [{"role": "user", "content": "limited"}]}
    with pytest.raises(GraphRecursionError) as lc_error:
        lc.with_config(recursion_limit=1).invoke(given)
    with pytest.raises(GraphRecursionError) as our_error:
        ours.with_config(recursion_limit=1).invoke(given)
    assert str(our_error.value).splitlines()[0] == str(lc_error.value).splitlines()[0]


def test_batch_runs_each_input_as_langchains(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    lc, ours = both(servers, system_prompt="Batch.")
    given = [{"messages": [{"role": "user", "content": f"item {i}"}]} for i in range(3)]
    lc_results = lc.batch(given)
    results = ours.batch(given)
    assert [shape(r["messages"]) for r in results] == [shape(r["messages"]) for r in lc_results]

    def key(request: dict[str, Any]) -> str:
        return str(request["messages"])

    ours_sent = sorted(requests_of(servers[1], "Batch."), key=key)
    assert ours_sent == sorted(requests_of(servers[0], "Batch."), key=key)
    assert len(ours_sent) == 3


async def test_abatch_runs_each_input_as_langchains(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    lc, ours = both(servers, system_prompt="Abatch.")
    given = [{"messages": [{"role": "user", "content": f"async item {i}"}]} for i in range(2)]
    lc_results = await lc.abatch(given)
    results = await ours.abatch(given)
    assert [shape(r["messages"]) for r in results] == [shape(r["messages"]) for r in lc_results]


def test_an_agent_is_a_node_of_a_langgraph_graph(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    """Usable wherever a compiled graph is: here as a node of a parent graph."""
    from langchain.agents import AgentState

    lc, ours = both(servers, system_prompt="Nested.")
    outcomes = []
    for agent in (lc, ours):
        parent = StateGraph(AgentState)
        parent.add_node("agent", agent)
        parent.set_entry_point("agent")
        outcomes.append(
            parent.compile().invoke({"messages": [{"role": "user", "content": "nested"}]})
        )
    assert shape(outcomes[1]["messages"]) == shape(outcomes[0]["messages"])
    assert requests_of(servers[1], "Nested.") == requests_of(servers[0], "Nested.")


def test_an_empty_system_prompt_is_sent_as_langchain_sends_it(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    lc, ours = both(servers, system_prompt="")
    given = {"messages": [{"role": "user", "content": "empty system prompt"}]}
    lc.invoke(given)
    ours.invoke(given)
    lc_sent = requests_of(servers[0], "empty system prompt")
    assert lc_sent and lc_sent[0]["messages"][0] == {"role": "system", "content": ""}
    assert requests_of(servers[1], "empty system prompt") == lc_sent


@pytest.mark.parametrize(
    ("keyword", "value"),
    [
        ("interrupt_before", ["tools"]),
        ("interrupt_after", ["model"]),
        ("debug", True),
    ],
)
def test_keywords_the_bus_does_not_implement_are_refused_with_the_reason(
    embedded: None,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    keyword: str,
    value: Any,
) -> None:
    with pytest.raises(ValueError, match=f"create_agent\\({keyword}=.*not implemented"):
        create_agent(model_for(servers[1]), [tooling.add], **{keyword: value})


def test_langchains_keywords_at_their_defaults_and_a_cache_are_taken(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    cache = InMemoryCache()
    lc, ours = both(
        servers,
        interrupt_before=[],
        interrupt_after=None,
        debug=False,
        transformers=None,
        cache=cache,
    )
    assert ours.cache is lc.cache is cache


@pytest.mark.parametrize("stream_mode", ["updates", ["updates", "values"]])
def test_subgraphs_true_streams_langgraphs_namespaced_items(
    embedded: None,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    stream_mode: Any,
) -> None:
    lc, ours = both(servers, system_prompt="Namespaced.")
    given = {"messages": [{"role": "user", "content": f"namespaced {stream_mode}"}]}
    lc_items = list(lc.stream(given, stream_mode=stream_mode, subgraphs=True))
    items = list(ours.stream(given, stream_mode=stream_mode, subgraphs=True))
    width = 3 if isinstance(stream_mode, list) else 2
    assert {len(i) for i in items} == {len(i) for i in lc_items} == {width}
    assert [i[:-1] for i in items] == [i[:-1] for i in lc_items]  # namespace (and mode)
    lc_nodes = [list(i[-1]) for i in lc_items if i[-2:-1] != ("values",)]
    assert [list(i[-1]) for i in items if i[-2:-1] != ("values",)] == lc_nodes


def test_durability_is_taken_with_langgraphs_warning(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    lc, ours = both(servers, system_prompt="Durable.")
    given = {"messages": [{"role": "user", "content": "durable"}]}
    with pytest.warns(UserWarning, match="durability` has no effect") as lc_warned:
        lc_result = lc.invoke(given, durability="exit")
    with pytest.warns(UserWarning, match="durability` has no effect") as warned:
        result = ours.invoke(given, durability="exit")
    assert [str(w.message) for w in warned] == [str(w.message) for w in lc_warned][:1]
    assert shape(result["messages"]) == shape(lc_result["messages"])
    with pytest.raises(ValueError, match="durability must be one of"):
        ours.invoke(given, durability="sometimes")


def test_stream_items_carry_the_runs_metadata_as_langgraphs(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    """LangGraph puts the run's config metadata, and create_agent's ``lc_agent_name``,
    in every item's metadata."""
    lc, ours = both(servers, system_prompt="Metadata.", name="meta_agent")
    given = {"messages": [{"role": "user", "content": "metadata"}]}
    config: Any = {"metadata": {"team": "blue"}}
    lc_items = list(lc.stream(given, config, stream_mode="messages"))
    items = list(ours.stream(given, config, stream_mode="messages"))
    assert len(items) == len(lc_items) > 0
    keys = ("lc_agent_name", "team", "ls_integration", "langgraph_node")
    assert [{k: m.get(k) for k in keys} for _, m in items] == [
        {k: m.get(k) for k in keys} for _, m in lc_items
    ]
    assert {m["lc_agent_name"] for _, m in items} == {"meta_agent"}

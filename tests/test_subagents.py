"""Agents inside tools (sub-agents): a tool of one agent runs another agent, three levels
deep, as deepagents' ``task`` tool does. Each level's tools are its own (two agents' tools
of one name stay two tools), and a deployment whose every tool thread or consumer slot
holds a parent waiting for its child still finishes them all: the waiting call lends its
capacity back (``services.lending``). The same nesting through LangChain's
``create_agent``: the same model requests. A sub-agent runs as LangGraph's subgraph: its
interrupts stop the parent's run and resume inside it (``loopline.nested``), and the
caller's callback handlers see its run under the tool's (``loopline.run_callbacks``); a
tool's ``Command(graph=Command.PARENT)`` reaches the graph that runs the agent."""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from langchain.agents import create_agent as lc_create_agent
from langchain.tools import ToolRuntime
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import ToolMessage
from langchain_core.tools import StructuredTool, tool
from langgraph.types import Command

from contracts.replies import Reply, ScriptedToolCall
from loopline import create_agent
from loopline.testing.scripted import ScriptedOpenAIServer
from tests.error_cases import model_for

DEPTH = 3


def level_of(body: dict[str, Any]) -> int:
    return int(str(body["messages"][0]["content"]).split()[1])


def respond(body: dict[str, Any]) -> Reply:
    """Levels above the deepest delegate once, then answer."""
    level = level_of(body)
    answered = any(m["role"] == "assistant" for m in body["messages"])
    if level < DEPTH and not answered:
        asked = next(m["content"] for m in body["messages"] if m["role"] == "user")
        return Reply(tool_calls=(ScriptedToolCall("delegate", {"q": f"{asked}>{level}"}),))
    tool_says = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    return Reply(content=f"level {level} done {tool_says}")


RESPONDER = respond


def nested(make: Any, server: ScriptedOpenAIServer, *, sync: bool) -> Any:
    """Agents of levels DEPTH..0, each level's ``delegate`` tool running the next."""
    agents: dict[int, Any] = {}
    for level in range(DEPTH, -1, -1):

        def run_child(q: str, level: int = level) -> str:
            result = agents[level + 1].invoke({"messages": [{"role": "user", "content": q}]})
            return str(result["messages"][-1].content)

        async def arun_child(q: str, level: int = level) -> str:
            given = {"messages": [{"role": "user", "content": q}]}
            result = await agents[level + 1].ainvoke(given)
            return str(result["messages"][-1].content)

        delegate = StructuredTool.from_function(
            func=run_child if sync else None,
            coroutine=None if sync else arun_child,
            name="delegate",
            description="Ask the next agent.",
        )
        agents[level] = make(model_for(server), [delegate], system_prompt=f"level {level}")
    return agents[0]


def requests_by_prompt(server: ScriptedOpenAIServer, prefix: str) -> list[Any]:
    return sorted(
        (r["messages"] for r in server.chat_requests() if prefix in str(r["messages"])), key=str
    )


def test_nested_agents_run_their_own_tools_as_langchains(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    given = {"messages": [{"role": "user", "content": "parity"}]}
    lc = nested(lc_create_agent, servers[0], sync=True).invoke(given)
    ours = nested(create_agent, servers[1], sync=True).invoke(given)
    assert ours["messages"][-1].content == lc["messages"][-1].content
    assert "level 2 done" in str(lc["messages"][-1].content)
    sent = requests_by_prompt(servers[0], "parity")
    assert len(sent) == 2 * DEPTH + 1
    assert requests_by_prompt(servers[1], "parity") == sent


def test_parents_holding_every_tool_thread_still_finish(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    """Sync tools: a tool thread per waiting parent, more parents than threads."""
    top = nested(create_agent, servers[1], sync=True)
    runs = 4  # x DEPTH waiting parents: more than the tool threads (cpus + 4, at most 32)
    with ThreadPoolExecutor(runs) as pool:
        futures = [
            pool.submit(top.invoke, {"messages": [{"role": "user", "content": f"thread {i}"}]})
            for i in range(runs)
        ]
        answers = [f.result(timeout=120)["messages"][-1].content for f in futures]
    assert all(str(a).startswith("level 0 done") for a in answers)


@pytest.mark.timeout(240)
async def test_parents_holding_every_consumer_slot_still_finish(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    """Async tools: a tools-consumer slot per waiting parent, more parents than slots."""
    from services.settings import Settings

    top = nested(create_agent, servers[1], sync=False)
    runs = Settings().concurrency_tools // DEPTH + 2  # more waiting parents than slots
    given = [{"messages": [{"role": "user", "content": f"slot {i}"}]} for i in range(runs)]
    results = await asyncio.wait_for(asyncio.gather(*(top.ainvoke(g) for g in given)), 200)
    assert all(str(r["messages"][-1].content).startswith("level 0 done") for r in results)


def inheriting_respond(body: dict[str, Any]) -> Reply:
    """The parent delegates; the child asks who it runs for, then says it."""
    system = str(body["messages"][0]["content"])
    tool_says = [str(m["content"]) for m in body["messages"] if m["role"] == "tool"]
    if tool_says:
        return Reply(content=f"{system}: {tool_says[-1]}")
    if system == "parent":
        return Reply(tool_calls=(ScriptedToolCall("delegate", {"q": "who?"}),))
    return Reply(tool_calls=(ScriptedToolCall("whoami", {}),))


def whoami(runtime: ToolRuntime) -> str:
    """Say whose run this is."""
    metadata = (runtime.config or {}).get("metadata") or {}
    return f"context={runtime.context} team={metadata.get('team')}"


def inheriting(make: Any, server: ScriptedOpenAIServer) -> Any:
    child = make(model_for(server), [whoami], system_prompt="child")

    def delegate(q: str) -> str:
        """Ask the child agent."""
        result = child.invoke({"messages": [{"role": "user", "content": q}]})
        return str(result["messages"][-1].content)

    return make(model_for(server), [delegate], system_prompt="parent")


def test_a_sub_agent_takes_its_parents_context_and_metadata_as_langgraphs(
    embedded: None,
) -> None:
    given = {"messages": [{"role": "user", "content": "inherit"}]}
    config: Any = {"metadata": {"team": "blue"}}
    with (
        ScriptedOpenAIServer(responder=inheriting_respond) as lc_server,
        ScriptedOpenAIServer(responder=inheriting_respond) as ll_server,
    ):
        lc = inheriting(lc_create_agent, lc_server).invoke(given, config, context={"user": "ada"})
        ours = inheriting(create_agent, ll_server).invoke(given, config, context={"user": "ada"})
        assert "team=blue" in str(lc["messages"][-1].content)
        assert "'user': 'ada'" in str(lc["messages"][-1].content)
        assert ours["messages"][-1].content == lc["messages"][-1].content
        assert ll_server.chat_requests() == lc_server.chat_requests()


# deepagents' ``task`` tool calls its sub-agent with this config, the rest ambient.
SUBAGENT: Any = {"configurable": {"ls_agent_type": "subagent"}}


@pytest.mark.parametrize("sync", [True, False], ids=["invoke", "ainvoke"])
async def test_a_threaded_parents_sub_agent_runs_as_langgraphs(embedded: None, sync: bool) -> None:
    """The parent runs a thread (a checkpointer, ``configurable.thread_id``), so its tool
    (taking the ``ToolRuntime``, as deepagents' ``task`` does) runs under a config holding
    the parent's thread: the sub-agent still runs as a run of its own (LangGraph's
    subgraph: a namespace of its own), not as a second run of the parent's busy thread,
    and the thread goes on with a second turn."""
    from langgraph.checkpoint.memory import InMemorySaver

    def threaded(make: Any, server: ScriptedOpenAIServer) -> Any:
        child = make(model_for(server), [whoami], system_prompt="child")

        def delegate(q: str, runtime: ToolRuntime) -> str:
            """Ask the child agent."""
            assert runtime.config["configurable"]["thread_id"]  # the parent's, as in LangGraph
            result = child.invoke({"messages": [{"role": "user", "content": q}]}, SUBAGENT)
            return str(result["messages"][-1].content)

        async def adelegate(q: str, runtime: ToolRuntime) -> str:
            """Ask the child agent."""
            assert runtime.config["configurable"]["thread_id"]
            given = {"messages": [{"role": "user", "content": q}]}
            result = await child.ainvoke(given, SUBAGENT)
            return str(result["messages"][-1].content)

        tool = StructuredTool.from_function(
            func=delegate if sync else None,
            coroutine=None if sync else adelegate,
            name="delegate",
            description="Ask the child agent.",
        )
        return make(model_for(server), [tool], system_prompt="parent", checkpointer=InMemorySaver())

    async def two_turns(agent: Any, thread: str) -> list[Any]:
        config: Any = {"configurable": {"thread_id": thread}}
        results = []
        for text in ("first", "second"):
            given = {"messages": [{"role": "user", "content": text}]}
            if sync:
                results.append(await asyncio.to_thread(agent.invoke, given, config))
            else:
                results.append(await agent.ainvoke(given, config))
        return results

    thread = f"threaded-sub-agent-{uuid.uuid4().hex}"
    with (
        ScriptedOpenAIServer(responder=inheriting_respond) as lc_server,
        ScriptedOpenAIServer(responder=inheriting_respond) as ll_server,
    ):
        lc = await two_turns(threaded(lc_create_agent, lc_server), thread)
        ours = await two_turns(threaded(create_agent, ll_server), thread)
        assert str(lc[-1]["messages"][-1].content).startswith("parent: child: context=")
        assert [len(r["messages"]) for r in ours] == [len(r["messages"]) for r in lc]
        assert [m.content for m in ours[-1]["messages"]] == [m.content for m in lc[-1]["messages"]]
        assert ll_server.chat_requests() == lc_server.chat_requests()


def test_an_agent_as_a_node_of_a_threaded_graph_runs_as_langgraphs_subgraph(
    embedded: None,
) -> None:
    """An agent as the node of a ``StateGraph`` that keeps a thread: the node's config
    holds the graph's thread and the node's namespace, and LangGraph runs the agent as a
    subgraph in that namespace, never as a run of the thread itself. Two turns: the
    model sees each turn's messages once, as the graph's state holds them."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, MessagesState, StateGraph

    def graph(make: Any, server: ScriptedOpenAIServer) -> Any:
        builder = StateGraph(MessagesState)
        builder.add_node("agent", make(model_for(server), [], system_prompt="node"))
        builder.add_edge(START, "agent")
        return builder.compile(checkpointer=InMemorySaver())

    def two_turns(outer: Any) -> list[Any]:
        config: Any = {"configurable": {"thread_id": f"graph-node-{uuid.uuid4().hex}"}}
        return [
            outer.invoke({"messages": [{"role": "user", "content": text}]}, config)
            for text in ("first", "second")
        ]

    with (
        ScriptedOpenAIServer(
            responder=lambda body: Reply(content=f"{len(body['messages'])}")
        ) as lc_server,
        ScriptedOpenAIServer(
            responder=lambda body: Reply(content=f"{len(body['messages'])}")
        ) as ll_server,
    ):
        lc = two_turns(graph(lc_create_agent, lc_server))
        ours = two_turns(graph(create_agent, ll_server))
        assert [m.content for m in lc[-1]["messages"]] == ["first", "2", "second", "4"]
        assert [m.content for m in ours[-1]["messages"]] == [m.content for m in lc[-1]["messages"]]
        assert ll_server.chat_requests() == lc_server.chat_requests()


def approving_respond(body: dict[str, Any]) -> Reply:
    """The parent delegates once; the child calls ``whoami`` twice (each call gated by
    HumanInTheLoopMiddleware), then answers."""
    system = str(body["messages"][0]["content"])
    tool_says = [str(m["content"]) for m in body["messages"] if m["role"] == "tool"]
    if system == "parent":
        if tool_says:
            return Reply(content=f"parent: {tool_says[-1]}")
        return Reply(tool_calls=(ScriptedToolCall("delegate", {"q": "who?"}),))
    if len(tool_says) < 2:
        return Reply(tool_calls=(ScriptedToolCall("whoami", {}),))
    return Reply(content=f"child: {tool_says}")


@pytest.mark.parametrize("sync", [True, False], ids=["invoke", "ainvoke"])
async def test_a_sub_agents_interrupts_stop_its_parent_and_resume_as_langgraphs(
    embedded: None, sync: bool
) -> None:
    """A sub-agent invoked inside its parent's tool asks a human (HITL on its tool), twice:
    as LangGraph's subgraph, each interrupt ends the parent's run with it as the parent's
    ``__interrupt__`` (streamed as an ``updates`` item too), the thread's next node is the
    tools, and ``Command(resume=...)`` to the parent goes on inside the sub-agent, from
    where it waited: the same items, states, results and model requests."""
    from langchain.agents.middleware import HumanInTheLoopMiddleware
    from langgraph.checkpoint.memory import InMemorySaver

    def parent(make: Any, server: ScriptedOpenAIServer) -> Any:
        gate = HumanInTheLoopMiddleware(interrupt_on={"whoami": True})
        child = make(model_for(server), [whoami], system_prompt="child", middleware=[gate])

        def delegate(q: str) -> str:
            """Ask the child agent."""
            result = child.invoke({"messages": [{"role": "user", "content": q}]})
            return str(result["messages"][-1].content)

        async def adelegate(q: str) -> str:
            """Ask the child agent."""
            result = await child.ainvoke({"messages": [{"role": "user", "content": q}]})
            return str(result["messages"][-1].content)

        tool = StructuredTool.from_function(
            func=delegate if sync else None,
            coroutine=None if sync else adelegate,
            name="delegate",
            description="Ask the child agent.",
        )
        return make(model_for(server), [tool], system_prompt="parent", checkpointer=InMemorySaver())

    approve = Command(resume={"decisions": [{"type": "approve"}]})

    async def run(agent: Any) -> list[Any]:
        config: Any = {"configurable": {"thread_id": f"sub-hitl-{uuid.uuid4().hex}"}}
        seen: list[Any] = []
        given = {"messages": [{"role": "user", "content": "go"}]}
        if sync:
            items = await asyncio.to_thread(
                lambda: list(agent.stream(given, config, stream_mode="updates"))
            )
        else:
            items = [item async for item in agent.astream(given, config, stream_mode="updates")]
        # the model's update differs in its ids only
        seen.extend(
            [i.value for i in item["__interrupt__"]] for item in items if "__interrupt__" in item
        )
        for _ in range(2):
            state = agent.get_state(config)
            seen.append((state.next, [i.value for i in state.interrupts]))
            if sync:
                result = await asyncio.to_thread(agent.invoke, approve, config)
            else:
                result = await agent.ainvoke(approve, config)
            seen.append([i.value for i in result.get("__interrupt__", ())])
            seen.append([(m.type, m.content) for m in result["messages"]])
        return seen

    with (
        ScriptedOpenAIServer(responder=approving_respond) as lc_server,
        ScriptedOpenAIServer(responder=approving_respond) as ll_server,
    ):
        lc = await run(parent(lc_create_agent, lc_server))
        ours = await run(parent(create_agent, ll_server))
        asked = lc[0][0]
        assert asked["action_requests"][0]["name"] == "whoami"
        assert lc[1] == (("tools",), [asked])
        assert lc[2] == [asked]  # the first answer, and the child asks again
        assert lc[-2] == []  # the second, and the parent ends
        assert lc[-1][-1] == ("ai", f"parent: child: {['context=None team=None'] * 2}")
        assert ours == lc
        assert ll_server.chat_requests() == lc_server.chat_requests()


class RunsSeen(BaseCallbackHandler):
    """The chain and tool runs a callback handler is told of: name, parent, tags and
    metadata (LangGraph's ``langgraph_*`` keys and the caller's ``checkpoint_ns`` aside:
    a namespace names a task, by an id of its own on either side)."""

    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []

    def on_chain_start(
        self, serialized: Any, inputs: Any, *, run_id: Any, parent_run_id: Any = None, **kw: Any
    ) -> None:
        metadata = {
            k: v
            for k, v in (kw.get("metadata") or {}).items()
            if not k.startswith("langgraph_") and k != "checkpoint_ns"
        }
        self.runs.append(
            {"name": kw.get("name"), "id": run_id, "parent": parent_run_id,
             "tags": kw.get("tags"), "metadata": metadata}
        )  # fmt: skip

    def on_tool_start(
        self, serialized: Any, input_str: Any, *, run_id: Any, parent_run_id: Any = None, **kw: Any
    ) -> None:
        name = kw.get("name") or serialized.get("name")
        self.runs.append({"name": f"tool {name}", "id": run_id, "parent": parent_run_id})

    def graph_runs(self) -> list[tuple[Any, ...]]:
        """The agents' and tools' runs, each under its nearest such ancestor (LangGraph's
        node runs in between, ``model`` and ``tools``, are not loopline's: its nodes run
        in the services)."""
        by_id = {run["id"]: run for run in self.runs}
        kept = [run for run in self.runs if run["name"] not in ("model", "tools")]
        order = {run["id"]: i for i, run in enumerate(kept)}

        def ancestor(run: dict[str, Any]) -> int | None:
            parent = by_id.get(run["parent"])
            while parent is not None and parent["id"] not in order:
                parent = by_id.get(parent["parent"])
            return None if parent is None else order[parent["id"]]

        return [(run["name"], ancestor(run), run.get("tags"), run.get("metadata")) for run in kept]


@pytest.mark.parametrize("call", ["invoke", "ainvoke", "stream", "astream"])
async def test_callbacks_see_a_sub_agents_run_as_langgraphs(embedded: None, call: str) -> None:
    """``config["callbacks"]``: the handler is told of the parent agent's run (named after
    the graph), its tool's run under it, and the sub-agent the tool invokes as a run under
    the tool's (named after the sub-agent), with the caller's tags and metadata, as
    LangGraph reports a subgraph's run; the parent invoked or streamed."""
    sync = call in ("invoke", "stream")

    def parent(make: Any, server: ScriptedOpenAIServer) -> Any:
        child = make(model_for(server), [whoami], system_prompt="child", name="kid")

        def delegate(q: str) -> str:
            """Ask the child agent."""
            result = child.invoke({"messages": [{"role": "user", "content": q}]})
            return str(result["messages"][-1].content)

        async def adelegate(q: str) -> str:
            """Ask the child agent."""
            result = await child.ainvoke({"messages": [{"role": "user", "content": q}]})
            return str(result["messages"][-1].content)

        tool = StructuredTool.from_function(
            func=delegate if sync else None,
            coroutine=None if sync else adelegate,
            name="delegate",
            description="Ask the child agent.",
        )
        return make(model_for(server), [tool], system_prompt="parent")

    async def run(agent: Any) -> list[tuple[Any, ...]]:
        seen = RunsSeen()
        config: Any = {"callbacks": [seen], "tags": ["t1"], "metadata": {"team": "blue"}}
        given = {"messages": [{"role": "user", "content": "go"}]}
        if call == "invoke":
            await asyncio.to_thread(agent.invoke, given, config)
        elif call == "ainvoke":
            await agent.ainvoke(given, config)
        elif call == "stream":
            await asyncio.to_thread(lambda: list(agent.stream(given, config)))
        else:
            _ = [item async for item in agent.astream(given, config)]
        return seen.graph_runs()

    with (
        ScriptedOpenAIServer(responder=inheriting_respond) as lc_server,
        ScriptedOpenAIServer(responder=inheriting_respond) as ll_server,
    ):
        lc = await run(parent(lc_create_agent, lc_server))
        ours = await run(parent(create_agent, ll_server))
        assert [(name, up) for name, up, *_ in lc] == [
            ("LangGraph", None), ("tool delegate", 0), ("kid", 1), ("tool whoami", 2)
        ]  # fmt: skip
        assert ours == lc


@tool
def transfer_to_b(runtime: ToolRuntime) -> Command:
    """Hand the conversation to agent_b."""
    answer = ToolMessage(content="transferred", tool_call_id=runtime.tool_call_id)
    return Command(goto="agent_b", graph=Command.PARENT, update={"messages": [answer]})


def test_a_tools_parent_command_hands_off_in_the_graph_that_runs_the_agent_as_langgraphs(
    embedded: None,
) -> None:
    """A tool's ``Command(graph=Command.PARENT, goto=..., update=...)`` inside an agent
    that is a node of a ``StateGraph``: the agent's run ends with it, and the outer graph
    applies it as the agent node's own update and goes to the node it names, as
    LangGraph's subgraph hands it to its parent."""
    from langgraph.graph import END, START, MessagesState, StateGraph

    def handoff(make: Any, server: ScriptedOpenAIServer) -> tuple[Any, list[Any]]:
        visited: list[Any] = []

        def agent_b(state: MessagesState) -> dict[str, Any]:
            visited.append([m.content for m in state["messages"]])
            return {}

        builder = StateGraph(MessagesState)
        builder.add_node("agent_a", make(model_for(server), [transfer_to_b]))
        builder.add_node("agent_b", agent_b)
        builder.add_edge(START, "agent_a")
        builder.add_edge("agent_a", END)
        builder.add_edge("agent_b", END)
        return builder.compile(), visited

    def transfer(body: dict[str, Any]) -> Reply:
        return Reply(tool_calls=(ScriptedToolCall("transfer_to_b", {}),))

    given = {"messages": [{"role": "user", "content": "hi"}]}
    with (
        ScriptedOpenAIServer(responder=transfer) as lc_server,
        ScriptedOpenAIServer(responder=transfer) as ll_server,
    ):
        lc_graph, lc_visited = handoff(lc_create_agent, lc_server)
        ll_graph, ll_visited = handoff(create_agent, ll_server)
        lc = [(m.type, m.content) for m in lc_graph.invoke(given)["messages"]]
        ours = [(m.type, m.content) for m in ll_graph.invoke(given)["messages"]]
        assert lc_visited == [["hi", "transferred"]]
        assert ll_visited == lc_visited
        assert ours == lc
        assert ll_server.chat_requests() == lc_server.chat_requests()


def test_a_sub_agents_parent_command_answers_its_parents_call_as_langgraphs(
    embedded: None,
) -> None:
    """A sub-agent's tool returns ``Command(graph=Command.PARENT, update=...)``: the
    sub-agent's run ends with it, and the parent's tool call that invoked the sub-agent
    takes it as its own output (its ToolMessage and state update), as LangGraph's parent
    tools node takes the Command its subgraph hands up; the parent goes on from there."""
    asking: list[str] = []

    @tool
    def report(runtime: ToolRuntime) -> Command:
        """Answer the parent's call directly."""
        answer = ToolMessage(content="from the child", tool_call_id=asking[-1])
        return Command(graph=Command.PARENT, update={"messages": [answer]})

    def respond(body: dict[str, Any]) -> Reply:
        system = str(body["messages"][0]["content"])
        tool_says = [str(m["content"]) for m in body["messages"] if m["role"] == "tool"]
        if tool_says:
            return Reply(content=f"{system}: {tool_says[-1]}")
        if system == "parent":
            return Reply(tool_calls=(ScriptedToolCall("delegate", {"q": "who?"}),))
        return Reply(tool_calls=(ScriptedToolCall("report", {}),))

    def parent(make: Any, server: ScriptedOpenAIServer) -> Any:
        child = make(model_for(server), [report], system_prompt="child")

        def delegate(q: str, runtime: ToolRuntime) -> str:
            """Ask the child agent."""
            asking.append(str(runtime.tool_call_id))
            result = child.invoke({"messages": [{"role": "user", "content": q}]})
            return str(result["messages"][-1].content)

        tool_ = StructuredTool.from_function(delegate, name="delegate")
        return make(model_for(server), [tool_], system_prompt="parent")

    given = {"messages": [{"role": "user", "content": "go"}]}
    with (
        ScriptedOpenAIServer(responder=respond) as lc_server,
        ScriptedOpenAIServer(responder=respond) as ll_server,
    ):
        lc = [
            (m.type, m.content)
            for m in parent(lc_create_agent, lc_server).invoke(given)["messages"]
        ]
        ours = [
            (m.type, m.content) for m in parent(create_agent, ll_server).invoke(given)["messages"]
        ]
        assert lc[-2:] == [("tool", "from the child"), ("ai", "parent: from the child")]
        assert ours == lc
        assert ll_server.chat_requests() == lc_server.chat_requests()


def test_a_sub_agents_items_stream_in_its_namespace_as_langgraphs(embedded: None) -> None:
    """``stream(..., subgraphs=True)`` of a parent whose tool invokes a named sub-agent:
    the sub-agent's model chunks, tool messages and updates come in its namespace (its tool
    call's task, ``tools:<id>``, which the parent's tool message names as its
    ``langgraph_checkpoint_ns``), each with the sub-agent's ``lc_agent_name``, the run's
    tags in model chunks, the caller's metadata and the namespaced checkpoint keys, as
    LangGraph streams a subgraph's (ids aside: each names a task of its own side)."""
    import re

    def parent(make: Any, server: ScriptedOpenAIServer) -> Any:
        child = make(model_for(server), [whoami], system_prompt="child", name="kid")

        def delegate(q: str) -> str:
            """Ask the child agent."""
            result = child.invoke({"messages": [{"role": "user", "content": q}]})
            return str(result["messages"][-1].content)

        return make(model_for(server), [delegate], system_prompt="parent", name="boss")

    shown = ("lc_agent_name", "tags", "langgraph_node", "team", "checkpoint_ns")
    shown += ("langgraph_checkpoint_ns",)
    uuid_like = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}")

    def items(agent: Any) -> tuple[list[str], set[Any]]:
        config: Any = {"tags": ["t1"], "metadata": {"team": "blue"}}
        given = {"messages": [{"role": "user", "content": "go"}]}
        seen, namespaces = [], set()
        modes = ["messages", "updates"]
        for ns, mode, data in agent.stream(given, config, stream_mode=modes, subgraphs=True):
            if mode == "messages":
                message, meta = data
                if message.type == "tool" and not ns:  # the call that ran the sub-agent
                    namespaces.add((meta["langgraph_checkpoint_ns"],))
                kept = {k: meta.get(k) for k in shown}
                data = (message.type, message.content, kept)
            else:
                data = list(data)
            namespaces.add(ns)
            seen.append(uuid_like.sub("ID", str((ns, mode, data))))
        return seen, namespaces

    with (
        ScriptedOpenAIServer(responder=inheriting_respond) as lc_server,
        ScriptedOpenAIServer(responder=inheriting_respond) as ll_server,
    ):
        lc, lc_namespaces = items(parent(lc_create_agent, lc_server))
        ours, namespaces = items(parent(create_agent, ll_server))
        assert any("'kid'" in item and "('tools:ID',)" in item for item in lc)
        assert len(lc_namespaces) == 2  # the parent's, and the call's shared by both
        assert ours == lc
        assert len(namespaces) == 2


def test_an_agent_in_a_retried_node_runs_again_as_langgraphs(embedded: None) -> None:
    """An agent as a ``StateGraph`` node with a retry policy, whose tool fails the first
    time: the run fails, the node runs again, and so does the agent (not the failed
    run's outcome again: a retry keeps the node's scratchpad, so the agent's call takes
    the next place among the node's agent calls, as LangGraph's subgraph takes the next
    namespace), as LangGraph's retried node runs its subgraph again."""
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.types import RetryPolicy

    def graph(make: Any, server: ScriptedOpenAIServer) -> Any:
        failures = [ConnectionError("flaky")]  # one LangGraph retries by default

        def flaky() -> str:
            """Fail once, then answer."""
            if failures:
                raise failures.pop()
            return "steady"

        builder = StateGraph(MessagesState)
        agent = make(model_for(server), [flaky], system_prompt="retried")
        builder.add_node("agent", agent, retry_policy=RetryPolicy(initial_interval=0.01))
        builder.add_edge(START, "agent")
        return builder.compile()

    def respond(body: dict[str, Any]) -> Reply:
        tool_says = [str(m["content"]) for m in body["messages"] if m["role"] == "tool"]
        if tool_says:
            return Reply(content=f"done: {tool_says[-1]}")
        return Reply(tool_calls=(ScriptedToolCall("flaky", {}),))

    given = {"messages": [{"role": "user", "content": "retry"}]}
    with (
        ScriptedOpenAIServer(responder=respond) as lc_server,
        ScriptedOpenAIServer(responder=respond) as ll_server,
    ):
        lc = graph(lc_create_agent, lc_server).invoke(given)
        ours = graph(create_agent, ll_server).invoke(given)
        assert lc["messages"][-1].content == "done: steady"
        assert [m.content for m in ours["messages"]] == [m.content for m in lc["messages"]]
        assert ll_server.chat_requests() == lc_server.chat_requests()

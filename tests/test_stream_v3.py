"""``stream_events(version="v3")`` / ``astream_events(version="v3")``: LangGraph 1.2's run
object over loopline's agent, compared with LangChain's ``create_agent`` on twin scripted
servers: the same projections (``values``, ``messages``' content-block events,
``tool_calls`` with their partial outputs), in the same order, embedded and deployed (a
tool's partial outputs cross the bus from the tools service), and the same failure."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from langchain.agents import create_agent as lc_create_agent
from langchain_core.messages import BaseMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.stream import StreamChannel, StreamTransformer

from loopline.agent import create_agent
from loopline.testing.scripted import Reply, ScriptedOpenAIServer, ScriptedToolCall
from services.settings import Settings
from tests import delta_tools
from tests.subagent_tools import SPELLER_PROMPT
from tests.support import EMBEDDED_PREFIX, ServiceProcesses

SYSTEM_PROMPT = "You spell words."
SPELL = [
    Reply(content="Spelling it.", tool_calls=(ScriptedToolCall("spell", {"word": "abc"}),)),
    Reply(content="The word, spelled out, is ABC."),
]
REFUSE = [Reply(tool_calls=(ScriptedToolCall("refuse", {"reason": "no"}),)), Reply(content="-")]
SCRIPTS = {
    "spell embedded": SPELL,
    "spell deployed": SPELL,
    "spell async": SPELL,
    "refuse embedded": REFUSE,
    "marked": SPELL,
}
TOOLS = [delta_tools.spell, delta_tools.refuse]
TOOL_PATHS = ["tests.delta_tools:spell", "tests.delta_tools:refuse"]


def chat_model(server: ScriptedOpenAIServer, http: Any = None) -> ChatOpenAI:
    return ChatOpenAI(
        model="gpt-4o-mini",
        base_url=server.url,
        api_key="test",
        stream_usage=True,
        http_async_client=http,
    )


def given(prompt: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": prompt}]}


# -- what a run object shows, as comparable data ------------------------------------------


def message_shape(message: BaseMessage) -> tuple[Any, ...]:
    calls = [(c["name"], c["args"], c["id"]) for c in getattr(message, "tool_calls", [])]
    return (message.type, message.content, calls)


def event_shape(event: dict[str, Any]) -> tuple[Any, ...]:
    """A content-block event without the ids each side makes up."""
    shown = {k: v for k, v in event.items() if k not in ("id", "message_id", "metadata")}
    if event["event"] == "message-finish":
        shown.pop("usage", None)  # checked apart: both sides count the same tokens
    return tuple(sorted((k, repr(v)) for k, v in shown.items()))


def sync_record(run: Any) -> list[tuple[Any, ...]]:
    """Every projection item of a sync run, in arrival order."""
    seen: list[tuple[Any, ...]] = []
    for name, item in run.interleave("values", "messages", "tool_calls"):
        if name == "values":
            seen.append(("values", [message_shape(m) for m in item["messages"]]))
        elif name == "messages":
            events = [event_shape(e) for e in item]
            seen.append(("messages", item.node, events, message_shape(item.output)))
        else:
            deltas = list(item.output_deltas)
            seen.append(("tool", item.tool_name, item.tool_call_id, item.input, deltas))
            seen.append(("tool end", item.output, item.error, item.completed))
    return seen


async def async_record(run: Any) -> list[tuple[Any, ...]]:
    """The ``tool_calls`` projection of an async run and its output."""
    seen: list[tuple[Any, ...]] = []
    async for call in run.tool_calls:
        deltas = [d async for d in call.output_deltas]
        seen.append(("tool", call.tool_name, call.tool_call_id, call.input, deltas))
        seen.append(("tool end", call.output, call.error, call.completed))
    output = await run.output()
    seen.append(("output", [message_shape(m) for m in output["messages"]]))
    return seen


def langchain_sync(server: ScriptedOpenAIServer, prompt: str, **kwargs: Any) -> Any:
    agent = lc_create_agent(chat_model(server), TOOLS, system_prompt=SYSTEM_PROMPT)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sync_record(agent.stream_events(given(prompt), version="v3", **kwargs))


def langchain_async(server: ScriptedOpenAIServer, prompt: str) -> list[tuple[Any, ...]]:
    async def collect() -> list[tuple[Any, ...]]:
        # an HTTP client of this event loop (langchain-openai shares its default one)
        async with httpx.AsyncClient() as http:
            agent = lc_create_agent(chat_model(server, http), TOOLS, system_prompt=SYSTEM_PROMPT)
            return await async_record(await agent.astream_events(given(prompt), version="v3"))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return asyncio.run(collect())


def embedded_agent(server: ScriptedOpenAIServer, **kwargs: Any) -> Any:
    prompt = SPELLER_PROMPT if kwargs.get("name") == "speller" else SYSTEM_PROMPT
    return create_agent(
        chat_model(server),
        TOOLS,
        system_prompt=prompt,
        settings=Settings(prefix=EMBEDDED_PREFIX),
        **kwargs,
    )


def in_thread(record: Callable[[], Any]) -> Any:
    """A sync run's record, taken off the test's event loop (as a sync caller's)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return asyncio.to_thread(record)


# -- the tests ----------------------------------------------------------------------------


async def test_embedded_v3_run_shows_langchains_projections(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    lc_server, ll_server = servers
    expected = await asyncio.to_thread(langchain_sync, lc_server, "spell embedded")
    agent = embedded_agent(ll_server)
    got = await in_thread(
        lambda: sync_record(agent.stream_events(given("spell embedded"), version="v3"))
    )
    assert got == expected
    tools = [item for item in got if item[0].startswith("tool")]
    assert tools == [
        ("tool", "spell", tools[0][2], {"word": "abc"}, ["a", "b", "c"]),
        ("tool end", "ABC", None, True),
    ]
    assert [item[0] for item in got].count("messages") == 2


async def test_deployed_v3_run_carries_a_tools_partial_outputs(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    """Deployed, the partial outputs cross the bus from the tools service's process."""
    lc_server, _ = servers
    expected = await asyncio.to_thread(langchain_async, lc_server, "spell deployed")
    settings = Settings(redis_url=stack.redis_url, prefix=stack.prefix)
    agent = create_agent("gpt-4o-mini", TOOL_PATHS, system_prompt=SYSTEM_PROMPT, settings=settings)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = await agent.astream_events(given("spell deployed"), version="v3")
        got = await async_record(run)
    assert got == expected
    assert got[0][-1] == ["a", "b", "c"]


async def test_embedded_async_v3_run_as_langchains(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    lc_server, ll_server = servers
    expected = await asyncio.to_thread(langchain_async, lc_server, "spell async")
    agent = embedded_agent(ll_server)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = await async_record(await agent.astream_events(given("spell async"), version="v3"))
    assert got == expected


async def test_a_failing_tool_fails_its_tool_call_then_the_run_as_langchains(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    lc_server, ll_server = servers

    def record(agent: Any) -> tuple[list[Any], str]:
        run = agent.stream_events(given("refuse embedded"), version="v3")
        calls: list[Any] = []
        with pytest.raises(ValueError, match="refused: no") as raised:
            for call in run.tool_calls:
                calls.append(call)
                list(call.output_deltas)
        shown = [(c.tool_name, c.input, c.error, c.completed) for c in calls]
        return shown, str(raised.value)

    lc_agent = lc_create_agent(chat_model(lc_server), TOOLS, system_prompt=SYSTEM_PROMPT)
    expected = await in_thread(lambda: record(lc_agent))
    got = await in_thread(lambda: record(embedded_agent(ll_server)))
    assert got == expected
    assert got[0] == [("refuse", {"reason": "no"}, "refused: no", True)]


class Marker(StreamTransformer):
    """A transformer of the caller's: counts the tools events it sees."""

    required_stream_modes = ("tools",)

    def __init__(self, scope: tuple[str, ...] = ()) -> None:
        super().__init__(scope)
        self.log: StreamChannel[str] = StreamChannel()

    def init(self) -> dict[str, Any]:
        return {"marks": self.log}

    def process(self, event: Any) -> bool:
        if event["method"] == "tools":
            self.log.push(event["params"]["data"]["event"])
        return True


async def test_transformers_given_to_create_agent_run_after_the_agents_own(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    """``create_agent(transformers=...)``: registered after ``ToolCallTransformer`` and
    ``SubagentTransformer``, as LangChain registers them, and fed the same events."""
    lc_server, ll_server = servers

    def record(agent: Any) -> tuple[list[str], list[str]]:
        run = agent.stream_events(given("marked"), version="v3")
        names = [type(t).__name__ for t in run._mux._transformers]
        marks = list(run.extensions["marks"])
        return names, marks

    lc_agent = lc_create_agent(
        chat_model(lc_server), TOOLS, system_prompt=SYSTEM_PROMPT, transformers=[Marker]
    )
    expected = await in_thread(lambda: record(lc_agent))
    got = await in_thread(lambda: record(embedded_agent(ll_server, transformers=[Marker])))
    assert got == expected
    assert got[1] == ["tool-started", "tool-output-delta"] * 1 + ["tool-output-delta"] * 2 + [
        "tool-finished"
    ]
    assert got[0].index("ToolCallTransformer") < got[0].index("Marker")


# -- sub-agents: an agent run inside a tool call ------------------------------------------

SUPERVISOR = [
    Reply(tool_calls=(ScriptedToolCall("ask_speller", {"word": "abc"}),)),
    Reply(content="The speller says ABC."),
]
for prompt in ("delegate embedded", "delegate deployed", "delegate v3"):
    SCRIPTS[prompt] = SUPERVISOR
SCRIPTS["spell abc"] = SPELL


def sub_agent_tool(make_speller: Callable[[], Any]) -> Any:
    """``ask_speller`` over the given speller (each side's own agent)."""

    @tool
    def ask_speller(word: str) -> str:
        """Ask the speller agent to spell a word."""
        result = make_speller().invoke({"messages": [{"role": "user", "content": f"spell {word}"}]})
        return str(result["messages"][-1].content)

    return ask_speller


def langchain_supervisor(server: ScriptedOpenAIServer) -> Any:
    speller = lc_create_agent(
        chat_model(server), [delta_tools.spell], system_prompt=SPELLER_PROMPT, name="speller"
    )
    tool_ = sub_agent_tool(lambda: speller)
    return lc_create_agent(chat_model(server), [tool_], name="supervisor")


def nested_shape(item: tuple[Any, ...]) -> tuple[Any, ...]:
    """A ``(namespace, mode, data)`` item without the task ids of its namespace."""
    ns, mode, data = item
    kinds = tuple(segment.split(":")[0] for segment in ns)
    if mode == "values":
        return kinds, mode, [message_shape(m) for m in data["messages"]]
    shown = {
        node: [message_shape(m) for m in (u or {}).get("messages", [])] for node, u in data.items()
    }
    return kinds, mode, shown


def sub_agent_items(agent: Any, prompt: str) -> list[tuple[Any, ...]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stream = agent.stream(given(prompt), stream_mode=["updates", "values"], subgraphs=True)
        return [nested_shape(item) for item in stream]


async def test_embedded_sub_agents_items_come_under_its_namespace_as_langchains(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    lc_server, ll_server = servers
    expected = await asyncio.to_thread(
        sub_agent_items, langchain_supervisor(lc_server), "delegate embedded"
    )
    speller = embedded_agent(ll_server, name="speller")
    supervisor = create_agent(
        chat_model(ll_server),
        [sub_agent_tool(lambda: speller)],
        name="supervisor",
        settings=Settings(prefix=EMBEDDED_PREFIX),
    )
    got = await asyncio.to_thread(sub_agent_items, supervisor, "delegate embedded")
    assert got == expected
    inner = [item for item in got if item[0] == ("tools",)]
    assert inner and inner[-1][1] == "values" and len(inner[-1][2]) == 4


async def test_deployed_sub_agents_items_come_under_its_namespace_as_langchains(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    """Deployed, the sub-agent runs from the tools service's process, and the parent's
    stream follows it there."""
    lc_server, _ = servers
    expected = await asyncio.to_thread(
        sub_agent_items, langchain_supervisor(lc_server), "delegate deployed"
    )
    settings = Settings(redis_url=stack.redis_url, prefix=stack.prefix)
    supervisor = create_agent(
        "gpt-4o-mini", ["tests.subagent_tools:ask_speller"], name="supervisor", settings=settings
    )
    got = await asyncio.to_thread(sub_agent_items, supervisor, "delegate deployed")
    assert got == expected
    assert any(item[0] == ("tools",) for item in got)


async def test_v3_run_surfaces_the_sub_agent_as_langchains(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    """``run.subagents``: the sub-agent's handle, its name, the tool call that ran it,
    its own ``tool_calls`` and its output."""
    lc_server, ll_server = servers

    def record(agent: Any) -> list[Any]:
        run = agent.stream_events(given("delegate v3"), version="v3")
        seen: list[Any] = []
        for handle in run.subagents:
            calls = [(c.tool_name, list(c.output_deltas), c.output) for c in handle.tool_calls]
            output = handle.output
            seen.append((handle.name, handle.cause["type"], calls, len(output["messages"])))
        seen.append([message_shape(m) for m in run.output["messages"]])
        return seen

    expected = await in_thread(lambda: record(langchain_supervisor(lc_server)))
    speller = embedded_agent(ll_server, name="speller")
    supervisor = create_agent(
        chat_model(ll_server),
        [sub_agent_tool(lambda: speller)],
        name="supervisor",
        settings=Settings(prefix=EMBEDDED_PREFIX),
    )
    got = await in_thread(lambda: record(supervisor))
    assert got == expected
    assert got[0][:3] == ("speller", "toolCall", [("spell", ["a", "b", "c"], "ABC")])


# -- the tools stream mode ------------------------------------------------------------------

SCRIPTS["tools mode"] = SPELL


def tools_items(agent: Any) -> list[tuple[Any, ...]]:
    """``stream_mode=["tools", "updates"]`` as comparable data."""
    seen: list[tuple[Any, ...]] = []
    for mode, data in agent.stream(given("tools mode"), stream_mode=["tools", "updates"]):
        if mode == "tools":
            output = data.get("output")
            shown = output.content if isinstance(output, BaseMessage) else output
            keys = ("tool_name", "input", "delta")
            seen.append((mode, data["event"], *(data.get(k) for k in keys), shown))
        else:
            seen.append((mode, sorted(data)))
    return seen


async def test_tools_stream_mode_as_langchains(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    """LangGraph's ``tools`` mode: each call's start (its name and input), partial
    outputs and end (its tool message), in order among the nodes' updates."""
    lc_server, ll_server = servers
    lc_agent = lc_create_agent(chat_model(lc_server), TOOLS, system_prompt=SYSTEM_PROMPT)
    expected = await in_thread(lambda: tools_items(lc_agent))
    got = await in_thread(lambda: tools_items(embedded_agent(ll_server)))
    assert got == expected
    assert [item[1] for item in got if item[0] == "tools"] == [
        "tool-started",
        *["tool-output-delta"] * 3,
        "tool-finished",
    ]

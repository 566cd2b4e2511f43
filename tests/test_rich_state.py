"""State keys hold what LangGraph's state holds, not only JSON: a LangChain message, a
pydantic model, a dataclass, a reducer's list of dataclasses and a delta channel's list,
written by a hook (``before_model``) and by a tool's ``Command``, read back by the next
hook and the tool as the same Python objects, and in the result, as LangChain's
``create_agent`` gives them (twin scripted servers; deployed: every service its own
process; embedded: every service in this process). On the wire they travel as LangGraph's
checkpoint serializer's bytes; an envelope naming a class no schema names is not built."""

from __future__ import annotations

import asyncio
import base64
import warnings
from typing import Any

import ormsgpack
import pytest
from langchain.agents import create_agent as lc_create_agent
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import EXT_CONSTRUCTOR_KW_ARGS

from contracts.replies import Reply, ScriptedToolCall
from loopline import create_agent
from loopline.testing.scripted import ScriptedOpenAIServer
from services.settings import Settings
from services.spec.channels import channels_of
from services.spec.statecodec import ENVELOPE, StateValueError
from tests.rich_state_tools import Mark, Note, RichHooks, RichState, Unlisted, stamp
from tests.structured_cases import shape
from tests.support import EMBEDDED_PREFIX, ServiceProcesses, unique_prefix

PROMPT = "rich state"
SCRIPTS = {
    PROMPT: [
        Reply(tool_calls=(ScriptedToolCall("stamp", {"label": "tool"}),)),
        Reply(content="stamped"),
    ]
}


def chat_model(server: ScriptedOpenAIServer) -> ChatOpenAI:
    return ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="test")


def the_input(where: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": f"{PROMPT} {where}"}]}


def run_langchain(server: ScriptedOpenAIServer, where: str) -> dict[str, Any]:
    agent = lc_create_agent(
        chat_model(server), tools=[stamp], state_schema=RichState, middleware=[RichHooks()]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        given: Any = the_input(where)  # LangChain's input type is its schema's TypedDict
        result: dict[str, Any] = agent.invoke(given)
    return result


def requests_for(server: ScriptedOpenAIServer, prompt: str) -> list[dict[str, Any]]:
    return [
        r
        for r in server.chat_requests()
        if any(m.get("role") == "user" and m.get("content") == prompt for m in r["messages"])
    ]


def check_same(
    where: str,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    lc: dict[str, Any],
    ours: dict[str, Any],
) -> None:
    prompt = f"{PROMPT} {where}"
    lc_requests = requests_for(servers[0], prompt)
    assert len(lc_requests) == 2 and requests_for(servers[1], prompt) == lc_requests
    assert shape(ours["messages"]) == shape(lc["messages"])
    keys = ("greeting", "note", "mark", "marks", "log", "seen")
    assert {k: ours[k] for k in keys} == {k: lc[k] for k in keys}
    # the objects themselves, and what the second hook and the tool read back
    assert isinstance(ours["greeting"], HumanMessage) and ours["greeting"].id == "greeting-1"
    assert ours["note"] == Note(text="tool", n=2) and ours["mark"] == Mark("tool", 2)
    assert ours["marks"] == [Mark("hook", 1), Mark("tool", 2)]
    assert ours["seen"][1] == (
        "greeting=HumanMessage:hello from a hook note=Note:tool mark=Mark:tool "
        "marks=Mark:hook,Mark:tool log=hook,tool:tool"
    )
    assert ours["log"] == ["hook", "tool:tool"]
    assert ours["messages"][2].content == (
        "greeting=HumanMessage:hello from a hook note=Note:hook mark=Mark:hook marks=Mark:hook "
        "log=hook"
    )


async def test_deployed_state_holds_objects_as_langchain(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    lc = await asyncio.to_thread(run_langchain, servers[0], "deployed")
    agent = create_agent(
        "gpt-4o-mini",
        ["tests.rich_state_tools:stamp"],
        state_schema=RichState,
        middleware=[RichHooks()],
        settings=Settings(redis_url=stack.redis_url, prefix=stack.prefix),
    )
    ours = await agent.ainvoke(the_input("deployed"))
    check_same("deployed", servers, lc, ours)


async def test_embedded_state_holds_objects_as_langchain(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    lc = await asyncio.to_thread(run_langchain, servers[0], "embedded")
    agent = create_agent(
        chat_model(servers[1]),
        [stamp],
        state_schema=RichState,
        middleware=[RichHooks()],
        settings=Settings(prefix=EMBEDDED_PREFIX),
    )
    ours = await agent.ainvoke(the_input("embedded"))
    check_same("embedded", servers, lc, ours)


async def test_a_threads_state_keeps_the_objects_across_runs_as_langgraph(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    """Two runs on one thread: the second's hooks and tool read the first's objects, and
    ``get_state`` gives them back, as with LangGraph's checkpointer."""
    config: Any = {"configurable": {"thread_id": f"t-{unique_prefix()}"}}
    lc_agent: Any = lc_create_agent(
        chat_model(servers[0]),
        tools=[stamp],
        state_schema=RichState,
        middleware=[RichHooks()],
        checkpointer=InMemorySaver(),
    )
    agent = create_agent(
        "gpt-4o-mini",
        ["tests.rich_state_tools:stamp"],
        state_schema=RichState,
        middleware=[RichHooks()],
        settings=Settings(redis_url=stack.redis_url, prefix=stack.prefix),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2):
            await asyncio.to_thread(lc_agent.invoke, the_input("thread"), config)
            ours = await agent.ainvoke(the_input("thread"), config)
        lc_values = lc_agent.get_state(config).values
    values = (await agent.aget_state(config)).values
    keys = ("greeting", "note", "mark", "marks", "log", "seen")
    assert {k: values[k] for k in keys} == {k: lc_values[k] for k in keys}
    assert {k: ours[k] for k in keys} == {k: lc_values[k] for k in keys}
    # the second run's first hook read the first run's objects
    assert values["seen"][2].startswith("greeting=HumanMessage:hello from a hook note=Note:")
    assert isinstance(values["greeting"], HumanMessage)
    assert all(type(m) is Mark for m in values["marks"])


# -- the wire form ----------------------------------------------------------------------


def codec() -> Any:
    return channels_of(RichState, [RichHooks()]).codec


@pytest.mark.fast
def test_json_values_stay_json_and_others_travel_as_the_serializers_bytes() -> None:
    c = codec()
    plain = {"seen": ["a", "b"], "n": 3, "d": {"k": [1, None, True]}}
    assert c.encode(plain) == plain
    objects = {
        "greeting": HumanMessage("hi", id="g"),
        "note": Note(text="x", n=1),
        "marks": [Mark("a", 1)],
        "tags": {"a"},
        "odd": {ENVELOPE: ["msgpack", "not ours"]},  # JSON that reads as an envelope
    }
    wire = c.encode(objects)
    assert all(set(v) == {ENVELOPE} for v in wire.values())
    assert c.decode(wire) == objects
    assert type(c.decode(wire)["greeting"]) is HumanMessage


@pytest.mark.fast
def test_an_envelope_naming_a_class_no_schema_names_builds_nothing() -> None:
    c = codec()
    # what the serializer writes for a class built from keywords (a dataclass's form)
    named = ormsgpack.packb(("tests.rich_state_tools", "Unlisted", {"a": 1}))
    forged = ormsgpack.packb(ormsgpack.Ext(EXT_CONSTRUCTOR_KW_ARGS, named))
    envelope = {ENVELOPE: ["msgpack", base64.b64encode(forged).decode()]}
    before = Unlisted.built
    decoded = c.decode_value(envelope)
    assert Unlisted.built == before and not isinstance(decoded, Unlisted)
    assert decoded == {"a": 1}  # LangGraph's strict mode: the raw data, nothing built
    # the same form naming a class of the agent's schema is built
    listed = ormsgpack.packb(("tests.rich_state_tools", "Mark", {"label": "a", "count": 1}))
    made = ormsgpack.packb(ormsgpack.Ext(EXT_CONSTRUCTOR_KW_ARGS, listed))
    assert c.decode_value({ENVELOPE: ["msgpack", base64.b64encode(made).decode()]}) == Mark(
        "a", 1
    )
    # the agent's own classes and LangChain's messages are rebuilt
    assert c.decode_value(c.encode_value(Note(text="x", n=1))) == Note(text="x", n=1)
    with pytest.raises(StateValueError, match="format 'pickle'"):
        c.decode_value({ENVELOPE: ["pickle", base64.b64encode(b"x").decode()]})


@pytest.mark.fast
def test_a_value_the_serializer_cannot_carry_is_refused_with_the_reason() -> None:
    with pytest.raises(StateValueError, match="cannot be stored in the state"):
        codec().encode_value(lambda: None)

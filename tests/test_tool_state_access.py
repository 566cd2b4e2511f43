"""Inside a tool, LangGraph's config reads and writes the state as deepagents'
``StateBackend`` does: ``get_config()["configurable"][CONFIG_KEY_READ]`` gives the state's
current values (with ``fresh=True`` the call's own writes applied), ``[CONFIG_KEY_SEND]``
takes writes ``[(key, value)]`` that join the state with the call's result through the
key's reducer (here a delta channel's batch reducer, as deepagents' ``files``): two
parallel calls writing, a deletion, a read of several keys, an input that seeds the key.
Next to LangChain's ``create_agent`` on twin scripted servers, deployed (every service its
own process) and embedded."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import pytest
from langchain.agents import create_agent as lc_create_agent
from langchain_openai import ChatOpenAI
from langgraph._internal._constants import CONFIG_KEY_READ, CONFIG_KEY_SEND

from contracts.replies import Reply, ScriptedToolCall
from loopline import create_agent
from loopline.testing.scripted import ScriptedOpenAIServer
from services.settings import Settings
from services.spec.channels import channels_of
from services.state_access import StateAccess
from tests.config_tools import FilesState, read_notes, remove_note, write_note
from tests.structured_cases import shape
from tests.support import EMBEDDED_PREFIX, ServiceProcesses

PROMPT = "notes"
TOOLS: list[Any] = [write_note, remove_note, read_notes]


def calls(*pairs: tuple[str, dict[str, Any]]) -> Reply:
    return Reply(tool_calls=tuple(ScriptedToolCall(name, args) for name, args in pairs))


SCRIPTS = {
    PROMPT: [
        calls(
            ("write_note", {"path": "a.txt", "text": "one"}),
            ("write_note", {"path": "b.txt", "text": "two"}),
        ),
        calls(("write_note", {"path": "a.txt", "text": "uno"}), ("remove_note", {"path": "b.txt"})),
        calls(("read_notes", {})),
        Reply(content="noted"),
    ]
}


def chat_model(server: ScriptedOpenAIServer) -> ChatOpenAI:
    return ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="test")


def the_input(where: str) -> Any:
    return {
        "messages": [{"role": "user", "content": f"{PROMPT} {where}"}],
        "files": {"seed.txt": {"content": "seed"}},
    }


def run_langchain(server: ScriptedOpenAIServer, where: str) -> dict[str, Any]:
    agent = lc_create_agent(chat_model(server), TOOLS, state_schema=FilesState)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result: dict[str, Any] = agent.invoke(the_input(where))
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
    assert len(lc_requests) == 4 and requests_for(servers[1], prompt) == lc_requests
    # what the test claims, read from LangChain's side
    answers = [m.content for m in lc["messages"] if m.type == "tool"]
    assert answers == [
        "created a.txt; ['a.txt', 'seed.txt']; one",
        "created b.txt; ['b.txt', 'seed.txt']; two",
        "updated a.txt; ['a.txt', 'b.txt', 'seed.txt']; uno",
        "removed b.txt",
        "{'a.txt': 'uno', 'seed.txt': 'seed'} after 8 messages",
    ]
    assert lc["files"] == {"seed.txt": {"content": "seed"}, "a.txt": {"content": "uno"}}
    assert shape(ours["messages"]) == shape(lc["messages"])
    assert ours["files"] == lc["files"]


async def test_deployed_tools_read_and_send_state_as_langchain(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    lc = await asyncio.to_thread(run_langchain, servers[0], "deployed")
    agent = create_agent(
        "gpt-4o-mini",
        [f"tests.config_tools:{t.__name__}" for t in TOOLS],
        state_schema=FilesState,
        settings=Settings(redis_url=stack.redis_url, prefix=stack.prefix),
    )
    ours = await agent.ainvoke(the_input("deployed"))
    check_same("deployed", servers, lc, ours)


async def test_embedded_tools_read_and_send_state_as_langchain(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    lc = await asyncio.to_thread(run_langchain, servers[0], "embedded")
    agent = create_agent(
        chat_model(servers[1]),
        TOOLS,
        state_schema=FilesState,
        settings=Settings(prefix=EMBEDDED_PREFIX),
    )
    ours = await asyncio.to_thread(agent.invoke, the_input("embedded"))
    check_same("embedded", servers, lc, ours)


@pytest.mark.fast
def test_read_and_send_as_langgraphs_local_read() -> None:
    """A read gives the state at tool time; ``fresh=True`` folds the call's own writes
    in through the key's reducer; a list gives the non-empty keys; without the state
    read (a tool that does not read it) only the send is given."""
    channels = channels_of(FilesState, [])
    seed = {"seed.txt": {"content": "seed"}}
    access = StateAccess(channels, {"messages": [], "files": seed})
    access.send([("files", {"a.txt": {"content": "one"}}), ("files", {"seed.txt": None})])
    assert access.read("files") == seed
    assert access.read("files", True) == {"a.txt": {"content": "one"}}
    assert access.read(["files", "todos"], True) == {"files": {"a.txt": {"content": "one"}}}
    assert access.read("todos") is None
    assert set(access.configurable()) == {CONFIG_KEY_READ, CONFIG_KEY_SEND}
    assert set(StateAccess(channels).configurable()) == {CONFIG_KEY_SEND}

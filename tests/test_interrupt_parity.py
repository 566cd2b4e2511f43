"""Interrupt parity: LangGraph's own ``interrupt()`` called in a custom ``before_model``
hook (twice: its answers come back in order) and in a tool (two calls of one step wait
at once), answered with ``Command(resume=...)`` on a thread, through LangChain's
``create_agent`` + ``InMemorySaver`` and through loopline on the same scripted replies
(twin servers): the same interrupts, the same ``get_state`` while each waits (values,
next, tasks), the same messages in the end and the same model requests. Loopline
embedded (every service in this process), and deployed with the services as processes,
stopped and started again between each interrupt and its resume."""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import pytest
from langchain.agents import create_agent as lc_create_agent
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, Interrupt

from loopline import create_agent
from loopline.testing.scripted import Reply, ScriptedOpenAIServer, ScriptedToolCall
from services.settings import Settings
from tests.interrupt_tooling import AskAround, AskBeforeModel, ConfirmModelCall, ask_human
from tests.support import EMBEDDED_PREFIX, ServiceProcesses, embedded_agent, unique_prefix

SCRIPTS: dict[str, list[Reply]] = {
    "confirm first": [Reply(content="Confirmed.")],
    "review me": [Reply(content="Draft answer.")],
    "plan a trip": [
        Reply(
            tool_calls=(
                ScriptedToolCall("ask_human", {"question": "where to?"}),
                ScriptedToolCall("ask_human", {"question": "when?"}),
            )
        ),
        Reply(content="Trip planned."),
    ],
}
PROMPT = "plan a trip"


def comparable(values: dict[str, Any]) -> dict[str, Any]:
    """State values without message ids (LangChain's are random)."""
    out = dict(values)
    out["messages"] = [
        (
            m.type,
            m.content,
            [(c["name"], c["args"], c["id"]) for c in getattr(m, "tool_calls", [])],
            getattr(m, "tool_call_id", None),
        )
        for m in values["messages"]
    ]
    return out


def as_text(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def waiting(snapshot: Any) -> dict[str, Any]:
    """What ``get_state`` shows of a run that waits (interrupt values in a stable order:
    a step's tool calls interrupt concurrently)."""
    return {
        "values": comparable(snapshot.values),
        "next": snapshot.next,
        "tasks": sorted((t.name, [as_text(i.value) for i in t.interrupts]) for t in snapshot.tasks),
        "interrupts": sorted(as_text(i.value) for i in snapshot.interrupts),
    }


def asked(result: dict[str, Any]) -> list[str]:
    interrupts = result["__interrupt__"]
    assert all(isinstance(i, Interrupt) and i.id for i in interrupts)
    return sorted(as_text(i.value) for i in interrupts)


Phase = Callable[[], AbstractContextManager[Any]]
"""What runs around each call of the conversation: nothing (LangChain, embedded), or
the deployment's services, started for the call and stopped after it."""


def conversation(agent: Any, thread: str, around: Phase) -> dict[str, Any]:
    """The conversation: the hook asks twice, then both tool calls wait; each answered
    with ``Command(resume=...)``. What each call returned and what ``get_state`` showed."""
    config = {"configurable": {"thread_id": thread}}
    seen: dict[str, Any] = {}
    with around():
        first = agent.invoke({"messages": [{"role": "user", "content": PROMPT}]}, config)
    seen["topic"] = (asked(first), waiting(agent.get_state(config)))
    with around():
        second = agent.invoke(Command(resume="mountains"), config)
    seen["tone"] = (asked(second), waiting(agent.get_state(config)))
    with around():
        third = agent.invoke(Command(resume="calm"), config)
    state = agent.get_state(config)
    seen["tools"] = (asked(third), waiting(state))
    assert sorted(i.id for i in state.interrupts) == sorted(i.id for i in third["__interrupt__"])
    with pytest.raises(RuntimeError, match="multiple pending interrupts"):
        agent.invoke(Command(resume="one answer for two"), config)  # refused before it goes
    answers = {i.id: f"answer to {i.value['question']}" for i in state.interrupts}
    with around():
        done = agent.invoke(Command(resume=answers), config)
    assert "__interrupt__" not in done
    final = agent.get_state(config)
    seen["done"] = (comparable({"messages": done["messages"]}), waiting(final))
    return seen


def langchain_agent(server: ScriptedOpenAIServer) -> Any:
    return lc_create_agent(
        ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="test"),  # type: ignore[arg-type]
        tools=[ask_human],
        middleware=[AskBeforeModel()],
        checkpointer=InMemorySaver(),
    )


def check_same(
    lc_seen: dict[str, Any],
    ll_seen: dict[str, Any],
    lc_server: ScriptedOpenAIServer,
    ll_server: ScriptedOpenAIServer,
) -> None:
    for phase in lc_seen:
        assert ll_seen[phase] == lc_seen[phase], phase
    # it exercised what it claims: the hook's two answers in order, both tool answers
    messages = lc_seen["done"][0]["messages"]
    assert ("human", "topic: mountains; tone: calm", [], None) in messages
    tool_texts = sorted(m[1] for m in messages if m[0] == "tool")
    assert tool_texts == [
        "the human says: answer to when?",
        "the human says: answer to where to?",
    ]
    assert lc_seen["tools"][1]["next"] == ("tools", "tools")
    assert lc_seen["topic"][1]["next"] == ("AskBeforeModel.before_model",)
    # every model request body, the same (the servers are this test's alone)
    lc_requests, ll_requests = lc_server.chat_requests(), ll_server.chat_requests()
    assert len(ll_requests) == len(lc_requests) == 2
    assert ll_requests == lc_requests


@contextmanager
def _recording(procs: ServiceProcesses, pids: list[set[int]]) -> Iterator[None]:
    with procs:
        pids.append(set(procs.pids()))
        yield


@pytest.fixture
def fresh_servers() -> Iterator[tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]]:
    """Twin servers of this test alone, so each side's requests are all this test's."""
    from loopline.testing.scripted import responder_by_prompt

    with (
        ScriptedOpenAIServer(responder=responder_by_prompt(SCRIPTS)) as lc_server,
        ScriptedOpenAIServer(responder=responder_by_prompt(SCRIPTS)) as ll_server,
    ):
        yield lc_server, ll_server


def test_interrupts_in_a_hook_and_a_tool_match_langchain_embedded(
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    fresh_servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
) -> None:
    lc_server, ll_server = fresh_servers
    lc_seen = conversation(langchain_agent(lc_server), "lc", nullcontext)
    agent = embedded_agent(
        redis_url, monkeypatch, ll_server, tools=[ask_human], middleware=[AskBeforeModel()]
    )
    thread = f"embedded-{uuid.uuid4().hex[:8]}"
    ll_seen = conversation(agent, thread, nullcontext)
    check_same(lc_seen, ll_seen, lc_server, ll_server)


def test_an_interrupt_in_wrap_model_call_matches_langchain_embedded(
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    fresh_servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
) -> None:
    """``interrupt()`` inside a ``wrap_model_call`` middleware (in the model service):
    the run waits at LangChain's ``model`` node, and resumed, the model call is made
    again with the middleware's ``interrupt()`` returning the answer."""
    lc_server, ll_server = fresh_servers
    lc_agent = lc_create_agent(
        ChatOpenAI(model="gpt-4o-mini", base_url=lc_server.url, api_key="test"),  # type: ignore[arg-type]
        middleware=[ConfirmModelCall()],
        checkpointer=InMemorySaver(),
    )
    ll_agent = embedded_agent(redis_url, monkeypatch, ll_server, middleware=[ConfirmModelCall()])
    seen = {}
    for name, agent in (("lc", lc_agent), ("ll", ll_agent)):
        config = {"configurable": {"thread_id": f"{name}-{uuid.uuid4().hex[:8]}"}}
        first = agent.invoke({"messages": [{"role": "user", "content": "confirm first"}]}, config)
        state = agent.get_state(config)
        done = agent.invoke(Command(resume="yes"), config)
        seen[name] = (asked(first), waiting(state), comparable({"messages": done["messages"]}))
    assert seen["ll"] == seen["lc"]
    assert seen["lc"][1]["next"] == ("model",)
    assert seen["lc"][2]["messages"][-1][1] == "Confirmed."
    lc_requests, ll_requests = lc_server.chat_requests(), ll_server.chat_requests()
    assert len(ll_requests) == len(lc_requests) == 1  # the interrupted call made none
    assert ll_requests == lc_requests
    assert "(confirmed: yes)" in str(ll_requests[0]["messages"])


def test_interrupts_in_before_agent_and_after_model_match_langchain_embedded(
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    fresh_servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
) -> None:
    """``interrupt()`` in a ``before_agent`` hook (before the first model call) and in an
    ``after_model`` hook (on the final answer): each waits at its node and its answer
    joins the conversation as LangChain's does."""
    lc_server, ll_server = fresh_servers
    lc_agent = lc_create_agent(
        ChatOpenAI(model="gpt-4o-mini", base_url=lc_server.url, api_key="test"),  # type: ignore[arg-type]
        middleware=[AskAround()],
        checkpointer=InMemorySaver(),
    )
    ll_agent = embedded_agent(redis_url, monkeypatch, ll_server, middleware=[AskAround()])
    seen = {}
    for name, agent in (("lc", lc_agent), ("ll", ll_agent)):
        config = {"configurable": {"thread_id": f"{name}-{uuid.uuid4().hex[:8]}"}}
        first = agent.invoke({"messages": [{"role": "user", "content": "review me"}]}, config)
        at_start = agent.get_state(config)
        second = agent.invoke(Command(resume="Ana"), config)
        at_review = agent.get_state(config)
        done = agent.invoke(Command(resume="fine"), config)
        seen[name] = (
            asked(first),
            waiting(at_start),
            asked(second),
            waiting(at_review),
            comparable({"messages": done["messages"]}),
            waiting(agent.get_state(config)),
        )
    assert seen["ll"] == seen["lc"]
    assert seen["lc"][1]["next"] == ("AskAround.before_agent",)
    assert seen["lc"][3]["next"] == ("AskAround.after_model",)
    assert [m[1] for m in seen["lc"][4]["messages"]] == [
        "review me",
        "I am Ana.",
        "Draft answer.",
        "reviewed: fine",
    ]
    assert ll_server.chat_requests() == lc_server.chat_requests()


def test_interrupts_survive_restarts_of_every_service_and_match_langchain(
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    fresh_servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
) -> None:
    lc_server, ll_server = fresh_servers
    lc_seen = conversation(langchain_agent(lc_server), "lc", nullcontext)
    prefix = unique_prefix()
    env = {"OPENAI_BASE_URL": ll_server.url, "OPENAI_API_KEY": "test"}
    monkeypatch.setenv("OPENAI_BASE_URL", ll_server.url)
    agent = create_agent(
        ChatOpenAI(model="gpt-4o-mini", api_key="test"),  # type: ignore[arg-type]  # the services' endpoint
        tools=[ask_human],
        middleware=[AskBeforeModel()],
        checkpointer=InMemorySaver(),
        redis_url=redis_url,
        settings=Settings(prefix=EMBEDDED_PREFIX),
    )
    pids: list[set[int]] = []

    def services() -> AbstractContextManager[Any]:
        """Every service for one call, new processes each time: nothing of a waiting run
        lives anywhere but in Redis between the interrupt and its resume."""
        return _recording(
            ServiceProcesses(redis_url, prefix, env=env, services=("loop", "model", "tools")),
            pids,
        )

    thread = f"deployed-{uuid.uuid4().hex[:8]}"
    ll_seen = conversation(agent, thread, services)
    assert len(pids) == 4 and all(not (a & b) for a, b in itertools.pairwise(pids))
    check_same(lc_seen, ll_seen, lc_server, ll_server)

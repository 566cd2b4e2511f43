"""LangChain's thread API on loopline, against LangChain's own with ``InMemorySaver``:
``Command(resume=...)`` answering a HumanInTheLoopMiddleware interrupt of a thread,
``get_state`` while it waits (``next``, ``tasks``, ``interrupts``) and after, the history
by run, and ``recursion_limit`` counted as LangGraph counts it. Services as processes,
the scripted model over HTTP."""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import pytest
import redis as syncredis
from langchain.agents import create_agent as lc_create_agent
from langchain.agents.middleware import (
    HumanInTheLoopMiddleware,
    ModelCallLimitMiddleware,
    TodoListMiddleware,
)
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import GraphRecursionError
from langgraph.types import Command, Interrupt

from contracts.events import TaskSubmitted, parse_event
from contracts.streams import DATA_FIELD, Names
from loopline import create_agent
from loopline.testing.scripted import Reply, ScriptedOpenAIServer, ScriptedToolCall
from services.settings import Settings
from services.telemetry import run_attributes
from tests import tooling
from tests.support import ServiceProcesses, unique_prefix

SCRIPTS: dict[str, list[Reply]] = {
    "gated": [
        Reply(tool_calls=(ScriptedToolCall("add", {"a": 2, "b": 3}),)),
        Reply(content="2 + 3 is 5."),
    ],
    "loop thrice": [
        Reply(tool_calls=(ScriptedToolCall("add", {"a": 1, "b": 1}),)),
        Reply(tool_calls=(ScriptedToolCall("add", {"a": 2, "b": 2}),)),
        Reply(content="looped"),
    ],
}


def respond(body: dict[str, Any]) -> Reply:
    messages = body["messages"]
    last_user = max(i for i, m in enumerate(messages) if m.get("role") == "user")
    prompt = str(messages[last_user]["content"])
    turn = sum(1 for m in messages[last_user:] if m.get("role") == "assistant")
    script = SCRIPTS.get(prompt, [Reply(content=f"answer to {prompt}")])
    return script[min(turn, len(script) - 1)]


RESPONDER = respond


@pytest.fixture(scope="module")
def stack(
    redis_url: str, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> Iterator[ServiceProcesses]:
    env = {"OPENAI_BASE_URL": servers[1].url, "OPENAI_API_KEY": "test"}
    services = ("loop", "model", "tools")
    with ServiceProcesses(redis_url, unique_prefix(), env=env, services=services) as procs:
        yield procs


def agents(
    stack: ServiceProcesses,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    middleware: list[Any],
) -> tuple[Any, Any]:
    """(LangChain's agent, loopline's), the same arguments, each with a checkpointer."""
    lc_server, _ = servers  # loopline's services call the other (their OPENAI_BASE_URL)
    lc = lc_create_agent(
        ChatOpenAI(model="gpt-4o-mini", base_url=lc_server.url, api_key="test"),  # type: ignore[arg-type]
        tools=[tooling.add],
        middleware=middleware,
        checkpointer=InMemorySaver(),
    )
    ll = create_agent(
        ChatOpenAI(model="gpt-4o-mini", api_key="test"),  # type: ignore[arg-type]  # the services' endpoint
        tools=[tooling.add],
        middleware=middleware,
        checkpointer=InMemorySaver(),
        redis_url=stack.redis_url,
        settings=Settings(prefix=stack.prefix),
    )
    return lc, ll


def shape(messages: list[Any]) -> list[tuple[Any, ...]]:
    return [
        (m.type, m.content, [(c["name"], c["args"]) for c in getattr(m, "tool_calls", [])])
        for m in messages
    ]


def quietly(call: Any, *args: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return call(*args)


def test_command_resume_answers_the_threads_interrupt_as_langchain_does(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    lc, ll = agents(stack, servers, [HumanInTheLoopMiddleware(interrupt_on={"add": True})])
    results = {}
    for name, agent in (("lc", lc), ("ll", ll)):
        config = {"configurable": {"thread_id": f"hitl-{uuid.uuid4().hex[:6]}"}}
        first = quietly(agent.invoke, {"messages": [{"role": "user", "content": "gated"}]}, config)
        waiting = agent.get_state(config)
        answer = Command(resume={"decisions": [{"type": "approve"}]})
        done = quietly(agent.invoke, answer, config)
        after = agent.get_state(config)
        results[name] = (first, waiting, done, after)

    (lc_first, lc_waiting, lc_done, lc_after) = results["lc"]
    (ll_first, ll_waiting, ll_done, ll_after) = results["ll"]
    # the interrupt, as LangGraph returns it
    assert all(isinstance(i, Interrupt) for i in ll_first["__interrupt__"])
    assert [i.value for i in ll_first["__interrupt__"]] == [
        i.value for i in lc_first["__interrupt__"]
    ]
    # while it waits: the same next node, one task with the same interrupt value
    assert ll_waiting.next == lc_waiting.next == ("HumanInTheLoopMiddleware.after_model",)
    assert [t.name for t in ll_waiting.tasks] == [t.name for t in lc_waiting.tasks]
    assert [i.value for i in ll_waiting.tasks[0].interrupts] == [
        i.value for i in lc_waiting.tasks[0].interrupts
    ]
    assert ll_waiting.interrupts and ll_waiting.interrupts[0].id == ll_first["__interrupt__"][0].id
    assert shape(ll_waiting.values["messages"]) == shape(lc_waiting.values["messages"])
    # resumed: the same messages, nothing waits any more
    assert shape(ll_done["messages"]) == shape(lc_done["messages"])
    assert ll_done["messages"][-1].content == "2 + 3 is 5."
    assert ll_after.next == lc_after.next == ()
    assert ll_after.tasks == () and ll_after.interrupts == ()
    assert shape(ll_after.values["messages"]) == shape(lc_after.values["messages"])
    assert ll_after.config["configurable"]["thread_id"].startswith("hitl-")


def test_resume_without_a_waiting_interrupt_is_refused(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    _, ll = agents(stack, servers, [])
    config = {"configurable": {"thread_id": f"idle-{uuid.uuid4().hex[:6]}"}}
    ll.invoke({"messages": "hello"}, config)
    with pytest.raises(ValueError, match="has no interrupt waiting"):
        ll.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config)


MIDDLEWARE_SETS = {
    "none": list,
    "todos": lambda: [TodoListMiddleware()],
    "model-call-limit": lambda: [ModelCallLimitMiddleware(run_limit=50)],
}


@pytest.mark.parametrize("middleware", list(MIDDLEWARE_SETS))
@pytest.mark.parametrize("limit", [2, 3, 4, 5, 6, 7, 8, 9, 10, 11])
def test_recursion_limit_counts_as_langgraph_counts(
    limit: int,
    middleware: str,
    stack: ServiceProcesses,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
) -> None:
    """Each hook is a superstep of LangGraph's (a node of the agent's graph)."""
    lc, ll = agents(stack, servers, MIDDLEWARE_SETS[middleware]())
    config: dict[str, Any] = {
        "configurable": {"thread_id": f"rec-{uuid.uuid4().hex[:6]}"},
        "recursion_limit": limit,
    }
    prompt = {"messages": [{"role": "user", "content": "loop thrice"}]}
    lc_error = ll_error = ""
    try:
        quietly(lc.invoke, prompt, config)
    except GraphRecursionError as exc:
        lc_error = str(exc)
    try:
        ll.invoke(prompt, config)
    except GraphRecursionError as exc:  # LangGraph's error, with its message
        ll_error = str(exc)
    assert ll_error == lc_error, f"recursion_limit={limit}"


def test_state_history_and_a_fork_as_langgraphs_deployed(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    """Deployed (every service its own process): a checkpoint per superstep, read back
    by id, and a run from an earlier one, as LangChain's agent has them."""
    sides = agents(stack, servers, [])
    config = {"configurable": {"thread_id": f"hist-{uuid.uuid4().hex[:6]}"}}
    got = []
    for agent in sides:
        for word in ("gated", "two"):
            agent.invoke({"messages": word}, config)
        history = list(agent.get_state_history(config))
        at = agent.get_state(history[5].config)
        forked = agent.invoke({"messages": "three"}, history[3].config)  # after "gated"
        after = list(agent.get_state_history(config))
        got.append(
            (
                [
                    (
                        s.next,
                        s.metadata["source"],
                        s.metadata["step"],
                        shape(s.values.get("messages", [])),
                    )
                    for s in history
                ],
                (at.next, shape(at.values["messages"])),
                shape(forked["messages"]),
                [(s.next, s.metadata["step"]) for s in after],
            )
        )
        assert all(n.parent_config == o.config for n, o in pairwise(history))
    assert got[1] == got[0]
    assert len(got[0][0]) == 8  # gated: input, start, model, tools, model; two: 3 more
    assert [m[1] for m in got[0][2]] == [
        "gated",
        "",
        "5",
        "2 + 3 is 5.",
        "three",
        "answer to three",
    ]


def test_run_name_tags_and_metadata_travel_with_the_run_to_its_trace(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    _, ll = agents(stack, servers, [])
    thread = f"cfg-{uuid.uuid4().hex[:6]}"
    config = {
        "configurable": {"thread_id": thread},
        "run_name": "support-bot",
        "tags": ["beta", "eu"],
        "metadata": {"user": "u7", "attempt": 2, "extra": {"a": 1}},
    }
    ll.invoke({"messages": "hello"}, config)
    r = syncredis.Redis.from_url(stack.redis_url)
    key = ll.thread_space.key(thread)  # the bus's key of the saver's thread
    (_, fields), *_ = r.xrange(Names(stack.prefix).thread_log(key))
    submitted = parse_event(fields[DATA_FIELD.encode()])
    assert isinstance(submitted, TaskSubmitted)
    assert submitted.thread_id == key and submitted.run_name == "support-bot"
    assert submitted.tags == ["beta", "eu"]
    assert submitted.metadata == {"user": "u7", "attempt": 2, "extra": {"a": 1}}
    assert run_attributes(submitted) == {
        "loopline.thread_id": key,
        "langchain.run_name": "support-bot",
        "langchain.tags": ["beta", "eu"],
        "langchain.metadata.user": "u7",
        "langchain.metadata.attempt": 2,
        "langchain.metadata.extra": '{"a": 1}',
    }

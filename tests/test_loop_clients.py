"""An agent called on event loops that end without telling it (each ``asyncio.run`` is a
loop of its own, as is each async test of a suite): LangChain's agent holds no connection
between calls; loopline's keeps a client per loop and must close it with the loop. A
connection left open warns ``ResourceWarning: unclosed Connection`` when it is collected,
which a suite running with warnings as errors (deepagents') fails in whatever test is
running then."""

from __future__ import annotations

import asyncio
import gc
import warnings
import weakref
from typing import Any

from langchain.agents import create_agent as lc_create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from loopline import create_agent

ROUNDS = 3


def answers() -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter([AIMessage(f"answer {i}") for i in range(ROUNDS)]))


def calls_on_fresh_loops(make: Any) -> tuple[list[str], weakref.ref[Any]]:
    """The answers of ``ROUNDS`` calls of one agent, each under its own ``asyncio.run``,
    and the agent, held by nothing but what it left behind."""
    agent = make(answers(), [])
    given = {"messages": [{"role": "user", "content": "hi"}]}
    said = [str(asyncio.run(agent.ainvoke(given))["messages"][-1].content) for _ in range(ROUNDS)]
    return said, weakref.ref(agent)


def run_on_fresh_loops(make: Any) -> tuple[list[str], list[str]]:
    """What ``calls_on_fresh_loops`` said, and the resource warnings raised until the
    agent and everything it left are collected (what earlier tests left is collected
    first, so its warnings are not counted as this agent's)."""
    gc.collect()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        said, agent = calls_on_fresh_loops(make)
        gc.collect()
        assert agent() is None  # collected: what it kept open is collected now
    leaks = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    return said, leaks


def test_a_loop_that_ends_closes_the_agents_client_as_langchain_holds_none(
    embedded: None,
) -> None:
    lc_said, lc_leaks = run_on_fresh_loops(lc_create_agent)
    said, leaks = run_on_fresh_loops(create_agent)
    assert lc_said == [f"answer {i}" for i in range(ROUNDS)]
    assert said == lc_said
    assert lc_leaks == []
    assert leaks == lc_leaks

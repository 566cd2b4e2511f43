"""Structured output in the checkpointer loopline writes: the agents of
``tests.structured_cases`` (a structured-output tool retried after a validation error,
beside another call, under hooks; the provider's JSON mode), each run by LangChain's
``create_agent`` and by loopline's on ``InMemorySaver``s: LangGraph lists from loopline's
saver the history it lists from its own (``next``, metadata, the messages, the
``structured_response``'s fields: loopline's thread keeps it as JSON, so LangGraph reads
a dict where LangChain's own run holds the schema's instance)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from langchain.agents import create_agent as lc_create_agent
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver

from loopline import create_agent
from loopline.testing.scripted import ScriptedOpenAIServer
from tests.structured_cases import CASES, SCRIPTS  # noqa: F401  (SCRIPTS: the servers' replies)

pytestmark = pytest.mark.fast


def outline(state: Any) -> tuple[Any, ...]:
    """``next``, metadata, the messages and the structured response as its fields
    (loopline's thread keeps it as JSON: LangChain's instance is a dict there)."""
    messages = [(m.type, m.content) for m in state.values.get("messages", [])]
    answer = state.values.get("structured_response")
    if hasattr(answer, "model_dump"):
        answer = answer.model_dump()
    elif dataclasses.is_dataclass(answer) and not isinstance(answer, type):
        answer = dataclasses.asdict(answer)
    return (state.next, state.metadata, messages, answer)


@pytest.mark.parametrize("case", ["tool_retry", "tool_and_more", "hooked", "provider"])
def test_structured_output_is_in_the_saver_as_langgraph_keeps_it(
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer], embedded: None, case: str
) -> None:
    given = CASES[case]
    savers = (InMemorySaver(), InMemorySaver())
    config: Any = {"configurable": {"thread_id": f"structured-{case}"}}
    agents = []
    for make, server, saver in zip((lc_create_agent, create_agent), servers, savers, strict=True):
        model = ChatOpenAI(model=given.model, base_url=server.url, api_key="test")
        agent: Any = make(model, given.tools, checkpointer=saver, **given.kwargs())
        agent.invoke({"messages": given.prompt}, config)
        agents.append(agent)
    model = ChatOpenAI(model=given.model, base_url=servers[0].url, api_key="test")
    reader: Any = lc_create_agent(model, given.tools, checkpointer=savers[1], **given.kwargs())

    theirs = [outline(s) for s in agents[0].get_state_history(config)]
    written = [outline(s) for s in reader.get_state_history(config)]
    assert written == theirs

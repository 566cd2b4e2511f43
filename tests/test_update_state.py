"""LangGraph's ``update_state`` on a thread between runs: the values go through the
state's reducers, ``get_state`` shows them, and the next run's model call is sent them.
The same thread through LangChain's ``create_agent`` and loopline's (embedded), each on
an ``InMemorySaver`` of its own, against twin scripted servers."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent as lc_create_agent
from langchain_core.messages import HumanMessage, RemoveMessage
from langgraph.checkpoint.memory import InMemorySaver

from contracts.replies import Reply
from loopline import create_agent
from loopline.testing.scripted import ScriptedOpenAIServer
from tests import tooling
from tests.error_cases import model_for
from tests.structured_cases import shape


def respond(body: dict[str, Any]) -> Reply:
    said = [str(m["content"]) for m in body["messages"] if m["role"] == "user"]
    return Reply(content=f"heard {' | '.join(said)}")


RESPONDER = respond


def pair(servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer], prompt: str) -> list[Any]:
    return [
        lc_create_agent(
            model_for(servers[0]), [tooling.add], system_prompt=prompt, checkpointer=InMemorySaver()
        ),
        create_agent(
            model_for(servers[1]), [tooling.add], system_prompt=prompt, checkpointer=InMemorySaver()
        ),
    ]


def sent(server: ScriptedOpenAIServer, prompt: str) -> list[Any]:
    return [r["messages"] for r in server.chat_requests() if r["messages"][0]["content"] == prompt]


def test_an_update_between_runs_is_shown_and_sent_as_langgraphs(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    config: Any = {"configurable": {"thread_id": "updated"}}
    agents = pair(servers, "Updated.")
    for agent in agents:
        agent.invoke({"messages": [{"role": "user", "content": "first"}]}, config)
        agent.update_state(config, {"messages": [HumanMessage("a note put in", id="note")]})
    lc_state, state = (a.get_state(config) for a in agents)
    assert shape(state.values["messages"]) == shape(lc_state.values["messages"])
    assert state.values["messages"][-1].content == "a note put in"
    for agent in agents:  # an update by id replaces the message, as add_messages does
        agent.update_state(config, {"messages": [HumanMessage("the note, edited", id="note")]})
        agent.invoke({"messages": [{"role": "user", "content": "second"}]}, config)
    lc_sent = sent(servers[0], "Updated.")
    assert "the note, edited" in str(lc_sent[-1]) and "a note put in" not in str(lc_sent[-1])
    assert sent(servers[1], "Updated.") == lc_sent


def test_a_removal_and_a_new_thread_as_langgraphs(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    config: Any = {"configurable": {"thread_id": "seeded"}}
    agents = pair(servers, "Seeded.")
    for agent in agents:  # a thread with no run yet starts from the update
        agent.update_state(
            config, {"messages": [HumanMessage("seed", id="s1"), HumanMessage("drop", id="s2")]}
        )
        agent.update_state(config, {"messages": [RemoveMessage(id="s2")]})
        agent.invoke({"messages": [{"role": "user", "content": "go"}]}, config)
    lc_sent = sent(servers[0], "Seeded.")
    assert "seed" in str(lc_sent[0]) and "drop" not in str(lc_sent[0])
    assert sent(servers[1], "Seeded.") == lc_sent


def test_as_node_naming_a_hook_and_task_id_are_refused_with_the_reason(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    _, ours = pair(servers, "Refused.")
    config = {"configurable": {"thread_id": "x"}}
    with pytest.raises(NotImplementedError, match="as_node"):
        ours.update_state(config, {"messages": []}, as_node="SomeMiddleware.before_model")
    with pytest.raises(NotImplementedError, match="task_id"):
        ours.update_state(config, {"messages": []}, as_node="tools", task_id="t1")

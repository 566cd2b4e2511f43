"""What ``invoke`` returns and raises, as LangChain's ``create_agent`` has it, the same
agent through LangChain (twin scripted servers) and through loopline:

- every message of the result has an id, as LangGraph's state gives one (a tool's result
  too);
- the result's keys are the output state's: no ``todos`` until ``write_todos`` wrote them, no
  ``task_id`` key (loopline's task id is the result's ``task_id`` attribute, and
  ``result["task_id"]`` still reads it), embedded and deployed;
- embedded (the services in the caller's process), a tool's exception reaches the caller
  as the very object the tool raised, its class defined inside a function and its
  attributes intact (deployed, the class is looked up by name: ``tests/test_error_parity``).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langchain.agents import create_agent as lc_create_agent
from langchain.agents.middleware import TodoListMiddleware
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from loopline import create_agent
from loopline.testing.scripted import Reply, ScriptedOpenAIServer, ScriptedToolCall
from services.settings import Settings
from tests import tooling
from tests.support import ServiceProcesses, embedded_agent

SCRIPTS: dict[str, list[Reply]] = {
    "add please": [
        Reply(tool_calls=(ScriptedToolCall("add", {"a": 1, "b": 2}),)),
        Reply(content="3"),
    ],
    "raise please": [Reply(tool_calls=(ScriptedToolCall("refuse_politely", {"why": "no"}),))],
}
TOOLS: list[Any] = [tooling.add]


def on_a_thread() -> Any:
    """The embedded agent keeps threads (an ``InMemorySaver``): a new one per run."""
    return {"configurable": {"thread_id": f"t-{uuid.uuid4().hex[:8]}"}}


def langchain_result(server: ScriptedOpenAIServer, prompt: str, **kwargs: Any) -> Any:
    model = ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="test")
    agent = lc_create_agent(model, **kwargs)
    return agent.invoke({"messages": [{"role": "user", "content": prompt}]})


def shown(result: Any) -> dict[str, Any]:
    """The result's keys and its messages' types, contents and whether each has an id
    (LangGraph's ``add_messages`` gives every message one; their values are random)."""
    return {
        "keys": sorted(result),
        "messages": [(m.type, m.content, bool(m.id)) for m in result["messages"]],
        "todos": result.get("todos"),
    }


@pytest.mark.parametrize("with_todos", [False, True])
def test_the_result_holds_the_output_states_keys_embedded(
    with_todos: bool,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
) -> None:
    lc_server, ll_server = servers
    middleware = [TodoListMiddleware()] if with_todos else []
    lc = langchain_result(lc_server, "add please", tools=TOOLS, middleware=middleware)
    agent = embedded_agent(redis_url, monkeypatch, ll_server, tools=TOOLS, middleware=middleware)
    ours = agent.invoke({"messages": [{"role": "user", "content": "add please"}]}, on_a_thread())
    assert shown(ours) == shown(lc)
    assert "todos" not in ours and "task_id" not in ours  # the model wrote none
    assert ours["task_id"] == ours.task_id and len(ours.task_id) == 32


def test_the_result_holds_the_output_states_keys_deployed(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    lc_server, _ = servers
    lc = langchain_result(lc_server, "add please", tools=TOOLS)
    agent = create_agent(
        "gpt-4o-mini",
        ["tests.tooling:add"],
        settings=Settings(redis_url=stack.redis_url, prefix=stack.prefix),
    )
    ours = agent.invoke({"messages": [{"role": "user", "content": "add please"}]})
    assert shown(ours) == shown(lc) and sorted(ours) == ["messages"]
    assert len(ours["task_id"]) == 32


def test_a_tools_own_exception_object_reaches_the_caller_embedded(
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
) -> None:
    class Refusal(Exception):  # defined here: no module holds it
        def __init__(self, why: str, *, code: int) -> None:
            super().__init__(why)
            self.code = code

    raised: list[Refusal] = []

    @tool
    def refuse_politely(why: str) -> str:
        """Refuse, with a reason."""
        raised.append(Refusal(f"refused: {why}", code=451))
        raise raised[-1]

    lc_server, ll_server = servers
    with pytest.raises(Refusal) as lc:
        langchain_result(lc_server, "raise please", tools=[refuse_politely])
    agent = embedded_agent(redis_url, monkeypatch, ll_server, tools=[refuse_politely])
    with pytest.raises(Refusal) as ours:
        agent.invoke({"messages": [{"role": "user", "content": "raise please"}]}, on_a_thread())
    assert ours.value is raised[-1] and lc.value is raised[0]
    assert (
        (str(ours.value), ours.value.code) == (str(lc.value), lc.value.code) == ("refused: no", 451)
    )

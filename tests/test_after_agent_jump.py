"""An ``after_agent`` hook that jumps back to the model (``jump_to="model"``, declared in
``can_jump_to``) sends the agent round again, as LangChain's graph routes after_agent to
the loop's entry: a reviewing middleware gets its revision. The same agent and scripted
replies through LangChain's ``create_agent`` and through loopline (embedded): the same
model requests, the same messages."""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent as lc_create_agent
from langchain.agents.middleware import AgentMiddleware, hook_config
from langchain_core.messages import HumanMessage

from contracts.replies import Reply
from loopline import create_agent
from loopline.testing.scripted import ScriptedOpenAIServer
from tests import tooling
from tests.error_cases import model_for
from tests.structured_cases import shape

REVISE = "Revise it: say it in one word."


def respond(body: dict[str, Any]) -> Reply:
    asked = [m for m in body["messages"] if m["role"] == "user"]
    return Reply(content=f"answer {len(asked)}")


RESPONDER = respond


class Reviewer(AgentMiddleware):  # type: ignore[type-arg]
    """Sends the first answer back for a revision, once."""

    @hook_config(can_jump_to=["model"])
    def after_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        if any(getattr(m, "content", None) == REVISE for m in state["messages"]):
            return None
        return {"messages": [HumanMessage(REVISE)], "jump_to": "model"}


class Unhooked(AgentMiddleware):  # type: ignore[type-arg]
    """Asks for the jump without declaring it: LangGraph's edge does not exist, the
    run ends (and the message the hook added stays)."""

    def after_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        if any(getattr(m, "content", None) == REVISE for m in state["messages"]):
            return None
        return {"messages": [HumanMessage(REVISE)], "jump_to": "model"}


def run_both(
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer], middleware: type, prompt: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    given = {"messages": [{"role": "user", "content": prompt}]}
    lc = lc_create_agent(model_for(servers[0]), [tooling.add], middleware=[middleware()])
    ours = create_agent(model_for(servers[1]), [tooling.add], middleware=[middleware()])
    return lc.invoke(given), ours.invoke(given)


def sent(server: ScriptedOpenAIServer, prompt: str) -> list[Any]:
    return [r["messages"] for r in server.chat_requests() if r["messages"][0]["content"] == prompt]


def test_an_after_agent_jump_to_the_model_runs_the_model_again(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    lc, ours = run_both(servers, Reviewer, "review me")
    assert len(sent(servers[0], "review me")) == 2  # the revision was asked
    assert sent(servers[1], "review me") == sent(servers[0], "review me")
    assert shape(ours["messages"]) == shape(lc["messages"])
    assert ours["messages"][-1].content == lc["messages"][-1].content == "answer 2"


def test_an_undeclared_jump_ends_the_run_as_langchains(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    lc, ours = run_both(servers, Unhooked, "no edge")
    assert len(sent(servers[0], "no edge")) == 1
    assert sent(servers[1], "no edge") == sent(servers[0], "no edge")
    assert shape(ours["messages"]) == shape(lc["messages"])

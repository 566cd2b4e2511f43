"""A hook and a tool that call LangGraph's own ``interrupt()``, importable by path so
the loop and tools services of a deployment run them (``tests.interrupt_tooling:...``),
and the same objects for LangChain's agent in the parity tests."""

from __future__ import annotations

from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.types import interrupt


class AskBeforeModel(AgentMiddleware):
    """Before a run's first model call (the last message is the user's), asks twice: the
    two answers come back, in order, on resume, and become a message for the model."""

    def before_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        last = state["messages"][-1]
        if last.type != "human" or str(last.content).startswith("topic:"):
            return None
        topic = interrupt({"ask": "topic?", "prompt": state["messages"][0].content})
        tone = interrupt("tone?")
        return {"messages": [HumanMessage(content=f"topic: {topic}; tone: {tone}")]}


def ask_human(question: str) -> str:
    """Ask the human a question and return the answer."""
    answer = interrupt({"question": question})
    return f"the human says: {answer}"


class ConfirmModelCall(AgentMiddleware):
    """Around a run's first model call, asks whether to go on; the answer reaches the
    model as a last message of its request (not of the state)."""

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        if request.messages[-1].type != "human":
            return handler(request)
        answer = interrupt({"confirm": "call the model?"})
        extra = HumanMessage(content=f"(confirmed: {answer})")
        return handler(request.override(messages=[*request.messages, extra]))


class AskAround(AgentMiddleware):
    """Asks who is there before the run (before_agent), and for a review of the model's
    final answer (after_model), which joins the conversation."""

    def before_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        who = interrupt("who is there?")
        return {"messages": [HumanMessage(content=f"I am {who}.")]}

    def after_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        last = state["messages"][-1]
        if last.tool_calls:
            return None
        review = interrupt({"review": last.content})
        return {"messages": [AIMessage(content=f"reviewed: {review}")]}


CALLS: list[str] = []
"""Each run of ``CountedBeforeModel``'s hook, in this process."""


class CountedBeforeModel(AgentMiddleware):
    """A before_model hook with a side effect (it records each run) and an update."""

    def before_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        CALLS.append(str(state["messages"][-1].content))
        if len(state["messages"]) > 1:
            return None
        return {"messages": [HumanMessage(content="(counted)")]}

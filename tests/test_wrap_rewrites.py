"""``wrap_model_call`` middleware that change the state's earlier messages from the model
call, as LangChain 1.5's create_agent applies them: its model node returns its own write
(the reply; with ``REMOVE_ALL_MESSAGES`` and the request's list first when a layer changed
that list in place) and each layer's ``Command``; LangGraph folds them with
``add_messages`` (by id a message replaces, ``RemoveMessage`` deletes,
``REMOVE_ALL_MESSAGES`` starts over). The same middleware and scripted model run through
LangChain's ``create_agent`` and loopline's (embedded, every service in this process): the
same model requests, result, stream items and errors; on a thread, the next run starts
from the rewritten history."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from langchain.agents import create_agent as lc_create_agent
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver

from loopline import create_agent
from services.settings import Settings
from tests import test_wrap_commands as commands
from tests import tooling
from tests.custom_models import InvokeOnlyModel
from tests.rewrite_middleware import ChangesRequestList, RewritesState
from tests.support import EMBEDDED_PREFIX
from tests.test_custom_models import script
from tests.test_streaming import message_shape

pytestmark = pytest.mark.fast

OWN_ID = re.compile(r"^summary-\d+$")  # the ids the middleware give their own messages

AGENTS: dict[str, Callable[[], list[Any]]] = {
    "replace": lambda: [RewritesState("replace")],
    "remove": lambda: [RewritesState("remove")],
    "start_over": lambda: [RewritesState("start_over")],
    "tag_human": lambda: [RewritesState("tag_human")],
    "append": lambda: [ChangesRequestList("append")],
    "pop_first": lambda: [ChangesRequestList("pop_first")],
    "after_override": lambda: [ChangesRequestList("after_override")],
    # an outer layer appends in place, the inner one replaces beside the reply
    "both": lambda: [ChangesRequestList("append"), RewritesState("replace")],
}
MODES: list[Any] = [None, "messages", "values", ["updates", "messages", "values"]]
"""None: ``invoke``."""


def shape(data: Any) -> Any:
    """Messages by what they say (ids are random on both sides, but the middleware's)."""
    if isinstance(data, list | tuple):
        return [shape(d) for d in data]
    if isinstance(data, dict):
        return {k: shape(v) for k, v in data.items()}
    if hasattr(data, "type") and hasattr(data, "content"):
        out = message_shape(data)
        out["class"] = type(data).__name__
        out["kwargs"] = dict(getattr(data, "additional_kwargs", {}) or {})
        if data.id and OWN_ID.match(data.id):
            out["id"] = data.id
        return out
    return data


def run(make: Callable[..., Any], middleware: list[Any], mode: Any, **kwargs: Any) -> Any:
    """``test_wrap_commands``' run, with this module's shapes (own ids and kwargs kept)."""
    return commands.run(make, middleware, mode, shape, **kwargs)


def ours(middleware: list[Any], mode: Any, **kwargs: Any) -> Any:
    return run(create_agent, middleware, mode, settings=Settings(prefix=EMBEDDED_PREFIX), **kwargs)


@pytest.mark.parametrize("mode", MODES, ids=str)
@pytest.mark.parametrize("agent", list(AGENTS))
def test_rewrites_reach_the_state_as_langchain(agent: str, mode: Any, embedded: None) -> None:
    lc = run(lc_create_agent, AGENTS[agent](), mode)
    assert ours(AGENTS[agent](), mode) == lc


def contents(result: Any) -> list[Any]:
    return [m["content"] for m in result["out"]["messages"]]


def test_the_cases_show_what_they_claim(embedded: None) -> None:
    """Read from LangChain's side: each case changes what it says it changes."""
    replaced = run(lc_create_agent, AGENTS["replace"](), None)
    assert contents(replaced) == ["add 1 and 2", "adding them", "[clipped]", "the sum is 3"]
    assert replaced["sent"][1][-1]["content"] == "3"  # the model saw the result unclipped
    removed = run(lc_create_agent, AGENTS["remove"](), None)
    assert contents(removed) == ["add 1 and 2", "the sum is 3"]
    over = run(lc_create_agent, AGENTS["start_over"](), None)
    assert contents(over) == ["summary: 1 + 2 was added", "add 1 and 2", "the sum is 3"]
    tagged = run(lc_create_agent, AGENTS["tag_human"](), None)
    assert tagged["out"]["messages"][0]["kwargs"] == {"tagged_at": 1}
    appended = run(lc_create_agent, AGENTS["append"](), None)
    assert contents(appended) == [
        "add 1 and 2",
        "remember to be nice!",
        "adding them",
        "3",
        "remember to be nice!",
        "the sum is 3",
    ]
    popped = run(lc_create_agent, AGENTS["pop_first"](), None)
    assert contents(popped) == ["adding them", "3", "the sum is 3"]
    overridden = run(lc_create_agent, AGENTS["after_override"](), None)
    assert contents(overridden) == ["add 1 and 2", "adding them", "3", "the sum is 3"]
    assert overridden["sent"][0][-1]["content"] == "only in this request"


def test_a_thread_goes_on_from_the_rewritten_history(embedded: None) -> None:
    """The next run on the thread starts from the messages the commands left, and its
    model request shows them, as a LangGraph thread does."""

    def twice(make: Callable[..., Any], **kwargs: Any) -> Any:
        model = InvokeOnlyModel(script=[*script(), AIMessage("again")])
        agent = make(
            model,
            [tooling.add],
            middleware=[RewritesState("replace")],
            checkpointer=InMemorySaver(),
            **kwargs,
        )
        config = {"configurable": {"thread_id": "rewritten"}}
        agent.invoke({"messages": [("user", "add 1 and 2")]}, config)
        second = agent.invoke({"messages": [("user", "thanks")]}, config)
        return {"messages": shape(second["messages"]), "sent": model.sent}

    lc = twice(lc_create_agent)
    assert [m["content"] for m in lc["sent"][2]][2] == "[clipped]"
    assert twice(create_agent, settings=Settings(prefix=EMBEDDED_PREFIX)) == lc


def test_what_loopline_does_not_route_on_is_refused(embedded: None) -> None:
    """A command that removes the model's reply leaves LangChain's graph routing on what
    is left (here no AI message: the run ends); loopline routes on the reply, so it
    refuses with the reason rather than routing elsewhere."""
    lc = run(lc_create_agent, [RewritesState("drop_reply")], None)
    assert contents(lc) == ["summary: 1 + 2 was added"]
    refused = ours([RewritesState("drop_reply")], None)["out"]
    assert refused["raised"][0] == "NotImplementedError"
    assert "removed the model's reply" in refused["raised"][1]


def test_a_run_waiting_for_a_human_shows_the_rewritten_state(embedded: None) -> None:
    """An after_model interrupt on a reply whose commands rewrote the history: the
    thread's state while it waits, and the result once approved, as LangGraph's."""
    from langchain.agents.middleware import HumanInTheLoopMiddleware
    from langgraph.types import Command

    def waits(make: Callable[..., Any], **kwargs: Any) -> Any:
        model = InvokeOnlyModel(
            script=[
                *script()[:1],
                AIMessage(
                    "again", tool_calls=[{"name": "add", "args": {"a": 3, "b": 4}, "id": "c2"}]
                ),
                AIMessage("the sum is 7"),
            ]
        )
        middleware = [HumanInTheLoopMiddleware({"add": True}), RewritesState("replace")]
        agent = make(
            model, [tooling.add], middleware=middleware, checkpointer=InMemorySaver(), **kwargs
        )
        config = {"configurable": {"thread_id": "waits"}}
        inputs = {"messages": [("user", "add 1 and 2")]}
        agent.invoke(inputs, config)  # the first call waits for a decision
        first = shape(agent.get_state(config).values["messages"])
        agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config)
        waiting = shape(agent.get_state(config).values["messages"])
        done = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config)
        return {"first": first, "waiting": waiting, "done": shape(done["messages"])}

    lc = waits(lc_create_agent)
    assert [m["content"] for m in lc["waiting"]][2] == "[clipped]"
    assert waits(create_agent, settings=Settings(prefix=EMBEDDED_PREFIX)) == lc

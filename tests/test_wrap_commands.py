"""``wrap_model_call`` commands that add messages beside the reply
(``ExtendedModelResponse(command=Command(update={"messages": [...], ...}))``), as
LangChain 1.5's create_agent applies them: the model node returns its own update, then
each layer's command (inner layer first); LangGraph folds the messages after the reply
with ``add_messages`` and the keys through their reducers, so the next model call, the
after_model hooks and the result see them; a tool message among them answers the
reply's call, which then does not run. The same middleware and scripted model run
through LangChain's ``create_agent`` and loopline's (embedded, every service in this
process): the same model requests, result, stream items and errors."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from langchain.agents import create_agent as lc_create_agent

from loopline import create_agent
from services.settings import Settings
from tests import tooling
from tests.command_middleware import AddsMessages, GivesStructured, SeesAfterModel
from tests.custom_models import InvokeOnlyModel
from tests.support import EMBEDDED_PREFIX
from tests.test_custom_models import script
from tests.test_streaming import message_shape

pytestmark = pytest.mark.fast

COMMAND_ID = re.compile(r"^[a-z]+-\d+$")  # what AddsMessages names its messages

AGENTS: dict[str, Callable[[], list[Any]]] = {
    # two layers each adding a message, the outer one setting a key too
    "layers": lambda: [AddsMessages("outer", note=True), AddsMessages("inner")],
    # the after_model hook sees what the commands added
    "after_model": lambda: [SeesAfterModel(), AddsMessages("only", note=True)],
    # a tool message answering the reply's call: the tool does not run
    "answers": lambda: [AddsMessages("mw", kind="answer")],
}
MODES: list[Any] = [None, "updates", "messages", "values", ["updates", "messages", "values"]]
"""None: ``invoke``."""


def shape(data: Any) -> Any:
    """Messages by what they say (ids are random on both sides, but the commands')."""
    if isinstance(data, list | tuple):
        return [shape(d) for d in data]
    if isinstance(data, dict):
        return {k: shape(v) for k, v in data.items()}
    if hasattr(data, "type") and hasattr(data, "content"):
        out = message_shape(data)
        out["class"] = type(data).__name__
        if data.id and COMMAND_ID.match(data.id):  # the commands' own ids are kept
            out["id"] = data.id
        return out
    return data


def item_shape(mode: str, data: Any, shape: Callable[[Any], Any] = shape) -> Any:
    if mode == "messages":
        message, meta = data
        return shape(message), {k: meta.get(k) for k in ("langgraph_node", "langgraph_step")}
    return shape(data)


def run(
    make: Callable[..., Any],
    middleware: list[Any],
    mode: Any,
    shape: Callable[[Any], Any] = shape,
    **kwargs: Any,
) -> Any:
    """The run's result or streamed items (each through ``shape``), or what it raised,
    and what the model was sent."""
    model = InvokeOnlyModel(script=script())
    agent = make(model, [tooling.add], middleware=middleware, **kwargs)
    inputs = {"messages": [("user", "add 1 and 2")]}
    try:
        if mode is None:
            result = agent.invoke(inputs)
            out: Any = {k: shape(v) for k, v in result.items() if k not in ("task_id", "todos")}
        else:
            items = list(agent.stream(inputs, stream_mode=mode))
            if isinstance(mode, list):
                out = [(m, item_shape(m, data, shape)) for m, data in items]
            else:
                out = [item_shape(mode, item, shape) for item in items]
    except Exception as exc:
        out = {"raised": [type(exc).__name__, str(exc)]}
    return {"out": out, "sent": model.sent}


def ours(middleware: list[Any], mode: Any) -> Any:
    return run(create_agent, middleware, mode, settings=Settings(prefix=EMBEDDED_PREFIX))


@pytest.mark.parametrize("mode", MODES, ids=str)
@pytest.mark.parametrize("agent", list(AGENTS))
def test_commands_add_messages_as_langchain(agent: str, mode: Any, embedded: None) -> None:
    lc = run(lc_create_agent, AGENTS[agent](), mode)
    assert ours(AGENTS[agent](), mode) == lc


def test_the_cases_show_what_they_claim(embedded: None) -> None:
    """Read from LangChain's side."""
    layers = run(lc_create_agent, AGENTS["layers"](), None)
    contents = [m["content"] for m in layers["out"]["messages"]]
    assert contents == [
        "add 1 and 2",
        "adding them",
        "inner saw 1",
        "outer saw 1",
        "3",
        "the sum is 3",
        "inner saw 5",
        "outer saw 5",
    ]
    assert layers["out"]["notes"] == "outer at 5"
    # the second request carries what the commands added after the first reply
    assert [m["content"] for m in layers["sent"][1]][2:4] == ["inner saw 1", "outer saw 1"]
    hooked = run(lc_create_agent, AGENTS["after_model"](), None)["out"]
    assert hooked["seen"] == ["human", "ai", "human", "tool", "ai", "human"]
    answered = run(lc_create_agent, AGENTS["answers"](), None)
    assert [m["content"] for m in answered["out"]["messages"]][2] == "mw answered"
    assert "3" not in [m["content"] for m in answered["out"]["messages"]]  # add never ran
    updates = run(lc_create_agent, AGENTS["layers"](), "updates")["out"]
    assert isinstance(updates[0]["model"], list)  # one dict per write: messages twice


def test_what_loopline_does_not_apply_is_refused(embedded: None) -> None:
    """An AI message added beside the reply (LangChain routes on the last AI message,
    loopline on the reply): refused with the reason, where LangChain runs on."""
    lc = run(lc_create_agent, [AddsMessages("x", kind="ai")], None)
    assert "raised" not in lc["out"]
    refused = ours([AddsMessages("x", kind="ai")], None)["out"]
    assert refused["raised"][0] == "NotImplementedError"
    assert "adding an AI message" in refused["raised"][1]


def test_two_writes_of_a_plain_key_raise_as_langchain(embedded: None) -> None:
    both = [AddsMessages("outer", note=True), AddsMessages("inner", note=True)]
    lc = run(lc_create_agent, both, None)
    assert lc["out"]["raised"][0] == "InvalidUpdateError"
    assert ours([AddsMessages("outer", note=True), AddsMessages("inner", note=True)], None) == lc


def test_a_structured_response_the_chain_gives_is_kept_as_langchain(embedded: None) -> None:
    """No ``response_format``: the chain's ``structured_response`` is written to the
    state (the result holds it); a command writing the key as well is a second write of
    a plain key in one step: LangGraph's InvalidUpdateError."""
    lc = run(lc_create_agent, [GivesStructured()], None)
    assert lc["out"]["structured_response"] == {"from": "model"}
    assert ours([GivesStructured()], None) == lc
    clash = run(lc_create_agent, [GivesStructured(conflict=True)], None)
    assert clash["out"]["raised"][0] == "InvalidUpdateError"
    assert ours([GivesStructured(conflict=True)], None) == clash

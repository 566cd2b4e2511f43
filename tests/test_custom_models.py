"""Custom chat models as LangChain runs them: the same model class, with the same script,
through LangChain's ``create_agent`` and loopline's (embedded: every service in this
process). LangChain's model node calls ``invoke``; under ``stream_mode="messages"`` a
streaming callback is attached and ``BaseChatModel._should_stream`` decides: a model that
implements ``_generate`` alone (or has streaming disabled) is invoked and its whole
``AIMessage`` is streamed once it ends; one whose ``_stream`` yields nothing fails with
LangChain's error. Compared: what the model was sent, the result, the stream's items and
the errors raised."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from langchain.agents import create_agent as lc_create_agent
from langchain.agents.middleware import ModelRetryMiddleware
from langchain_core.messages import AIMessage

from loopline import create_agent
from services.settings import Settings
from tests import tooling
from tests.custom_models import InvokeOnlyModel, SilentStreamModel, WordStreamModel
from tests.support import EMBEDDED_PREFIX
from tests.test_streaming import message_shape

pytestmark = pytest.mark.fast


def script() -> list[AIMessage]:
    return [
        AIMessage(
            content="adding them",
            tool_calls=[{"name": "add", "args": {"a": 1, "b": 2}, "id": "c1"}],
        ),
        AIMessage(content="the sum is 3"),
    ]


MODELS: dict[str, Callable[[], InvokeOnlyModel]] = {
    "invoke_only": lambda: InvokeOnlyModel(script=script()),
    "streams": lambda: WordStreamModel(script=script()),
    "streaming_disabled": lambda: WordStreamModel(script=script(), disable_streaming=True),
    "silent_stream": lambda: SilentStreamModel(script=script()),
}
WRAPPED = {"invoke_only", "silent_stream"}
"""Also run inside a wrap_model_call chain (the model call is the middleware's handler)."""
CASES = [(name, False) for name in MODELS] + [(name, True) for name in sorted(WRAPPED)]
MODES: list[Any] = [None, "messages", ["updates", "messages"], "values"]
"""None: ``invoke``."""


def item_shape(mode: str, data: Any) -> Any:
    if mode == "messages":
        message, meta = data
        keys = ("langgraph_node", "langgraph_step", "ls_provider", "ls_model_type")
        return type(message).__name__, message_shape(message), {k: meta.get(k) for k in keys}
    if mode == "updates":
        return {n: [message_shape(m) for m in u["messages"]] for n, u in data.items()}
    return [message_shape(m) for m in data["messages"]]


def run(make: Callable[..., Any], model: InvokeOnlyModel, mode: Any, **kwargs: Any) -> Any:
    """What one run gives: the result's messages or the stream's items, or the error."""
    agent = make(model, [tooling.add], **kwargs)
    inputs = {"messages": [("user", "add 1 and 2")]}
    try:
        if mode is None:
            result = agent.invoke(inputs)
            return [message_shape(m) for m in result["messages"]]
        items = list(agent.stream(inputs, stream_mode=mode))
    except Exception as exc:
        return {"raised": [type(exc).__name__, str(exc)]}
    if isinstance(mode, list):
        return [(m, item_shape(m, data)) for m, data in items]
    return [item_shape(mode, item) for item in items]


@pytest.mark.parametrize("mode", MODES, ids=str)
@pytest.mark.parametrize(("name", "wrapped"), CASES, ids=str)
def test_custom_model_runs_as_under_langchain(
    name: str, wrapped: bool, mode: Any, embedded: None
) -> None:
    def middleware() -> list[Any]:
        return [ModelRetryMiddleware(max_retries=0)] if wrapped else []

    lc_model, ll_model = MODELS[name](), MODELS[name]()
    lc = run(lc_create_agent, lc_model, mode, middleware=middleware())
    ours = run(
        create_agent,
        ll_model,
        mode,
        middleware=middleware(),
        settings=Settings(prefix=EMBEDDED_PREFIX),
    )
    assert ours == lc
    assert ll_model.sent == lc_model.sent


def test_the_cases_show_what_they_claim(embedded: None) -> None:
    """Read from LangChain's side: a model that does not stream yields its whole message
    to ``messages``; a streaming one its words; a silent stream raises."""
    whole = run(lc_create_agent, MODELS["invoke_only"](), "messages")
    assert [kind for kind, _, _ in whole] == ["AIMessage", "ToolMessage", "AIMessage"]
    disabled = run(lc_create_agent, MODELS["streaming_disabled"](), "messages")
    assert [kind for kind, _, _ in disabled] == ["AIMessage", "ToolMessage", "AIMessage"]
    words = run(lc_create_agent, MODELS["streams"](), "messages")
    assert [kind for kind, _, _ in words].count("AIMessageChunk") >= 6
    silent = MODELS["silent_stream"]()
    assert run(lc_create_agent, silent, "messages") == {
        "raised": ["ValueError", "No generations found in stream."]
    }
    assert len(silent.sent) == 1
    invoked = run(lc_create_agent, MODELS["silent_stream"](), None)
    assert invoked[-1]["content"] == "the sum is 3"

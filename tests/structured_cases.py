"""The structured-output cases the parity tests run through LangChain's ``create_agent``
and loopline's: the same arguments, the same scripted replies (picked by prompt).
Shared by the deployed tests and the embedded script they start."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Union

from langchain.agents.middleware import ModelCallLimitMiddleware, ModelRetryMiddleware
from langchain.agents.structured_output import ProviderStrategy, ToolStrategy
from langchain_core.messages import BaseMessage, SystemMessage

from contracts.replies import Reply, ScriptedToolCall
from tests import tooling
from tests.answers import CONTACT_SCHEMA, Forecast, Verdict, Weather


def call(name: str, args: dict[str, Any]) -> Reply:
    return Reply(tool_calls=(ScriptedToolCall(name, args),))


@dataclass
class Case:
    """One agent: ``create_agent`` keyword arguments (made fresh per run) and its replies."""

    prompt: str
    kwargs: Callable[[], dict[str, Any]]
    turns: list[Reply]
    tools: list[Any] = field(default_factory=lambda: [tooling.add])
    model: str = "gpt-4o-mini"


CASES = {
    # a validation error answered with LangChain's error template, then a valid answer;
    # name= on the AI messages (it reaches the second request)
    "tool_retry": Case(
        "weather retry",
        lambda: {"response_format": ToolStrategy(Weather), "name": "forecaster"},
        [
            call("Weather", {"city": "Oslo", "celsius": 99}),
            call("Weather", {"city": "Oslo", "celsius": 4}),
        ],
    ),
    # two structured calls in one reply: each answered with the error, then one call
    "tool_twice": Case(
        "weather twice",
        lambda: {"response_format": ToolStrategy(Weather, handle_errors="One answer, please.")},
        [
            Reply(
                tool_calls=(
                    ScriptedToolCall("Weather", {"city": "Oslo", "celsius": 4}),
                    ScriptedToolCall("Weather", {"city": "Rome", "celsius": 20}),
                )
            ),
            call("Weather", {"city": "Rome", "celsius": 20}),
        ],
    ),
    # the structured answer beside another call: that call runs, then the agent ends
    "tool_and_more": Case(
        "weather and more",
        lambda: {"response_format": ToolStrategy(Weather)},
        [
            Reply(
                tool_calls=(
                    ScriptedToolCall("add", {"a": 1, "b": 2}),
                    ScriptedToolCall("Weather", {"city": "Oslo", "celsius": 4}),
                )
            )
        ],
    ),
    # the same inside a wrap_model_call chain (the model call is the middleware's handler)
    "wrapped": Case(
        "weather wrapped",
        lambda: {
            "response_format": ToolStrategy(Weather),
            "middleware": [ModelRetryMiddleware(max_retries=1)],
        },
        [
            call("Weather", {"city": "Oslo", "celsius": 99}),
            call("Weather", {"city": "Oslo", "celsius": 4}),
        ],
    ),
    # and with loop-stage hooks (before_model/after_model: the task's state is kept)
    "hooked": Case(
        "weather hooked",
        lambda: {
            "response_format": ToolStrategy(Weather),
            "middleware": [ModelCallLimitMiddleware(run_limit=5)],
        },
        [
            call("Weather", {"city": "Oslo", "celsius": 99}),
            call("Weather", {"city": "Oslo", "celsius": 4}),
        ],
    ),
    # a JSON schema dict, a tool call first, the answer's own tool message
    "tool_dict": Case(
        "contact dict",
        lambda: {
            "response_format": ToolStrategy(CONTACT_SCHEMA, tool_message_content="Saved."),
            "system_prompt": "You file contacts.",
        },
        [call("add", {"a": 1, "b": 2}), call("Contact", {"name": "Ada", "email": "ada@x.org"})],
    ),
    # the provider's JSON-schema mode, a dataclass, a SystemMessage of content blocks
    "provider": Case(
        "forecast provider",
        lambda: {
            "response_format": ProviderStrategy(Forecast),
            "system_prompt": SystemMessage(content=[{"type": "text", "text": "Forecast."}]),
        },
        [call("add", {"a": 2, "b": 3}), Reply(content='{"day": "mon", "rain": true}')],
    ),
    # a bare TypedDict: LangChain's auto choice for gpt-4o-mini
    "auto": Case(
        "verdict auto",
        lambda: {"response_format": Verdict},
        [Reply(content='{"answer": true, "reason": "it fits"}')],
    ),
    # the same for a model LangChain finds no JSON-schema mode for: its ToolStrategy
    "auto_tool": Case(
        "verdict fallback",
        lambda: {"response_format": Verdict},
        [call("Verdict", {"answer": False, "reason": "no"})],
        model="gpt-4",
    ),
    # a union of models: one structured-output tool per member (LangChain's ToolStrategy),
    # the answer an instance of the member called
    "tool_union": Case(
        "union tool",
        lambda: {"response_format": ToolStrategy(Weather | Forecast)},
        [call("add", {"a": 1, "b": 2}), call("Forecast", {"day": "mon", "rain": True})],
    ),
    # typing.Union with a TypedDict: a member's invalid arguments retried, another member
    "tool_union_retry": Case(
        "union retry",
        lambda: {"response_format": ToolStrategy(Union[Weather, Verdict])},  # type: ignore[arg-type]  # noqa: UP007
        [
            call("Weather", {"city": "Oslo", "celsius": 99}),
            call("Verdict", {"answer": True, "reason": "it fits"}),
        ],
    ),
    # a bare union for a model LangChain finds no JSON-schema mode for: the tool fallback
    "auto_union": Case(
        "union fallback",
        lambda: {"response_format": Weather | Forecast},
        [call("Weather", {"city": "Oslo", "celsius": 3})],
        model="gpt-4",
    ),
}

EMBEDDED_ONLY = {
    # handle_errors as a function: code, so only in-process (deployed refuses it)
    "tool_errors_function": Case(
        "weather function",
        lambda: {
            "response_format": ToolStrategy(
                Weather, handle_errors=lambda e: f"Try again ({type(e).__name__})."
            )
        },
        [
            call("Weather", {"city": "Oslo", "celsius": 99}),
            call("Weather", {"city": "Oslo", "celsius": 4}),
        ],
    ),
}

FAILING = Case(
    "weather strict",
    lambda: {"response_format": ToolStrategy(Weather, handle_errors=False)},
    [call("Weather", {"city": "Oslo", "celsius": 99})],
)
"""handle_errors=False: LangChain raises StructuredOutputValidationError."""

UNION_PROVIDER = Case(
    "union provider",
    lambda: {"response_format": Weather | Forecast},
    [Reply(content='{"day": "mon", "rain": true}')],
)
"""A bare union for a model with a JSON-schema mode: LangChain's ProviderStrategy takes
no union, and the call raises its ValueError."""

SCRIPTS = {
    case.prompt: case.turns
    for case in [*CASES.values(), *EMBEDDED_ONLY.values(), FAILING, UNION_PROVIDER]
}


def shape(messages: list[BaseMessage]) -> list[dict[str, Any]]:
    """What a result's messages say, without the ids each side makes up (message ids;
    tool call ids are the scripted server's, the same on both sides)."""
    out = []
    for m in messages:
        item: dict[str, Any] = {"type": m.type, "content": m.content, "name": m.name}
        for key in ("tool_calls", "tool_call_id", "status"):
            if hasattr(m, key):
                item[key] = getattr(m, key)
        if "tool_calls" in item:
            item["tool_calls"] = [
                {"name": c["name"], "args": c["args"], "id": c["id"]} for c in item["tool_calls"]
            ]
        out.append(item)
    return json.loads(json.dumps(out, default=str))

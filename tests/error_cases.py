"""The error cases the parity tests run through LangChain's ``create_agent`` and
loopline's (deployed and embedded): the same arguments, the same scripted replies (picked
by prompt), the same model requests, and the same exception (type and message) or the
same messages. Shared by the deployed tests and the embedded script they start."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from langchain.agents import create_agent as lc_create_agent
from langchain.agents.middleware import (
    ModelCallLimitMiddleware,
    TodoListMiddleware,
    ToolErrorMiddleware,
)
from langchain_openai import ChatOpenAI

from contracts.replies import Reply, ScriptedToolCall
from loopline.testing.scripted import ScriptedOpenAIServer, first_user_text, responder_by_prompt
from tests import tooling
from tests.structured_cases import shape

MODEL_DOWN = "model down"
"""Prompts starting with this get a server error from the scripted model (HTTP 500)."""


def calls(*pairs: tuple[str, dict[str, Any]]) -> Reply:
    return Reply(tool_calls=tuple(ScriptedToolCall(name, args) for name, args in pairs))


def on_value_error(exc: Exception, request: Any) -> str | None:
    """ToolErrorMiddleware's handler: ValueErrors become a message, the rest propagate."""
    if isinstance(exc, ValueError):
        return f"{request.tool_call['name']} failed: {type(exc).__name__}: {exc}"
    return None


@dataclass
class Case:
    """One agent: ``create_agent`` keyword arguments (made fresh per run), its replies."""

    prompt: str
    turns: list[Reply]
    kwargs: Callable[[], dict[str, Any]] = dict
    tools: list[Any] = field(default_factory=lambda: [tooling.add, tooling.explode, tooling.spend])
    config: dict[str, Any] = field(default_factory=dict)
    """The run's ``config`` (``recursion_limit``)."""


ALWAYS_ADDING = [calls(("add", {"a": 1, "b": 1}))] * 12
"""A model that never stops calling a tool (within the recursion limits below)."""


CASES = {
    # a tool's exception propagates out of invoke (ValueError('bad x=1'))
    "tool_raises": Case("errors tool raises", [calls(("explode", {"x": 1}))]),
    # a user's exception class whose constructor takes more than a message
    "user_exception": Case("errors user class", [calls(("spend", {"amount": 3}))]),
    # parallel calls: one succeeds, one raises; the run fails with the raise
    "parallel": Case("errors parallel", [calls(("add", {"a": 1, "b": 2}), ("explode", {"x": 2}))]),
    # invalid arguments are LangChain's ToolInvocationError: a message, the run goes on
    "invalid_args": Case(
        "errors invalid args",
        [calls(("add", {"a": "x", "b": 1})), Reply(content="fixed")],
    ),
    # a call of a tool the agent does not have: ToolNode's message, the run goes on
    "unknown_tool": Case("errors unknown tool", [calls(("nope", {})), Reply(content="sorry")]),
    # the model's own error (HTTP 500 from the provider): langchain-openai's
    # OpenAIAPIError (an openai.InternalServerError)
    "model_down": Case(f"{MODEL_DOWN} please", [Reply(content="never")]),
    # a hook's exception (ModelCallLimitMiddleware with exit_behavior="error")
    "hook_raises": Case(
        "errors hook raises",
        [calls(("add", {"a": 1, "b": 1})), Reply(content="never")],
        lambda: {"middleware": [ModelCallLimitMiddleware(run_limit=1, exit_behavior="error")]},
    ),
}

# The recursion limit (LangGraph's supersteps: the model, the tools, each hook a node)
# reached: LangGraph's GraphRecursionError after the requests LangChain would make.
CASES.update(
    {
        # the limit falls on the model call: its tools do not run
        "recursion_limit": Case(
            "errors recursion odd", ALWAYS_ADDING, config={"recursion_limit": 5}
        ),
        # ... on the tools: they run, the next model call does not
        "recursion_limit_even": Case(
            "errors recursion even", ALWAYS_ADDING, config={"recursion_limit": 6}
        ),
        # hooks are supersteps too (TodoListMiddleware's after_model node, the model call
        # limit's before_model and after_model nodes)
        "recursion_limit_hooks": Case(
            "errors recursion hooks",
            ALWAYS_ADDING,
            lambda: {"middleware": [TodoListMiddleware(), ModelCallLimitMiddleware(run_limit=50)]},
            config={"recursion_limit": 11},
        ),
        # the final answer comes, but the run needed as many supersteps as the limit
        "recursion_limit_answer": Case(
            "errors recursion answer",
            [calls(("add", {"a": 1, "b": 2})), Reply(content="three")],
            config={"recursion_limit": 3},
        ),
        # the answer fits: the run completes
        "recursion_limit_fits": Case(
            "errors recursion fits",
            [calls(("add", {"a": 1, "b": 2})), Reply(content="three")],
            config={"recursion_limit": 4},
        ),
    }
)

EMBEDDED_ONLY = {
    # ToolErrorMiddleware turns the ValueError into a message (its handler is code)
    "tool_error_middleware": Case(
        "errors handled by middleware",
        [calls(("explode", {"x": 3})), Reply(content="handled")],
        lambda: {"middleware": [ToolErrorMiddleware(on_value_error)]},
    ),
    # ... and lets what its handler returns None for propagate
    "tool_error_middleware_passes": Case(
        "errors passed by middleware",
        [calls(("spend", {"amount": 11}))],
        lambda: {"middleware": [ToolErrorMiddleware(on_value_error)]},
    ),
}

LOOPLINE_LIMIT = Case("errors loopline step limit", ALWAYS_ADDING)
"""No recursion limit: loopline's own step limit (``max_steps``) ends the run."""

SCRIPTS = {
    case.prompt: case.turns for case in [*CASES.values(), *EMBEDDED_ONLY.values(), LOOPLINE_LIMIT]
}


def respond(body: dict[str, Any]) -> Reply:
    """By prompt; a ``MODEL_DOWN`` prompt makes the server answer 500."""
    if first_user_text(body).startswith(MODEL_DOWN):
        raise RuntimeError("the model is down")
    return responder_by_prompt(SCRIPTS)(body)


def error_servers() -> tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]:
    """Twin servers (LangChain's, loopline's) answering by ``respond`` (not started)."""
    return ScriptedOpenAIServer(responder=respond), ScriptedOpenAIServer(responder=respond)


def model_for(server: ScriptedOpenAIServer) -> ChatOpenAI:
    """No client-side retries: one request per model call, on both sides."""
    return ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="test", max_retries=0)


def outcome(run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """What a run ended with, comparable across the two sides: the exception's class,
    module and message, or the messages."""
    try:
        result = run()
    except Exception as exc:
        cls = type(exc)
        return {"raised": [cls.__module__, cls.__qualname__, str(exc)]}
    return {"messages": shape(result["messages"])}


def run_langchain(case: Case, server: ScriptedOpenAIServer) -> dict[str, Any]:
    agent = lc_create_agent(model_for(server), tools=case.tools, **case.kwargs())

    def invoke() -> dict[str, Any]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result: dict[str, Any] = agent.invoke(
                {"messages": [("user", case.prompt)]}, case.config or None
            )
        return result

    return outcome(invoke)


def requests_for(server: ScriptedOpenAIServer, prompt: str) -> list[dict[str, Any]]:
    """The requests of one case (its prompt is the first user message)."""
    return [r for r in server.chat_requests() if first_user_text(r) == prompt]

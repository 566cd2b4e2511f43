"""Errors as LangChain's ``create_agent`` has them: a tool's exception propagates out of
``invoke`` (only invalid arguments become a message to the model; ``ToolErrorMiddleware``
turns errors into messages), the model's own error fails the run, and ``invoke`` raises
an exception of the original class with the original message. The same agents run
through LangChain and through loopline (deployed: every service its own process;
embedded: one process), against twin scripted servers: the same model requests, the
same exception or the same messages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph.errors import GraphRecursionError

from contracts.agent import ModelSpec
from loopline import create_agent
from loopline.testing.scripted import ScriptedOpenAIServer
from services.settings import Settings
from tests.error_cases import (
    CASES,
    EMBEDDED_ONLY,
    LOOPLINE_LIMIT,
    Case,
    error_servers,
    outcome,
    requests_for,
    run_langchain,
)
from tests.support import REPO_ROOT, ServiceProcesses


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]]:
    lc_server, ll_server = error_servers()
    with lc_server, ll_server:
        yield lc_server, ll_server


def deployed(case: Case, stack: ServiceProcesses) -> Any:
    model = ModelSpec(name="gpt-4o-mini", params={"max_retries": 0})
    settings = Settings(prefix=stack.prefix)
    return create_agent(
        model, case.tools, redis_url=stack.redis_url, settings=settings, **case.kwargs()
    )


@pytest.mark.parametrize("name", list(CASES))
def test_deployed_raises_or_answers_as_langchain(
    name: str, stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    case = CASES[name]
    lc_server, ll_server = servers
    lc = run_langchain(case, lc_server)
    agent = deployed(case, stack)
    ours = outcome(lambda: agent.invoke({"messages": case.prompt}, case.config or None))
    assert ours == lc
    lc_requests = requests_for(lc_server, case.prompt)
    assert lc_requests and requests_for(ll_server, case.prompt) == lc_requests


def test_loopline_step_limit_raises_langgraph_recursion_error_with_its_own_message(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    """Without ``recursion_limit`` the limit is loopline's ``max_steps`` (LangGraph's
    default, 10007 supersteps, is not loopline's): the same class, loopline's message."""
    case = LOOPLINE_LIMIT
    model = ModelSpec(name="gpt-4o-mini", params={"max_retries": 0})
    settings = Settings(prefix=stack.prefix)
    agent = create_agent(
        model, case.tools, redis_url=stack.redis_url, settings=settings, max_steps=2
    )
    with pytest.raises(GraphRecursionError) as raised:
        agent.invoke({"messages": case.prompt})
    assert str(raised.value).startswith("step limit reached: the agent made 2 model calls")
    assert len(requests_for(servers[1], case.prompt)) == 2
    # stream raises as invoke does; a recursion limit takes over from max_steps
    with pytest.raises(GraphRecursionError) as streamed:
        list(agent.stream({"messages": case.prompt}, {"recursion_limit": 7}, stream_mode="updates"))
    assert str(streamed.value).startswith("Recursion limit of 7 reached without hitting")
    assert len(requests_for(servers[1], case.prompt)) == 2 + 4


def test_the_cases_show_what_they_claim(
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
) -> None:
    """Read from LangChain's side (module order: after the runs above)."""
    lc_server, _ = servers
    expected = {
        "tool_raises": ["builtins", "ValueError", "bad x=1"],
        "user_exception": ["tests.tooling", "QuotaExceeded", "quota exceeded: 3 of 10"],
        "parallel": ["builtins", "ValueError", "bad x=2"],
    }
    for name, raised in expected.items():
        assert run_langchain(CASES[name], lc_server) == {"raised": raised}
    down = run_langchain(CASES["model_down"], lc_server)["raised"]
    # langchain-openai's subclass of openai.InternalServerError, with the response's text
    assert down == [
        "langchain_openai.chat_models.base",
        "OpenAIAPIError",
        "Error code: 500 - responder failed: RuntimeError('the model is down')",
    ]
    limit = run_langchain(CASES["hook_raises"], lc_server)["raised"]
    assert limit[1] == "ModelCallLimitExceededError"
    invalid = run_langchain(CASES["invalid_args"], lc_server)["messages"]
    assert invalid[2]["status"] == "error" and "Please fix the error" in invalid[2]["content"]
    # the recursion limit: LangGraph's error after as many model calls as fit
    made = {"recursion_limit": 3, "recursion_limit_even": 3, "recursion_limit_hooks": 2}
    made["recursion_limit_answer"] = 2
    for name, requests in made.items():
        case = CASES[name]
        before = len(requests_for(lc_server, case.prompt))
        raised = run_langchain(case, lc_server)["raised"]
        assert raised[:2] == ["langgraph.errors", "GraphRecursionError"], name
        limit = case.config["recursion_limit"]
        assert raised[2].startswith(f"Recursion limit of {limit} reached without hitting")
        assert len(requests_for(lc_server, case.prompt)) - before == requests, name
    assert "messages" in run_langchain(CASES["recursion_limit_fits"], lc_server)


EMBEDDED = r"""
import json, sys
from loopline import create_agent
from tests.error_cases import CASES, EMBEDDED_ONLY, error_servers, model_for, outcome
from tests.error_cases import requests_for, run_langchain

out = {}
lc_server, ll_server = error_servers()
with lc_server, ll_server:
    for name in sys.argv[1:]:
        case = {**CASES, **EMBEDDED_ONLY}[name]
        lc = run_langchain(case, lc_server)
        agent = create_agent(model_for(ll_server), case.tools, **case.kwargs())
        ours = outcome(lambda: agent.invoke({"messages": case.prompt}, case.config or None))
        out[name] = {
            "lc": {"outcome": lc, "requests": requests_for(lc_server, case.prompt)},
            "ll": {"outcome": ours, "requests": requests_for(ll_server, case.prompt)},
        }
print(json.dumps(out))
"""


def test_embedded_raises_or_answers_as_langchain() -> None:
    """No REDIS_URL: the embedded runtime, tools, middleware and model in-process."""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "OPENAI_BASE_URL")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")])
    names = [*CASES, *EMBEDDED_ONLY]
    done = subprocess.run(
        [sys.executable, "-c", EMBEDDED, *names],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads(done.stdout.strip().splitlines()[-1])
    for name in names:
        lc, ll = runs[name]["lc"], runs[name]["ll"]
        assert lc["requests"], name
        assert ll == lc, name
    handled = runs["tool_error_middleware"]["ll"]["outcome"]["messages"]
    assert handled[2]["content"] == "explode failed: ValueError: bad x=3"
    assert runs["tool_error_middleware_passes"]["ll"]["outcome"]["raised"][1] == "QuotaExceeded"

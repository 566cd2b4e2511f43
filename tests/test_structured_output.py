"""``response_format`` parity with LangChain: the same agent through LangChain's
``create_agent`` and through loopline (deployed: every service its own process; embedded:
everything in one process), against twin scripted servers, must send the model the same
request bodies and give the same ``structured_response`` and messages. Also ``name=`` on
the AI messages and a ``SystemMessage`` as ``system_prompt``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any, Union

import pytest
from langchain.agents import create_agent as lc_create_agent
from langchain.agents.structured_output import StructuredOutputValidationError, ToolStrategy
from langchain_core.messages import SystemMessage
from langchain_openai import ChatOpenAI

from contracts import HumanMessage
from contracts.agent import AgentSpec, ModelSpec
from loopline import create_agent
from loopline.agentfile import agent_from_dict
from loopline.client import Client
from loopline.testing.scripted import ScriptedOpenAIServer
from services.errors import ConfigurationError
from services.settings import Settings
from services.spec import local
from services.spec.validation import check_deployable
from tests import structured_cases
from tests.answers import Forecast, Weather
from tests.structured_cases import CASES, EMBEDDED_ONLY, FAILING, UNION_PROVIDER, Case, shape
from tests.support import EMBEDDED_PREFIX, REPO_ROOT, ServiceProcesses, run_cli

SCRIPTS = structured_cases.SCRIPTS  # what the twin servers (conftest's) answer


def run_langchain(case: Case, server: ScriptedOpenAIServer) -> dict[str, Any]:
    """Sync, as a user would call it (the async client of ChatOpenAI is cached for the
    event loop that made it, and each test has its own)."""
    model = ChatOpenAI(model=case.model, base_url=server.url, api_key="test")
    agent = lc_create_agent(model, tools=case.tools, **case.kwargs())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result: dict[str, Any] = agent.invoke({"messages": [("user", case.prompt)]})
    return result


def requests_for(server: ScriptedOpenAIServer, prompt: str) -> list[dict[str, Any]]:
    """The requests of one case (its prompt is the first user message)."""
    return [
        r
        for r in server.chat_requests()
        if any(m.get("role") == "user" and m.get("content") == prompt for m in r["messages"])
    ]


def deployed(case: Case, stack: ServiceProcesses) -> Any:
    settings = Settings(prefix=stack.prefix)
    return create_agent(
        case.model, case.tools, redis_url=stack.redis_url, settings=settings, **case.kwargs()
    )


@pytest.mark.parametrize("name", list(CASES))
async def test_deployed_matches_langchain(
    name: str, stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    case = CASES[name]
    lc_server, ll_server = servers
    lc = run_langchain(case, lc_server)
    ours = await deployed(case, stack).ainvoke({"messages": case.prompt})

    lc_requests = requests_for(lc_server, case.prompt)
    ll_requests = requests_for(ll_server, case.prompt)
    assert len(lc_requests) == len(case.turns) == len(ll_requests)
    for step, (lc_req, ll_req) in enumerate(zip(lc_requests, ll_requests, strict=True), 1):
        assert ll_req == lc_req, f"step {step}: request bodies differ"
    assert ours["structured_response"] == lc["structured_response"]
    assert type(ours["structured_response"]) is type(lc["structured_response"])
    assert shape(ours["messages"]) == shape(lc["messages"])


async def test_the_scenarios_exercise_what_they_claim(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    """Read from loopline's side of the cases above (run first, module order)."""
    _, ll_server = servers
    retry = requests_for(ll_server, CASES["tool_retry"].prompt)
    assert retry[0]["tool_choice"] == "required"
    assert "Please fix your mistakes." in retry[1]["messages"][-1]["content"]
    assert retry[1]["messages"][1]["name"] == "forecaster"
    provider = requests_for(ll_server, CASES["provider"].prompt)
    assert provider[0]["response_format"]["type"] == "json_schema"
    assert all(t["function"].get("strict") for t in provider[0]["tools"])
    assert provider[0]["messages"][0] == {
        "role": "system",
        "content": [{"type": "text", "text": "Forecast."}],
    }
    assert "response_format" in requests_for(ll_server, CASES["auto"].prompt)[0]
    fallback = requests_for(ll_server, CASES["auto_tool"].prompt)[0]
    assert "response_format" not in fallback and fallback["tool_choice"] == "required"


async def test_agent_file_names_the_schema_by_import_path(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    case = CASES["tool_retry"]
    lc = run_langchain(case, servers[0])
    spec, _ = agent_from_dict(
        {
            "model": case.model,
            "tools": ["tests.tooling:add"],
            "response_format": {"strategy": "tool", "schema": "tests.answers:Weather"},
        }
    )
    async with Client(stack.redis_url, stack.prefix) as client:
        task_id = await client.submit(spec, [HumanMessage(content=case.prompt)])
        done = await client.wait(task_id)
        given, value = await client.structured_response(task_id)
    assert given and Weather.model_validate(value) == lc["structured_response"]
    assert done.structured_response == value  # the completion event carries it too


async def test_no_retry_fails_as_langchain_raises(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    with pytest.raises(StructuredOutputValidationError) as raised:
        run_langchain(FAILING, servers[0])
    with pytest.raises(StructuredOutputValidationError) as failed:
        await deployed(FAILING, stack).ainvoke({"messages": FAILING.prompt})
    assert str(failed.value) == str(raised.value)


async def test_a_bare_union_for_a_json_schema_model_raises_as_langchain(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    case = UNION_PROVIDER
    with pytest.raises(ValueError, match="Unsupported schema type") as raised:
        run_langchain(case, servers[0])
    with pytest.raises(ValueError) as failed:
        await deployed(case, stack).ainvoke({"messages": case.prompt})
    assert str(failed.value) == str(raised.value)
    assert requests_for(servers[1], case.prompt) == requests_for(servers[0], case.prompt) == []


def test_embedded_keeps_the_union_object_as_given(
    embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    """In-process the union object itself is the schema: typing.Union's error names its
    own class, as LangChain's does."""
    case = Case(UNION_PROVIDER.prompt, lambda: {"response_format": Union[Weather, Forecast]}, [])  # noqa: UP007
    with pytest.raises(ValueError, match="_UnionGenericAlias") as raised:
        run_langchain(case, servers[0])
    model = ChatOpenAI(model=case.model, base_url=servers[1].url, api_key="test")
    agent = create_agent(model, [], settings=Settings(prefix=EMBEDDED_PREFIX), **case.kwargs())
    with pytest.raises(ValueError) as failed:
        agent.invoke({"messages": case.prompt})
    assert str(failed.value) == str(raised.value)


async def test_an_agent_file_names_a_union_by_its_members(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    case = CASES["tool_union"]
    lc = run_langchain(case, servers[0])
    spec, _ = agent_from_dict(
        {
            "model": case.model,
            "tools": ["tests.tooling:add"],
            "response_format": {
                "strategy": "tool",
                "schema": ["tests.answers:Weather", "tests.answers:Forecast"],
            },
        }
    )
    async with Client(stack.redis_url, stack.prefix) as client:
        task_id = await client.submit(spec, [HumanMessage(content=case.prompt)])
        await client.wait(task_id)
        given, value = await client.structured_response(task_id)
    assert given and Forecast(**value) == lc["structured_response"]
    lc_requests = requests_for(servers[0], case.prompt)
    assert requests_for(servers[1], case.prompt)[-len(lc_requests) :] == lc_requests


def test_a_schema_outside_the_allow_list_is_refused(
    stack: ServiceProcesses, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigurationError, match="'json' is not allowed"):
        agent_from_dict({"model": "gpt-4o-mini", "response_format": "json:JSONDecoder"})
    monkeypatch.setenv("LOOPLINE_ALLOWED_MODULES", "benchmarks")
    with pytest.raises(TypeError, match=r"module 'tests\.answers' is not allowed"):
        create_agent("gpt-4o-mini", [], response_format=Forecast, redis_url=stack.redis_url)


def test_the_command_line_prints_the_structured_response(
    stack: ServiceProcesses,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", servers[1].url)  # where the services call
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    agent = tmp_path / "verdict.yaml"
    agent.write_text("model: gpt-4o-mini\nresponse_format: tests.answers:Verdict\n")
    prompt = f"{CASES['auto'].prompt} from the command line"
    done = run_cli(stack, "run", prompt, "--agent", str(agent), "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["status"] == "completed"
    assert out["structured_response"] == {"answer": True, "reason": "it fits"}


def test_what_cannot_travel_is_refused_in_one_line(redis_url: str) -> None:
    def make(response_format: Any) -> Any:
        return create_agent("gpt-4o-mini", [], response_format=response_format, redis_url=redis_url)

    with pytest.raises(TypeError, match="handle_errors"):
        make(ToolStrategy(Weather, handle_errors=ValueError))
    with pytest.raises(TypeError, match="handle_errors"):
        make(EMBEDDED_ONLY["tool_errors_function"].kwargs()["response_format"])
    with pytest.raises(TypeError, match="a union of them"):
        make(list[Weather])
    local_ref = local.register_instance(Weather)  # how embedded agents name it
    spec = AgentSpec(model=ModelSpec(name="gpt-4o-mini"), response_format={"schema": local_ref})
    with pytest.raises(ConfigurationError, match="in-process object"):
        check_deployable(spec)
    with pytest.raises(ConfigurationError, match=r"must look like package\.module:Class"):
        agent_from_dict({"model": "gpt-4o-mini", "response_format": "Weather"})


def test_a_plain_system_message_is_the_same_agent_as_its_text(redis_url: str) -> None:
    def make(system_prompt: Any) -> Any:
        return create_agent("gpt-4o-mini", [], system_prompt=system_prompt, redis_url=redis_url)

    plain = make(SystemMessage(content="Be brief."))
    text = make("Be brief.")
    assert plain.spec == text.spec and plain.spec.system_message is None
    named = make(SystemMessage("Hi.", name="rules"))
    assert named.spec.system_message is not None and named.spec.system_message.name == "rules"


EMBEDDED = r"""
import asyncio, json, sys, warnings
warnings.simplefilter("ignore")
from langchain_openai import ChatOpenAI
from loopline import create_agent
from loopline.testing.harness import twin_servers
from tests.structured_cases import CASES, EMBEDDED_ONLY, SCRIPTS, shape
from tests.test_structured_output import requests_for, run_langchain

out = {}
with twin_servers(SCRIPTS) as (lc_server, ll_server):
    for name in sys.argv[1:]:
        case = {**CASES, **EMBEDDED_ONLY}[name]
        lc = run_langchain(case, lc_server)
        model = ChatOpenAI(model=case.model, base_url=ll_server.url, api_key="test")
        ours = create_agent(model, case.tools, **case.kwargs()).invoke({"messages": case.prompt})
        out[name] = {
            side: {
                "requests": requests_for(server, case.prompt),
                "messages": shape(result["messages"]),
                "structured": repr(result["structured_response"]),
                "type": type(result["structured_response"]).__name__,
            }
            for side, server, result in (("lc", lc_server, lc), ("ll", ll_server, ours))
        }
print(json.dumps(out))
"""


def test_embedded_matches_langchain() -> None:
    """No REDIS_URL: the embedded runtime, tools and model in-process."""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "OPENAI_BASE_URL")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")])
    cases = {**CASES, **EMBEDDED_ONLY}
    names = [
        "tool_retry",
        "tool_twice",
        "tool_and_more",
        "wrapped",
        "provider",
        "auto",
        "tool_errors_function",
        "tool_union",
        "tool_union_retry",
        "auto_union",
    ]
    done = subprocess.run(
        [sys.executable, "-c", EMBEDDED, *names],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads(done.stdout.strip().splitlines()[-1])
    for name in names:
        lc, ll = runs[name]["lc"], runs[name]["ll"]
        assert len(lc["requests"]) == len(cases[name].turns), name
        assert ll == lc, name
    retried = runs["tool_errors_function"]["ll"]["requests"][1]["messages"][-1]
    assert retried["content"] == "Try again (StructuredOutputValidationError)."

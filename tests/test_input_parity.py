"""Input as LangChain's ``create_agent`` takes it: an AI message in the input whose tool
calls were malformed (``invalid_tool_calls``) gets LangChain's error tool message in the
model's request (the state keeps the messages as given), and an empty input (``{"messages":
[]}`` or ``{}``) is a run whose model call gets no messages. The same input through
LangChain and through loopline (deployed and embedded), against twin scripted servers:
the same requests and the same result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from typing import Any

import pytest
from langchain.agents import create_agent as lc_create_agent
from langchain_core.messages import AIMessage, HumanMessage

from contracts.agent import ModelSpec
from contracts.replies import Reply
from loopline import create_agent
from loopline.testing.scripted import ScriptedOpenAIServer, first_user_text
from services.settings import Settings
from tests import tooling
from tests.error_cases import model_for
from tests.structured_cases import shape
from tests.support import REPO_ROOT, ServiceProcesses

MALFORMED = {"type": "invalid_tool_call", "id": "call_bad", "name": "add", "args": "{a: 1"}


def inputs() -> dict[str, dict[str, Any]]:
    """Made fresh per run (LangChain's state may hold on to the objects)."""
    return {
        "invalid_calls": {
            "messages": [
                HumanMessage("history add one and two"),
                AIMessage(content="", invalid_tool_calls=[MALFORMED]),
                HumanMessage("please try again"),
            ]
        },
        "empty": {"messages": []},
        "no_messages_key": {},
    }


def respond(body: dict[str, Any]) -> Reply:
    text = first_user_text(body)
    return Reply(content=f"answered {text!r} after {len(body['messages'])} messages")


RESPONDER = respond


def run_langchain(server: ScriptedOpenAIServer, name: str) -> dict[str, Any]:
    agent = lc_create_agent(model_for(server), [tooling.add], system_prompt=f"Case {name}.")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result: dict[str, Any] = agent.invoke(inputs()[name])
    return result


def requests_for(server: ScriptedOpenAIServer, name: str) -> list[dict[str, Any]]:
    return [r for r in server.chat_requests() if r["messages"][0]["content"] == f"Case {name}."]


@pytest.mark.parametrize("name", list(inputs()))
def test_deployed_takes_the_input_as_langchain(
    name: str, stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    lc = run_langchain(servers[0], name)
    agent = create_agent(
        ModelSpec(name="gpt-4o-mini", params={"max_retries": 0}),
        [tooling.add],
        system_prompt=f"Case {name}.",
        redis_url=stack.redis_url,
        settings=Settings(prefix=stack.prefix),
    )
    ours = agent.invoke(inputs()[name])
    assert shape(ours["messages"]) == shape(lc["messages"])
    lc_requests = requests_for(servers[0], name)
    assert len(lc_requests) == 1 and requests_for(servers[1], name) == lc_requests


def test_the_cases_show_what_they_claim(
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
) -> None:
    (invalid,) = requests_for(servers[0], "invalid_calls")
    answer = invalid["messages"][3]
    assert answer["role"] == "tool" and answer["tool_call_id"] == "call_bad"
    assert "arguments were malformed or truncated" in answer["content"]
    (empty,) = requests_for(servers[0], "empty")
    assert empty["messages"] == [{"role": "system", "content": "Case empty."}]


EMBEDDED = r"""
import json
from loopline import create_agent
from tests import tooling
from tests.error_cases import model_for
from tests.structured_cases import shape
from tests.test_input_parity import inputs, requests_for, respond, run_langchain
from loopline.testing.scripted import ScriptedOpenAIServer

out = {}
with ScriptedOpenAIServer(responder=respond) as lc_server, \
        ScriptedOpenAIServer(responder=respond) as ll_server:
    for name in inputs():
        lc = run_langchain(lc_server, name)
        agent = create_agent(model_for(ll_server), [tooling.add], system_prompt=f"Case {name}.")
        ours = agent.invoke(inputs()[name])
        out[name] = [
            [shape(lc["messages"]), requests_for(lc_server, name)],
            [shape(ours["messages"]), requests_for(ll_server, name)],
        ]
print(json.dumps(out))
"""


def test_embedded_takes_the_input_as_langchain() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "OPENAI_BASE_URL")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", EMBEDDED],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(runs) == set(inputs())
    for name, (lc, ll) in runs.items():
        assert lc[1], name
        assert ll == lc, name

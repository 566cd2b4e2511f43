"""Wire parity with LangChain: the same agent and the same scripted replies, run through
LangChain's ``create_agent`` in-process and through loopline's services as separate OS
processes, must send the model the same requests, step by step: messages (system prompt
with the todo prompt, cleared tool results, cleared tool inputs, error messages) and tool
schemas."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent as lc_create_agent
from langchain.agents.middleware import ClearToolUsesEdit as LcClearToolUsesEdit
from langchain.agents.middleware import ContextEditingMiddleware as LcContextEditingMiddleware
from langchain.agents.middleware import TodoListMiddleware as LcTodoListMiddleware
from langchain_core.messages import HumanMessage as LcHumanMessage
from langchain_openai import ChatOpenAI

from contracts import ContextEdited, HumanMessage, TodosUpdated
from loopline.agentfile import agent_from_dict
from loopline.client import Client
from loopline.testing.scripted import Reply, ScriptedOpenAIServer, ScriptedToolCall
from tests import tooling
from tests.support import ServiceProcesses, services_on

SYSTEM_PROMPT = "You are a meticulous assistant."


def todos(*items: tuple[str, str]) -> dict[str, Any]:
    return {"todos": [{"content": c, "status": s} for c, s in items]}


TURNS = [
    Reply(
        tool_calls=(
            ScriptedToolCall("write_todos", todos(("fetch", "in_progress"), ("sum", "pending"))),
            ScriptedToolCall("big_output", {"n": 900}),
            ScriptedToolCall("add", {"a": 1, "b": 2}),
        )
    ),
    Reply(
        tool_calls=(
            ScriptedToolCall("write_todos", todos(("fetch", "completed"))),
            ScriptedToolCall("write_todos", todos(("sum", "completed"))),
            ScriptedToolCall("big_output", {"n": 1100}),
        )
    ),
    Reply(
        tool_calls=(
            ScriptedToolCall("big_output", {"n": 700}),
            ScriptedToolCall("add", {"a": 3, "b": 4}),
        )
    ),
    Reply(
        tool_calls=(
            ScriptedToolCall("write_todos", todos(("fetch", "completed"), ("sum", "completed"))),
            ScriptedToolCall("big_output", {"n": 1300}),
        )
    ),
    Reply(content="All done: 3 and 7."),
]

EDIT = {"trigger": 500, "keep": 1, "exclude_tools": ["add"], "clear_tool_inputs": True}
MODEL = {"approximate": "gpt-4o-mini", "model": "gpt-4"}
SCRIPTS = {"parity": TURNS}


@pytest.fixture(scope="module")
def stack(
    redis_url: str,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    offline_tiktoken: str,
) -> Iterator[ServiceProcesses]:
    with services_on(redis_url, servers[1], TIKTOKEN_CACHE_DIR=offline_tiktoken) as procs:
        yield procs


def run_langchain(server: ScriptedOpenAIServer, method: str, prompt: str) -> dict[str, Any]:
    agent = lc_create_agent(
        ChatOpenAI(model=MODEL[method], base_url=server.url, api_key="test"),
        tools=[tooling.big_output, tooling.add],
        system_prompt=SYSTEM_PROMPT,
        middleware=[
            LcTodoListMiddleware(),
            LcContextEditingMiddleware(
                edits=[
                    LcClearToolUsesEdit(
                        trigger=EDIT["trigger"],
                        keep=EDIT["keep"],
                        exclude_tools=tuple(EDIT["exclude_tools"]),
                        clear_tool_inputs=EDIT["clear_tool_inputs"],
                    )
                ],
                token_count_method=method,  # type: ignore[arg-type]
            ),
        ],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ChatOpenAI warns that it ignores tool schemas
        result: dict[str, Any] = agent.invoke({"messages": [LcHumanMessage(content=prompt)]})
    return result


def mine(server: ScriptedOpenAIServer, prompt: str) -> list[dict[str, Any]]:
    return [r for r in server.chat_requests() if r["messages"][1]["content"] == prompt]


@pytest.mark.parametrize("method", ["approximate", "model"])
async def test_every_model_request_matches_langchain(
    method: str,
    stack: ServiceProcesses,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
) -> None:
    lc_server, ll_server = servers
    prompt = f"parity {method}"
    lc_result = run_langchain(lc_server, method, prompt)

    spec, _ = agent_from_dict(
        {
            "model": MODEL[method],
            "tools": ["tests.tooling:big_output", "tests.tooling:add"],
            "system_prompt": SYSTEM_PROMPT,
            "middleware": [
                {"type": "TodoListMiddleware"},
                {
                    "type": "ContextEditingMiddleware",
                    "token_count_method": method,
                    "edits": [{"type": "ClearToolUsesEdit", **EDIT}],
                },
            ],
        }
    )
    async with Client(stack.redis_url, stack.prefix) as client:
        task_id = await client.submit(spec, [HumanMessage(content=prompt)])
        done = await client.wait(task_id)
        log = [event async for _, event in client.events(task_id, follow=False)]
        todos = await client.todos(task_id)

    lc_requests, ll_requests = mine(lc_server, prompt), mine(ll_server, prompt)
    assert len(lc_requests) == len(TURNS) == len(ll_requests)
    for step, (lc_req, ll_req) in enumerate(zip(lc_requests, ll_requests, strict=True), 1):
        assert ll_req["messages"] == lc_req["messages"], f"step {step}: messages differ"
        assert ll_req["tools"] == lc_req["tools"], f"step {step}: tool schemas differ"
        assert ll_req == lc_req, f"step {step}: request bodies differ"

    # the scenario really exercised what it claims to
    requests_text = [str(r["messages"]) for r in ll_requests]
    assert "[cleared]" in requests_text[2] and "[cleared]" in requests_text[4]
    assert "should never be called multiple times in parallel" in requests_text[2]
    assert any("'arguments': '{}'" in text for text in requests_text)  # cleared inputs
    edits = [e for e in log if isinstance(e, ContextEdited)]
    assert len({e.step for e in edits}) >= 2
    assert all(e.tokens_after < e.tokens_before for e in edits)
    assert all(e.token_count_method == method for e in edits)
    # the pair of parallel write_todos calls was rejected: two accepted lists, not four
    assert [len(e.todos) for e in log if isinstance(e, TodosUpdated)] == [2, 2]

    # same final state
    assert done.answer == lc_result["messages"][-1].content
    assert todos == lc_result["todos"]
    # the stored transcript keeps the full outputs; only the model's view was edited
    async with Client(stack.redis_url, stack.prefix) as client:
        transcript = await client.messages(task_id)
    assert not any(m.text() == "[cleared]" for m in transcript)
    assert len(transcript) == len(lc_result["messages"])

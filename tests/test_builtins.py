"""LangChain's built-in middleware on the bus, each against LangChain's own behaviour on
the same inputs (services as separate processes, the scripted model over HTTP)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent as lc_create_agent
from langchain.agents import middleware as lcm
from langchain_core.messages import HumanMessage as LcHumanMessage
from langchain_openai import ChatOpenAI

from contracts import HumanMessage, TaskCompleted
from loopline.agentfile import agent_from_dict
from loopline.client import Client
from loopline.testing.scripted import Reply, ScriptedOpenAIServer, ScriptedToolCall, first_user_text
from tests import tooling
from tests.support import ServiceProcesses, unique_prefix

pytestmark = pytest.mark.asyncio(loop_scope="module")


def respond(body: dict[str, Any]) -> Reply:
    """Scripts by prompt; ``boom`` prompts fail the first two calls of each conversation
    (500s, counted per run tag), and the model named ``primary`` always fails."""
    text = first_user_text(body)
    if body.get("model") == "primary":
        raise RuntimeError("primary model is down")
    turn = sum(1 for m in body["messages"] if m.get("role") == "assistant")
    if text.startswith("boom"):
        FAILS[text] = FAILS.get(text, 0) + 1
        if FAILS[text] <= 2:
            raise RuntimeError("transient")
        return Reply(content="recovered")
    if text.startswith("limit"):
        calls = (
            ScriptedToolCall("add", {"a": 1, "b": 1}),
            ScriptedToolCall("add", {"a": 2, "b": 2}),
        )
        return Reply(tool_calls=calls) if turn == 0 else Reply(content="limited")
    if text.startswith("flaky"):
        key = "-".join(text.split()[1:])  # one counter per side
        call = ScriptedToolCall("flaky", {"key": key, "failures": 2})
        return Reply(tool_calls=(call,)) if turn == 0 else Reply(content="flaky done")
    if text.startswith("summarize"):
        if "Messages to summarize" in str(body["messages"]) or "summarize" not in text:
            return Reply(content="SUMMARY: adding numbers")
        calls = (ScriptedToolCall("add", {"a": turn, "b": 1}),)
        return Reply(tool_calls=calls) if turn < 3 else Reply(content="summarized done")
    if "response_format" in body:  # LLMToolSelector's structured selection
        return Reply(content='{"tools": ["add"]}')
    return Reply(content=f"answered by {body.get('model')}")


FAILS: dict[str, int] = {}


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(responder=respond) as srv:
        yield srv


@pytest.fixture(scope="module")
def stack(redis_url: str, server: ScriptedOpenAIServer) -> Iterator[ServiceProcesses]:
    env = {"OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": "test", "RECORD_REDIS_URL": redis_url}
    with ServiceProcesses(redis_url, unique_prefix(), env=env) as procs:
        yield procs


async def both(
    stack: ServiceProcesses,
    server: ScriptedOpenAIServer,
    prompt: str,
    lc_middleware: list[Any],
    ll_middleware: list[dict[str, Any]],
    model: str = "gpt-4o-mini",
) -> tuple[list[Any], list[Any]]:
    """(LangChain's messages, loopline's messages) for the same prompt suffix."""
    lc_agent = lc_create_agent(
        ChatOpenAI(model=model, base_url=server.url, api_key="test", max_retries=0),
        tools=[tooling.add, tooling.flaky],
        middleware=lc_middleware,
    )
    lc = await lc_agent.ainvoke({"messages": [LcHumanMessage(content=f"{prompt} lc")]})
    spec, _ = agent_from_dict(
        {
            "model": {"name": model, "params": {"max_retries": 0}},
            "tools": ["tests.tooling:add", "tests.tooling:flaky"],
            "middleware": ll_middleware,
        }
    )
    async with Client(stack.redis_url, stack.prefix) as client:
        task_id = await client.submit(spec, [HumanMessage(content=f"{prompt} ll")])
        done = await client.wait(task_id)
        assert isinstance(done, TaskCompleted)
        ours = await client.messages(task_id)
    return lc["messages"], ours


def shape(messages: list[Any]) -> list[tuple[str, str]]:
    out = []
    for m in messages[1:]:  # the prompts differ
        content = m.content if isinstance(m.content, str) else m.text()
        out.append((m.type, content.replace(" lc", "").replace(" ll", "")))
    return out


async def test_tool_call_limit_continue(
    stack: ServiceProcesses, server: ScriptedOpenAIServer
) -> None:
    lc, ours = await both(
        stack,
        server,
        "limit",
        [lcm.ToolCallLimitMiddleware(run_limit=1, exit_behavior="continue")],
        [{"type": "ToolCallLimitMiddleware", "run_limit": 1, "exit_behavior": "continue"}],
    )
    assert shape(ours) == shape(lc)
    assert sum(1 for m in ours if m.type == "tool" and m.status == "error") == 1


async def test_tool_retry(stack: ServiceProcesses, server: ScriptedOpenAIServer) -> None:
    tag = uuid.uuid4().hex
    lc, ours = await both(
        stack,
        server,
        f"flaky {tag}",
        [lcm.ToolRetryMiddleware(max_retries=2, initial_delay=0.01, jitter=False)],
        [{"type": "ToolRetryMiddleware", "max_retries": 2, "initial_delay": 0.01, "jitter": False}],
    )
    assert [m.content for m in lc if m.type == "tool"] == ["succeeded on attempt 3"]
    assert [m.text() for m in ours if m.type == "tool"] == ["succeeded on attempt 3"]


async def test_model_retry(stack: ServiceProcesses, server: ScriptedOpenAIServer) -> None:
    tag = uuid.uuid4().hex
    lc, ours = await both(
        stack,
        server,
        f"boom {tag}",
        [lcm.ModelRetryMiddleware(max_retries=2, initial_delay=0.01, jitter=False)],
        [
            {
                "type": "ModelRetryMiddleware",
                "max_retries": 2,
                "initial_delay": 0.01,
                "jitter": False,
            }
        ],
    )
    assert lc[-1].content == ours[-1].text() == "recovered"
    assert FAILS[f"boom {tag} lc"] == FAILS[f"boom {tag} ll"] == 3


async def test_model_fallback(
    stack: ServiceProcesses, server: ScriptedOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the agent file is validated here, which builds the fallback ChatOpenAI
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    lc, ours = await both(
        stack,
        server,
        "fallback",
        [
            lcm.ModelFallbackMiddleware(
                ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="test")
            )
        ],
        [{"type": "ModelFallbackMiddleware", "first_model": "openai:gpt-4o-mini"}],
        model="primary",
    )
    assert lc[-1].content == ours[-1].text() == "answered by gpt-4o-mini"


async def test_llm_tool_selector_and_dynamic_prompt(
    stack: ServiceProcesses, server: ScriptedOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The selector's own model call and the narrowed tool list match LangChain's; a
    dynamic prompt reaches the model as the system message."""
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    server.reset()
    from tests.middlewares import terse

    lc, ours = await both(
        stack,
        server,
        "select",
        [lcm.LLMToolSelectorMiddleware(max_tools=1), terse],
        [
            {"type": "LLMToolSelectorMiddleware", "max_tools": 1},
            {"type": "tests.middlewares:terse"},
        ],
    )
    assert lc[-1].content == ours[-1].text()
    requests = server.chat_requests()
    selections = [r for r in requests if "response_format" in r]
    answers = [r for r in requests if "response_format" not in r]
    assert len(selections) == len(answers) == 2
    assert [[t["function"]["name"] for t in r["tools"]] for r in answers] == [["add"], ["add"]]
    assert all(r["messages"][0] == {"role": "system", "content": "Be terse."} for r in answers)
    assert _strip(selections[0]) == _strip(selections[1])
    assert _strip(answers[0]) == _strip(answers[1])


def _strip(request: dict[str, Any]) -> str:
    return str(request).replace(" lc", "").replace(" ll", "")


async def test_summarization_on_the_bus_matches_langchain(
    stack: ServiceProcesses, server: ScriptedOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Old history is replaced by LangChain's summary message (a transcript rewrite in the
    loop), and every later request carries the same messages as LangChain's."""
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    server.reset()
    params = {"model": "openai:gpt-4o-mini", "trigger": ("messages", 4), "keep": ("messages", 2)}
    lc, ours = await both(
        stack,
        server,
        "summarize",
        [lcm.SummarizationMiddleware(**params)],  # type: ignore[arg-type]
        [{"type": "SummarizationMiddleware", **params}],
    )
    assert shape(ours) == shape(lc)
    assert any("summary of the conversation" in m.text() for m in ours)
    answers = [r for r in server.chat_requests() if "summarize" in str(r["messages"])]
    lc_side = [_strip(r) for r in answers if " lc" in str(r["messages"])]
    ll_side = [_strip(r) for r in answers if " ll" in str(r["messages"])]
    assert lc_side == ll_side

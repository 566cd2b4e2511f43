"""Wire parity on a multi-turn conversation: the same agent (TodoListMiddleware,
ContextEditingMiddleware, SummarizationMiddleware) over three turns on one thread,
through LangChain's ``create_agent`` + ``InMemorySaver`` in-process and through
loopline's ``create_agent`` with every service as its own process, the services
restarted between turns. Every model request body (the summarizer's included) is the
same, turn by turn, and so is ``get_state(config).values``."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent as lc_create_agent
from langchain.agents.middleware import (
    ClearToolUsesEdit,
    ContextEditingMiddleware,
    SummarizationMiddleware,
    TodoListMiddleware,
)
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver

from loopline import create_agent
from loopline.testing.scripted import Reply, ScriptedOpenAIServer, ScriptedToolCall
from services.editing.counting import install_offline_tiktoken_cache
from tests import tooling
from tests.support import ServiceProcesses, unique_prefix

SYSTEM_PROMPT = "You keep a running tally."


def todos(*items: tuple[str, str]) -> dict[str, Any]:
    return {"todos": [{"content": c, "status": s} for c, s in items]}


PLAN = todos(("fetch", "in_progress"), ("sum", "pending"))
FINISHED = todos(("fetch", "completed"), ("sum", "completed"))

SCRIPTS: dict[str, list[Reply]] = {
    "plan the sums": [
        Reply(
            tool_calls=(
                ScriptedToolCall(
                    "write_todos", todos(("fetch", "in_progress"), ("sum", "pending"))
                ),
                ScriptedToolCall("big_output", {"n": 900}),
                ScriptedToolCall("add", {"a": 1, "b": 2}),
            )
        ),
        Reply(tool_calls=(ScriptedToolCall("big_output", {"n": 1100}),)),
        Reply(content="The first sum is 3."),
    ],
    "now add 3 and 4": [
        Reply(
            tool_calls=(
                ScriptedToolCall("add", {"a": 3, "b": 4}),
                ScriptedToolCall("big_output", {"n": 700}),
            )
        ),
        Reply(
            tool_calls=(
                ScriptedToolCall(
                    "write_todos", todos(("fetch", "completed"), ("sum", "completed"))
                ),
            )
        ),
        Reply(content="3 + 4 is 7."),
    ],
    "wrap up": [
        Reply(tool_calls=(ScriptedToolCall("big_output", {"n": 800}),)),
        Reply(content="Tally: 3 and 7."),
    ],
}
TURNS = list(SCRIPTS)


def respond(body: dict[str, Any]) -> Reply:
    """The run's own prompt (the last user message) picks the script, the model's
    replies since it the turn; the summarizer's request gets the summary."""
    messages = body["messages"]
    if "Messages to summarize" in str(messages):
        return Reply(content="SUMMARY: a tally of sums, 3 so far.")
    last_user = max(i for i, m in enumerate(messages) if m.get("role") == "user")
    prompt = str(messages[last_user]["content"])
    turn = sum(1 for m in messages[last_user:] if m.get("role") == "assistant")
    script = SCRIPTS.get(prompt)
    if script is None:
        return Reply(content=f"no script for {prompt[:40]!r}")
    return script[min(turn, len(script) - 1)]


EDIT = {"trigger": 600, "keep": 1, "exclude_tools": ("add",), "clear_tool_inputs": True}
SUMMARY = {"trigger": ("messages", 12), "keep": ("messages", 4)}


def middleware() -> list[Any]:
    """LangChain's own middleware instances: the same objects for both agents."""
    return [
        TodoListMiddleware(),
        ContextEditingMiddleware(
            edits=[ClearToolUsesEdit(**EDIT)], token_count_method="approximate"
        ),  # type: ignore[arg-type]
        SummarizationMiddleware(model="openai:gpt-4o-mini", **SUMMARY),  # type: ignore[arg-type]
    ]


@pytest.fixture(scope="module")
def tiktoken_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tiktoken")
    install_offline_tiktoken_cache(str(directory))
    return directory


RESPONDER = respond


def comparable(values: dict[str, Any]) -> dict[str, Any]:
    """State values without what differs by construction: message ids (LangChain's are
    random) and the provider's response metadata (timestamps, ids)."""
    out = dict(values)
    out["messages"] = [
        {
            "type": m.type,
            "content": m.content,
            "tool_calls": [(c["name"], c["args"], c["id"]) for c in getattr(m, "tool_calls", [])],
            "tool_call_id": getattr(m, "tool_call_id", None),
            "name": getattr(m, "name", None),
        }
        for m in values["messages"]
    ]
    return out


def test_three_turns_on_a_thread_match_langchain_with_a_checkpointer(
    redis_url: str,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    tiktoken_cache: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lc_server, ll_server = servers
    config = {"configurable": {"thread_id": "conversation-1"}}

    # LangChain in-process; its summarizer ("openai:...") reads the endpoint from the env
    monkeypatch.setenv("OPENAI_BASE_URL", lc_server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    lc_agent = lc_create_agent(
        ChatOpenAI(model="gpt-4o-mini", base_url=lc_server.url, api_key="test"),  # type: ignore[arg-type]
        tools=[tooling.big_output, tooling.add],
        system_prompt=SYSTEM_PROMPT,
        middleware=middleware(),
        checkpointer=InMemorySaver(),
    )
    lc_values = []
    lc_per_turn = []
    for prompt in TURNS:
        before = len(lc_server.chat_requests())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lc_agent.invoke({"messages": [{"role": "user", "content": prompt}]}, config)
        lc_per_turn.append(lc_server.chat_requests()[before:])
        lc_values.append(lc_agent.get_state(config).values)

    # loopline: the same code, the services as processes, restarted between turns
    prefix = unique_prefix()
    env = {
        "OPENAI_BASE_URL": ll_server.url,
        "OPENAI_API_KEY": "test",
        "TIKTOKEN_CACHE_DIR": str(tiktoken_cache),
    }
    monkeypatch.setenv("OPENAI_BASE_URL", ll_server.url)
    ll_agent = create_agent(
        ChatOpenAI(model="gpt-4o-mini", api_key="test"),  # type: ignore[arg-type]  # the services' endpoint
        tools=[tooling.big_output, tooling.add],
        system_prompt=SYSTEM_PROMPT,
        middleware=middleware(),
        checkpointer=InMemorySaver(),
        redis_url=redis_url,
        settings=_settings(prefix),
    )
    ll_values = []
    ll_per_turn = []
    pids: list[set[int]] = []
    for prompt in TURNS:
        with ServiceProcesses(redis_url, prefix, env=env) as procs:
            pids.append(set(procs.pids()))
            before = len(ll_server.chat_requests())
            ll_agent.invoke({"messages": [{"role": "user", "content": prompt}]}, config)
            ll_per_turn.append(ll_server.chat_requests()[before:])
        ll_values.append(ll_agent.get_state(config).values)  # read with no service running
    assert not (pids[0] & pids[1]) and not (pids[1] & pids[2])  # new processes every turn

    for turn, (lc_requests, ll_requests) in enumerate(
        zip(lc_per_turn, ll_per_turn, strict=True), 1
    ):
        assert len(ll_requests) == len(lc_requests), f"turn {turn}: number of model requests"
        for i, (lc_req, ll_req) in enumerate(zip(lc_requests, ll_requests, strict=True), 1):
            assert ll_req["messages"] == lc_req["messages"], f"turn {turn} request {i}: messages"
            assert ll_req == lc_req, f"turn {turn} request {i}: bodies differ"
    for turn, (lc_v, ll_v) in enumerate(zip(lc_values, ll_values, strict=True), 1):
        assert sorted(ll_v) == sorted(lc_v), f"turn {turn}: state keys"
        ours, theirs = comparable(ll_v), comparable(lc_v)
        assert len(ours["messages"]) == len(theirs["messages"]), f"turn {turn}: messages"
        for i, (mine, lcs) in enumerate(zip(ours["messages"], theirs["messages"], strict=True)):
            assert mine == lcs, f"turn {turn}: message {i} differs"
        assert ours == theirs, f"turn {turn}: state values"

    # the conversation really exercised what it claims to
    everything = [str(r["messages"]) for turn in ll_per_turn for r in turn]
    assert any("Messages to summarize" in text for text in everything)  # summarized
    assert any("[cleared]" in text for text in everything)  # context edited
    assert "SUMMARY: a tally" in str(ll_values[-1]["messages"])
    assert ll_values[1]["todos"][-1]["status"] == "completed"
    assert "plan the sums" in str(ll_per_turn[1][0]["messages"])  # turn 2 saw turn 1


def _settings(prefix: str) -> Any:
    from services.settings import Settings

    return Settings(prefix=prefix)


def test_a_checkpointer_needs_a_thread_id(redis_url: str) -> None:
    agent = create_agent(
        "gpt-4o-mini", checkpointer=InMemorySaver(), redis_url=redis_url, settings=_settings("x")
    )
    with pytest.raises(ValueError, match=r"Checkpointer requires .* thread_id"):
        agent.invoke({"messages": "hi"})


os.environ.setdefault("OPENAI_API_KEY", "test")  # LangChain's summarizer model is built eagerly

"""What ``wrap_tool_call`` and ``wrap_model_call`` middleware see of the agent state, next to
LangChain's create_agent on the same scripted model, with the services as separate OS
processes: a tool wrapper's ``request.state["messages"]`` is the transcript at tool time,
and a model wrapper listed before ``ContextEditingMiddleware`` sees the messages unedited
while one listed after it sees the edited view (LangChain composes wrappers outer-first
in list order, and the context editor edits ``request.messages`` for the inner ones)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis as syncredis
from langchain.agents import create_agent as lc_create_agent
from langchain.agents.middleware import ClearToolUsesEdit as LcClearToolUsesEdit
from langchain.agents.middleware import ContextEditingMiddleware as LcContextEditingMiddleware
from langchain_core.messages import HumanMessage as LcHumanMessage
from langchain_openai import ChatOpenAI

from contracts import HumanMessage, TaskCompleted
from contracts.agent import ModelSpec
from loopline import create_agent
from loopline.agentfile import agent_from_dict
from loopline.client import Client
from loopline.testing.scripted import (
    Reply,
    ScriptedOpenAIServer,
    ScriptedToolCall,
    first_user_text,
)
from services.settings import Settings
from tests import tooling, wrap_recorders
from tests.command_middleware import AddsMessages
from tests.support import ServiceProcesses

# ChatOpenAI keeps its async HTTP client per process: one event loop for the module.
pytestmark = pytest.mark.asyncio(loop_scope="module")

SCRIPTS = {
    # two parallel calls, then one more: tool-time transcripts of 2, 2 and 5 messages
    "toolstate": [
        Reply(
            tool_calls=(
                ScriptedToolCall("add", {"a": 1, "b": 2}),
                ScriptedToolCall("add", {"a": 3, "b": 4}),
            )
        ),
        Reply(tool_calls=(ScriptedToolCall("add", {"a": 5, "b": 6}),)),
        Reply(content="3, 7 and 11"),
    ],
    # three large results one step apart: with keep=1 the editor clears one, then two
    "ctxedit": [
        Reply(tool_calls=(ScriptedToolCall("big_output", {"n": 400}),)),
        Reply(tool_calls=(ScriptedToolCall("big_output", {"n": 500}),)),
        Reply(tool_calls=(ScriptedToolCall("big_output", {"n": 600}),)),
        Reply(content="read them all"),
    ],
}
SCRIPTS["padded"] = SCRIPTS["ctxedit"]
SCRIPTS["commands"] = SCRIPTS["toolstate"]
EDIT = {"trigger": 150, "keep": 1}


@pytest.fixture(scope="module", autouse=True)
def recorder_redis(redis_url: str) -> Iterator[None]:
    """The LangChain side's recorders write to the test's Redis, as the services' do."""
    wrap_recorders._client = syncredis.Redis.from_url(redis_url)
    yield
    wrap_recorders._client.close()
    wrap_recorders._client = None


async def run_langchain(
    server: ScriptedOpenAIServer, prompt: str, tools: list[Any], middleware: list[Any]
) -> Any:
    agent = lc_create_agent(
        ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="test"),
        tools=tools,
        middleware=middleware,
    )
    return await agent.ainvoke({"messages": [LcHumanMessage(content=prompt)]})


async def run_loopline(
    stack: ServiceProcesses, prompt: str, tools: list[str], middleware: list[dict[str, Any]]
) -> Any:
    spec, _ = agent_from_dict({"model": "gpt-4o-mini", "tools": tools, "middleware": middleware})
    async with Client(stack.redis_url, stack.prefix) as client:
        task_id = await client.submit(spec, [HumanMessage(content=prompt)])
        return await client.wait(task_id)


def recorded(redis_url: str, key: str) -> list[dict[str, Any]]:
    r = syncredis.Redis.from_url(redis_url)
    try:
        return [json.loads(v) for v in r.lrange(key, 0, -1)]
    finally:
        r.close()


def requests_for(server: ScriptedOpenAIServer, prompt: str) -> list[dict[str, Any]]:
    return [r for r in server.chat_requests() if first_user_text(r) == prompt]


async def test_wrap_tool_call_state_holds_the_transcript_at_tool_time(
    stack: ServiceProcesses,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    redis_url: str,
) -> None:
    prompt = f"toolstate {uuid.uuid4()}"
    lc_key, ll_key = f"rec:{uuid.uuid4()}", f"rec:{uuid.uuid4()}"
    await run_langchain(
        servers[0], prompt, [tooling.add], [wrap_recorders.ToolStateRecorder(lc_key)]
    )
    outcome = await run_loopline(
        stack,
        prompt,
        ["tests.tooling:add"],
        [{"type": "tests.wrap_recorders:ToolStateRecorder", "key": ll_key}],
    )
    assert isinstance(outcome, TaskCompleted) and outcome.answer == "3, 7 and 11"

    # parallel calls record in any order: compare by call
    def by_call(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return sorted(records, key=lambda r: r["call"])

    expected = by_call(recorded(redis_url, lc_key))
    # LangChain's own view, to be sure the comparison is about something: the first step's
    # calls see [human, ai]; the second step's call also its results and its AI message
    assert [r["count"] for r in expected] == [2, 2, 5]
    assert [m["type"] for m in expected[-1]["messages"]] == ["human", "ai", "tool", "tool", "ai"]
    assert expected[-1]["messages"][0]["content"] == prompt
    assert expected[-1]["messages"][2]["content"] == "3"
    assert by_call(recorded(redis_url, ll_key)) == expected


async def test_wrap_model_call_before_context_editing_sees_unedited_messages(
    stack: ServiceProcesses,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    redis_url: str,
) -> None:
    prompt = f"ctxedit {uuid.uuid4()}"
    lc_key, ll_key = f"rec:{uuid.uuid4()}", f"rec:{uuid.uuid4()}"
    await run_langchain(
        servers[0],
        prompt,
        [tooling.big_output],
        [
            wrap_recorders.ModelRequestRecorder("outer", lc_key),
            LcContextEditingMiddleware(edits=[LcClearToolUsesEdit(**EDIT)]),  # type: ignore[arg-type]
            wrap_recorders.ModelRequestRecorder("inner", lc_key),
        ],
    )
    outcome = await run_loopline(
        stack,
        prompt,
        ["tests.tooling:big_output"],
        [
            {"type": "tests.wrap_recorders:ModelRequestRecorder", "label": "outer", "key": ll_key},
            {"type": "ContextEditingMiddleware", "edits": [{"type": "ClearToolUsesEdit", **EDIT}]},
            {"type": "tests.wrap_recorders:ModelRequestRecorder", "label": "inner", "key": ll_key},
        ],
    )
    assert isinstance(outcome, TaskCompleted) and outcome.answer == "read them all"

    expected = recorded(redis_url, lc_key)
    # LangChain's own view, to be sure clearing happened and the two recorders differ:
    # four model calls, outer first; the outer never sees a cleared result, the inner
    # sees one cleared at the third call and two at the fourth; the state is unedited
    assert [r["label"] for r in expected] == ["outer", "inner"] * 4
    outer, inner = expected[-2], expected[-1]

    def cleared(messages: list[dict[str, Any]]) -> int:
        return sum(1 for m in messages if m["type"] == "tool" and m["content"] == "[cleared]")

    assert [cleared(r["messages"]) for r in expected] == [0, 0, 0, 0, 0, 1, 0, 2]
    assert outer["messages"] == outer["state_messages"] == inner["state_messages"]
    assert len(inner["messages"]) == len(outer["messages"]) == 7
    assert recorded(redis_url, ll_key) == expected

    # and the model got the same requests, the edited view each time
    lc_requests, ll_requests = requests_for(servers[0], prompt), requests_for(servers[1], prompt)
    assert len(lc_requests) == len(ll_requests) == 4
    for ll_request, lc_request in zip(ll_requests, lc_requests, strict=True):
        assert ll_request == lc_request
    assert "[cleared]" in json.dumps(ll_requests[-1]["messages"])


async def test_context_editing_counts_what_outer_middleware_hand_it(
    stack: ServiceProcesses,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    redis_url: str,
) -> None:
    """An outer wrapper that adds to the messages changes what the editor counts: the
    edits the context consumer decided for the transcript alone (none here: it stays
    under the trigger) are not the ones LangChain's editor makes on the padded messages."""
    prompt = f"padded {uuid.uuid4()}"
    edit = {"trigger": 1000, "keep": 1}
    lc_key, ll_key = f"rec:{uuid.uuid4()}", f"rec:{uuid.uuid4()}"
    await run_langchain(
        servers[0],
        prompt,
        [tooling.big_output],
        [
            wrap_recorders.Padder(4000),
            LcContextEditingMiddleware(edits=[LcClearToolUsesEdit(**edit)]),  # type: ignore[arg-type]
            wrap_recorders.ModelRequestRecorder("inner", lc_key),
        ],
    )
    outcome = await run_loopline(
        stack,
        prompt,
        ["tests.tooling:big_output"],
        [
            {"type": "tests.wrap_recorders:Padder", "chars": 4000},
            {"type": "ContextEditingMiddleware", "edits": [{"type": "ClearToolUsesEdit", **edit}]},
            {"type": "tests.wrap_recorders:ModelRequestRecorder", "label": "inner", "key": ll_key},
        ],
    )
    assert isinstance(outcome, TaskCompleted) and outcome.answer == "read them all"
    expected = recorded(redis_url, lc_key)
    cleared = [
        sum(1 for m in r["messages"] if m["type"] == "tool" and m["content"] == "[cleared]")
        for r in expected
    ]
    assert cleared == [0, 0, 1, 2]  # the padding is what crosses the trigger
    assert recorded(redis_url, ll_key) == expected
    lc_requests, ll_requests = requests_for(servers[0], prompt), requests_for(servers[1], prompt)
    assert ll_requests == lc_requests and len(ll_requests) == 4


async def test_wrap_model_call_commands_add_messages_deployed(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    """Commands adding messages beside the reply (and a key), in the model service of
    its own process: the same requests, messages and state as LangChain's."""
    prompt = f"commands {uuid.uuid4()}"

    def middleware() -> list[Any]:
        return [AddsMessages("outer", note=True), AddsMessages("inner")]

    lc = await run_langchain(servers[0], prompt, [tooling.add], middleware())
    agent = create_agent(
        ModelSpec(name="gpt-4o-mini"),
        [tooling.add],
        middleware=middleware(),
        redis_url=stack.redis_url,
        settings=Settings(prefix=stack.prefix),
    )
    ours = await agent.ainvoke({"messages": [LcHumanMessage(content=prompt)]})

    def said(result: dict[str, Any]) -> list[tuple[str, Any]]:
        return [(m.type, m.content) for m in result["messages"]]

    assert said(ours) == said(lc)
    assert said(lc)[2:4] == [("human", "inner saw 1"), ("human", "outer saw 1")]
    assert ours["notes"] == lc["notes"] == "outer at 10"
    lc_requests, ll_requests = requests_for(servers[0], prompt), requests_for(servers[1], prompt)
    assert ll_requests == lc_requests and len(ll_requests) == 3

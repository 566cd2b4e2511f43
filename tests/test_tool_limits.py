"""ToolCallLimitMiddleware on the bus against LangChain's: exit behaviours "end", "error"
and "continue", a global limit and a per-tool one (``tool_name``), ``thread_limit`` and
``run_limit``. Same scripted model conversations on two servers, LangChain's create_agent
on one, loopline's services (separate processes, agent file) on the other: the messages
each run ends with, every request its model received, and the reason a run failed must be
the same.

A loopline task is one LangGraph run on a fresh thread (there is no checkpointer thread
spanning tasks), so the LangChain side runs without a checkpointer: there too the thread's
count is the run's count, and the two limits differ only in which limit the messages name.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from langchain.agents import create_agent as lc_create_agent
from langchain.agents import middleware as lcm
from langchain.agents.middleware.tool_call_limit import ToolCallLimitExceededError
from langchain_core.messages import HumanMessage as LcHumanMessage
from langchain_openai import ChatOpenAI

from contracts import HumanMessage, TaskCompleted, TaskFailed
from loopline.agentfile import agent_from_dict
from loopline.client import Client
from loopline.testing.scripted import (
    Reply,
    ScriptedOpenAIServer,
    ScriptedToolCall,
    first_user_text,
)
from tests import tooling
from tests.support import ServiceProcesses

pytestmark = pytest.mark.asyncio(loop_scope="module")


def add(a: int, b: int) -> ScriptedToolCall:
    return ScriptedToolCall("add", {"a": a, "b": b})


# One tool call per step, three steps, then an answer.
STEPS = [
    Reply(tool_calls=(add(1, 1),)),
    Reply(tool_calls=(add(2, 2),)),
    Reply(tool_calls=(add(3, 3),)),
    Reply(content="finished"),
]
# Three calls in one step (two of them add), then an answer.
PARALLEL = [
    Reply(tool_calls=(add(1, 1), ScriptedToolCall("big_output", {"n": 3}), add(2, 2))),
    Reply(content="finished"),
]
SCRIPTS: dict[str, Sequence[Reply]] = {}


@dataclass
class Runs:
    lc_messages: list[Any] = field(default_factory=list)
    ll_messages: list[Any] = field(default_factory=list)
    lc_error: ToolCallLimitExceededError | None = None
    ll_outcome: Any = None
    lc_requests: list[dict[str, Any]] = field(default_factory=list)
    ll_requests: list[dict[str, Any]] = field(default_factory=list)

    def same_requests(self) -> None:
        assert self.lc_requests, "LangChain's model was never called"
        assert self.ll_requests == self.lc_requests

    def same_messages(self) -> list[tuple[Any, ...]]:
        ours = [view(m.type, m.text(), m) for m in self.ll_messages]
        theirs = [view(m.type, m.content, m) for m in self.lc_messages]
        assert ours == theirs
        return ours


def view(kind: str, text: str, m: Any) -> tuple[Any, ...]:
    calls = [
        (c["name"], c["args"], c["id"]) if isinstance(c, dict) else (c.name, c.args, c.id)
        for c in getattr(m, "tool_calls", [])
    ]
    return (kind, text, calls, getattr(m, "tool_call_id", None), getattr(m, "status", None))


async def run_both(
    stack: ServiceProcesses,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    script: list[Reply],
    **limits: Any,
) -> Runs:
    key = f"[{uuid.uuid4().hex[:12]}]"
    SCRIPTS[key] = script
    prompt = f"{key} add some numbers"
    runs = Runs()
    lc_agent = lc_create_agent(
        ChatOpenAI(model="gpt-4o-mini", base_url=servers[0].url, api_key="test", max_retries=0),
        tools=[tooling.add, tooling.big_output],
        middleware=[lcm.ToolCallLimitMiddleware(**limits)],
    )
    try:
        lc = await lc_agent.ainvoke({"messages": [LcHumanMessage(content=prompt)]})
        runs.lc_messages = lc["messages"]
    except ToolCallLimitExceededError as exc:
        runs.lc_error = exc
    spec, _ = agent_from_dict(
        {
            "model": "gpt-4o-mini",
            "tools": ["tests.tooling:add", "tests.tooling:big_output"],
            "middleware": [{"type": "ToolCallLimitMiddleware", **limits}],
        }
    )
    async with Client(stack.redis_url, stack.prefix) as client:
        task_id = await client.submit(spec, [HumanMessage(content=prompt)])
        _, runs.ll_outcome = await client.outcome(task_id)
        runs.ll_messages = await client.messages(task_id)
    runs.lc_requests = [r for r in servers[0].chat_requests() if first_user_text(r).startswith(key)]
    runs.ll_requests = [r for r in servers[1].chat_requests() if first_user_text(r).startswith(key)]
    return runs


BLOCKED_ALL = "Tool call limit exceeded. Do not make additional tool calls."
BLOCKED_ADD = "Tool call limit exceeded. Do not call 'add' again."
STOPPED = (
    "Execution stopped before this tool call could run because another tool call in the "
    "same batch exceeded the limit."
)


@pytest.mark.parametrize(
    ("limits", "final"),
    [
        ({"run_limit": 2}, "Tool call limit reached: run limit exceeded (3/2 calls)."),
        ({"thread_limit": 2}, "Tool call limit reached: thread limit exceeded (3/2 calls)."),
        (
            {"thread_limit": 3, "run_limit": 2},
            "Tool call limit reached: run limit exceeded (3/2 calls).",
        ),
        (
            {"thread_limit": 2, "run_limit": 2},
            "Tool call limit reached: thread limit exceeded (3/2 calls) and run limit "
            "exceeded (3/2 calls).",
        ),
    ],
    ids=["run", "thread", "run-under-thread", "both"],
)
async def test_end_stops_at_the_first_call_over_the_limit(
    stack: ServiceProcesses,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    limits: dict[str, int],
    final: str,
) -> None:
    runs = await run_both(stack, servers, STEPS, exit_behavior="end", **limits)
    assert runs.lc_error is None
    assert isinstance(runs.ll_outcome, TaskCompleted)
    assert runs.ll_outcome.answer == final
    runs.same_requests()
    assert len(runs.ll_requests) == 3  # the third reply's call is never run
    ours = runs.same_messages()
    assert [m[0] for m in ours] == ["human", "ai", "tool", "ai", "tool", "ai", "tool", "ai"]
    assert ours[-2][1:] == (BLOCKED_ALL, [], "call_2_0_add", "error")
    assert ours[-1][1] == final


async def test_end_per_tool_answers_the_other_calls_of_the_batch(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    """Only ``add`` counts; its second call in the batch is over the limit, and the calls
    that were not over it are answered without running (LangChain's "end")."""
    runs = await run_both(
        stack, servers, PARALLEL, tool_name="add", run_limit=1, exit_behavior="end"
    )
    final = "'add' tool call limit reached: run limit exceeded (2/1 calls)."
    assert isinstance(runs.ll_outcome, TaskCompleted) and runs.ll_outcome.answer == final
    runs.same_requests()
    assert len(runs.ll_requests) == 1
    ours = runs.same_messages()
    assert [(m[0], m[1], m[3]) for m in ours[2:]] == [
        ("tool", BLOCKED_ADD, "call_0_2_add"),
        ("tool", STOPPED, "call_0_0_add"),
        ("tool", STOPPED, "call_0_1_big_output"),
        ("ai", final, None),
    ]


@pytest.mark.parametrize(
    ("limits", "steps", "reason"),
    [
        ({"run_limit": 1}, 2, "Tool call limit reached: run limit exceeded (2/1 calls)."),
        (
            {"thread_limit": 2, "tool_name": "add"},
            3,
            "'add' tool call limit reached: thread limit exceeded (3/2 calls).",
        ),
    ],
    ids=["run", "thread-per-tool"],
)
async def test_error_fails_both_runs_with_the_same_reason(
    stack: ServiceProcesses,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    limits: dict[str, Any],
    steps: int,
    reason: str,
) -> None:
    runs = await run_both(stack, servers, STEPS, exit_behavior="error", **limits)
    assert isinstance(runs.lc_error, ToolCallLimitExceededError)
    assert str(runs.lc_error) == reason
    assert isinstance(runs.ll_outcome, TaskFailed)
    assert runs.ll_outcome.reason == f"ToolCallLimitExceededError: {reason}"
    runs.same_requests()
    assert len(runs.ll_requests) == steps  # the reply over the limit was the last one
    # the failed run kept what it had done; the offending reply's call never ran
    assert sum(1 for m in runs.ll_messages if m.type == "tool") == steps - 1


async def test_continue_blocks_the_call_and_lets_the_model_go_on(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    runs = await run_both(stack, servers, STEPS, run_limit=1, exit_behavior="continue")
    assert runs.lc_error is None
    assert isinstance(runs.ll_outcome, TaskCompleted) and runs.ll_outcome.answer == "finished"
    runs.same_requests()
    assert len(runs.ll_requests) == 4
    ours = runs.same_messages()
    tools = [(m[1], m[4]) for m in ours if m[0] == "tool"]
    assert tools == [("2", "success"), (BLOCKED_ALL, "error"), (BLOCKED_ALL, "error")]


async def test_continue_per_tool_blocks_only_that_tool(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    runs = await run_both(
        stack, servers, PARALLEL, tool_name="add", run_limit=1, exit_behavior="continue"
    )
    assert isinstance(runs.ll_outcome, TaskCompleted) and runs.ll_outcome.answer == "finished"
    runs.same_requests()
    ours = runs.same_messages()
    tools = {m[3]: (m[1], m[4]) for m in ours if m[0] == "tool"}
    assert tools == {
        "call_0_0_add": ("2", "success"),
        "call_0_1_big_output": ("xxx", "success"),
        "call_0_2_add": (BLOCKED_ADD, "error"),
    }


async def test_a_limit_on_another_tool_counts_nothing(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    runs = await run_both(
        stack, servers, STEPS, tool_name="big_output", run_limit=1, exit_behavior="error"
    )
    assert runs.lc_error is None
    assert isinstance(runs.ll_outcome, TaskCompleted) and runs.ll_outcome.answer == "finished"
    runs.same_requests()
    assert len(runs.ll_requests) == 4
    runs.same_messages()

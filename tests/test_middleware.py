"""Middleware on the bus: users' hooks and LangChain's built-ins run in the consumer of
their stage (services as separate processes) and behave as in LangChain's create_agent."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis as syncredis
from langchain.agents import create_agent as lc_create_agent
from langchain.agents import middleware as lcm
from langchain_core.messages import HumanMessage as LcHumanMessage
from langchain_openai import ChatOpenAI

from contracts import HumanMessage, TaskCompleted
from loopline.agentfile import agent_from_dict
from loopline.client import Client
from loopline.testing.scripted import Reply, ScriptedOpenAIServer, ScriptedToolCall
from tests import middlewares, tooling
from tests.support import ServiceProcesses, unique_prefix

# ChatOpenAI keeps its async HTTP client per process: one event loop for the module.
pytestmark = pytest.mark.asyncio(loop_scope="module")

TWO_STEPS = [
    Reply(tool_calls=(ScriptedToolCall("add", {"a": 1, "b": 2}),)),
    Reply(tool_calls=(ScriptedToolCall("add", {"a": 3, "b": 4}),)),
    Reply(content="3 and 7"),
]
PII_TURNS = [Reply(content="noted, thanks")]
SCRIPTS = {"order": TWO_STEPS, "limit": TWO_STEPS, "stop": TWO_STEPS, "pii": PII_TURNS}


async def run_langchain(server: ScriptedOpenAIServer, prompt: str, middleware: list[Any]) -> Any:
    agent = lc_create_agent(
        ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="test"),
        tools=[tooling.add],
        middleware=middleware,
    )
    return await agent.ainvoke({"messages": [LcHumanMessage(content=prompt)]})


async def run_loopline(
    stack: ServiceProcesses, prompt: str, middleware: list[dict[str, Any]]
) -> tuple[Any, list[Any]]:
    spec, _ = agent_from_dict(
        {"model": "gpt-4o-mini", "tools": ["tests.tooling:add"], "middleware": middleware}
    )
    async with Client(stack.redis_url, stack.prefix) as client:
        task_id = await client.submit(spec, [HumanMessage(content=prompt)])
        log = [e async for _, e in client.events(task_id)]
        messages = await client.messages(task_id)
    return log, messages


def recorded(redis_url: str, key: str) -> list[str]:
    r = syncredis.Redis.from_url(redis_url)
    try:
        return [v.decode() for v in r.lrange(key, 0, -1)]
    finally:
        r.close()


async def test_hook_order_matches_langchain_across_processes(
    stack: ServiceProcesses,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
    redis_url: str,
) -> None:
    lc_key, ll_key = f"rec:{uuid.uuid4()}", f"rec:{uuid.uuid4()}"
    middlewares._client = syncredis.Redis.from_url(redis_url)
    await run_langchain(
        servers[0], "order", [middlewares.Recorder(n, lc_key) for n in ("A", "B", "C")]
    )
    log, _ = await run_loopline(
        stack,
        "order",
        [{"type": "tests.middlewares:Recorder", "name": n, "key": ll_key} for n in "ABC"],
    )
    assert isinstance(log[-1], TaskCompleted) and log[-1].answer == "3 and 7"
    expected = recorded(redis_url, lc_key)
    assert expected[:3] == ["A.before_agent", "B.before_agent", "C.before_agent"]
    assert expected[-3:] == ["C.after_agent", "B.after_agent", "A.after_agent"]
    # state a hook returned (the per-middleware counter) was seen by later hooks
    assert "A.before_model:2" in expected
    assert recorded(redis_url, ll_key) == expected


async def test_model_call_limit_ends_like_langchain(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    lc = await run_langchain(
        servers[0], "limit", [lcm.ModelCallLimitMiddleware(run_limit=1, exit_behavior="end")]
    )
    log, messages = await run_loopline(
        stack,
        "limit",
        [{"type": "ModelCallLimitMiddleware", "run_limit": 1, "exit_behavior": "end"}],
    )
    assert [m.type for m in messages] == [m.type for m in lc["messages"]]
    assert messages[-1].text() == lc["messages"][-1].content
    assert "Model call limits exceeded" in messages[-1].text()
    assert isinstance(log[-1], TaskCompleted) and log[-1].answer == messages[-1].text()


async def test_a_user_hook_can_jump_to_end(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    lc = await run_langchain(servers[0], "stop", [middlewares.StopAfter(2)])
    _, messages = await run_loopline(
        stack, "stop", [{"type": "tests.middlewares:StopAfter", "calls": 2}]
    )
    assert [m.text() for m in messages] == [
        m.content if isinstance(m.content, str) else "" for m in lc["messages"]
    ]
    assert messages[-1].text() == "stopped after 2"


async def test_pii_redaction_of_input_matches_langchain(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    prompt = "pii: write to ada@example.com please"
    await run_langchain(servers[0], prompt, [lcm.PIIMiddleware("email", strategy="redact")])
    await run_loopline(
        stack, prompt, [{"type": "PIIMiddleware", "pii_type": "email", "strategy": "redact"}]
    )
    lc_request = [r for r in servers[0].chat_requests() if "pii" in str(r["messages"])][-1]
    ll_request = [r for r in servers[1].chat_requests() if "pii" in str(r["messages"])][-1]
    assert ll_request["messages"] == lc_request["messages"]
    assert "[REDACTED_EMAIL]" in str(ll_request["messages"])
    assert "ada@example.com" not in str(ll_request["messages"])


async def arrivals_under_a_limit(
    redis_url: str, model: Any, limit: dict[str, Any], tasks: int, reply: Reply
) -> list[float]:
    """Run ``tasks`` tasks at once through two model replicas sharing one
    RateLimitMiddleware; when each request reached the scripted server, sorted."""
    import time as clock

    arrivals: list[float] = []

    def respond(body: dict[str, Any]) -> Reply:
        arrivals.append(clock.monotonic())
        return reply

    with ScriptedOpenAIServer(responder=respond) as server:
        env = {"OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": "test"}
        procs = ServiceProcesses(redis_url, unique_prefix(), env=env, replicas=1)
        procs.services = ["loop", "context", "todos", "tools"]
        with procs:
            models = ServiceProcesses(
                redis_url, procs.prefix, env=env, services=["model"], replicas=2
            )
            with models:
                middleware = {"type": "RateLimitMiddleware", **limit}
                middleware["key"] = f"test-{uuid.uuid4()}"
                spec, _ = agent_from_dict({"model": model, "middleware": [middleware]})
                async with Client(redis_url, procs.prefix) as client:
                    ids = [
                        await client.submit(spec, [HumanMessage(content=f"r{i}")])
                        for i in range(tasks)
                    ]
                    for task_id in ids:
                        assert isinstance(await client.wait(task_id), TaskCompleted)
    return sorted(arrivals)


async def test_rate_limit_holds_across_two_model_replicas(redis_url: str) -> None:
    """Two model consumers share one limit: 4 requests per 2 s window, measured at the
    scripted server while 12 tasks run at once."""
    arrivals = await arrivals_under_a_limit(
        redis_url,
        "gpt-4o-mini",
        {"requests_per_minute": 4, "window_seconds": 2},
        12,
        Reply(content="ok"),
    )
    assert len(arrivals) == 12
    # Admission is timed in Redis; arrival at the server adds a few ms of transit jitter.
    for i, start in enumerate(arrivals):
        in_window = [t for t in arrivals[i:] if t < start + 2.0 - 0.2]
        assert len(in_window) <= 4, arrivals
    assert arrivals[-1] - arrivals[0] >= 4.0 - 0.2  # 12 at 4 per 2 s wait twice (less jitter)


async def test_token_limit_holds_across_two_model_replicas(redis_url: str) -> None:
    """Two model consumers share a token budget of 150 per 2 s window. Each call reports 60
    tokens and reserves at least as many when admitted (its prompt estimate plus the
    model's max_tokens of 60), so at most two calls start in any window, even with all
    eight tasks submitted at once."""
    arrivals = await arrivals_under_a_limit(
        redis_url,
        {"name": "gpt-4o-mini", "params": {"max_tokens": 60}},
        {"tokens_per_minute": 150, "window_seconds": 2},
        8,
        Reply(content="ok", prompt_tokens=50, completion_tokens=10),
    )
    assert len(arrivals) == 8
    for i, start in enumerate(arrivals):
        in_window = [t for t in arrivals[i:] if t < start + 2.0 - 0.2]
        assert len(in_window) <= 2, arrivals  # three would be 180 tokens
    assert arrivals[-1] - arrivals[0] >= 6.0 - 0.2  # 8 at 2 per window: three waits


async def test_pii_is_also_redacted_in_tool_call_arguments(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    """LangChain leaves PII in the arguments a tool receives; loopline redacts them too."""
    prompt = "argspii please"
    SCRIPTS["argspii"] = [
        Reply(tool_calls=(ScriptedToolCall("add", {"a": 1, "b": 2, "note": "ada@example.com"}),)),
        Reply(content="done"),
    ]
    lc = await run_langchain(
        servers[0], prompt, [lcm.PIIMiddleware("email", strategy="redact", apply_to_output=True)]
    )
    _, messages = await run_loopline(
        stack,
        prompt,
        [
            {
                "type": "PIIMiddleware",
                "pii_type": "email",
                "strategy": "redact",
                "apply_to_output": True,
            }
        ],
    )
    lc_args = next(m for m in lc["messages"] if m.type == "ai" and m.tool_calls).tool_calls[0]
    assert lc_args["args"]["note"] == "ada@example.com"  # LangChain's gap
    ai = next(m for m in messages if m.type == "ai" and m.tool_calls)
    assert ai.tool_calls[0].args["note"] == "[REDACTED_EMAIL]"
    assert "ada@example.com" not in str([m.model_dump() for m in messages])


async def test_tools_a_middleware_adds_reach_the_model_and_run(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    SCRIPTS["shouting"] = [
        Reply(tool_calls=(ScriptedToolCall("shout", {"text": "hi"}),)),
        Reply(content="shouted"),
    ]
    lc = await run_langchain(servers[0], "shouting", [middlewares.Shouter()])
    _, messages = await run_loopline(stack, "shouting", [{"type": "tests.middlewares:Shouter"}])
    assert [m.text() for m in messages if m.type == "tool"] == ["HI"]
    assert [m.content for m in lc["messages"] if m.type == "tool"] == ["HI"]
    lc_request = next(r for r in servers[0].chat_requests() if "shouting" in str(r["messages"]))
    ll_request = next(r for r in servers[1].chat_requests() if "shouting" in str(r["messages"]))
    assert ll_request["tools"] == lc_request["tools"]
    assert [t["function"]["name"] for t in ll_request["tools"]] == ["shout", "add"]

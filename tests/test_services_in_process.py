"""Every service's app in this process (``loopline.embedded.ServiceThread``: the FastStream
app the service processes run, on a thread of its own) on the session's Redis, driven by
the client as a user drives a deployment, the model being real ChatOpenAI over HTTP to
the scripted server. The same paths as the system tier's processes, without them: the
inline hand-over of model replies and tool results, the parallel join, the step limit,
and what the services leave in Redis once tasks end."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from contracts import (
    AIMessage,
    ContextEdited,
    HumanMessage,
    TaskCompleted,
    TaskFailed,
    TodosUpdated,
    ToolMessage,
)
from contracts.agent import AgentSpec
from contracts.streams import GROUPS, SERVICES, Names
from loopline.agentfile import agent_from_dict
from loopline.client import Client
from loopline.embedded import ServiceThread
from loopline.testing.scripted import Reply, ScriptedOpenAIServer, ScriptedToolCall
from services.settings import Settings
from tests.support import events_on, unique_prefix, wait_for

pytestmark = pytest.mark.fast

RETENTION_S = 60
SPEC = AgentSpec(
    model={"name": "gpt-4o-mini"},  # type: ignore[arg-type]
    tools=["tests.tooling:add", "tests.tooling:fail_always"],
)
SCRIPTS: dict[str, list[Reply]] = {}


@pytest.fixture(scope="module")
def deployment(redis_url: str, scripted: ScriptedOpenAIServer) -> Iterator[tuple[str, str]]:
    """Every service of a deployment under a fresh prefix, in this process (one app for
    the module: the model clients it keeps are bound to its event loop); (url, prefix)."""
    prefix = unique_prefix()
    settings = Settings(prefix=prefix, max_steps=3, retention_s=RETENTION_S, trim_interval_s=0.2)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("OPENAI_BASE_URL", scripted.url)
        env.setenv("OPENAI_API_KEY", "test")
        stack = ServiceThread(redis_url, settings).start()
        try:
            yield redis_url, prefix
        finally:
            stack.stop()


def scripted_prompt(*turns: Reply) -> str:
    prompt = f"in-process {uuid.uuid4().hex}"
    SCRIPTS[prompt] = list(turns)
    return prompt


async def test_parallel_calls_join_in_call_order_and_the_task_completes(
    deployment: tuple[str, str],
) -> None:
    redis_url, prefix = deployment
    prompt = scripted_prompt(
        Reply(
            tool_calls=(
                ScriptedToolCall("add", {"a": 2, "b": 3}),
                ScriptedToolCall("add", {"a": [], "b": 3}),  # invalid arguments: answered
                ScriptedToolCall("not_a_tool", {}),
            )
        ),
        Reply(content="2 + 3 = 5"),
    )
    async with Client(redis_url, prefix) as client:
        task_id = await client.submit(SPEC, [HumanMessage(content=prompt)])
        done = await asyncio.wait_for(client.wait(task_id), 30)
        messages = await client.messages(task_id)

    assert isinstance(done, TaskCompleted) and done.answer == "2 + 3 = 5" and done.steps == 2
    assert [m.type for m in messages] == ["human", "ai", "tool", "tool", "tool", "ai"]
    ai = messages[1]
    assert isinstance(ai, AIMessage)
    results = [m for m in messages if isinstance(m, ToolMessage)]
    assert [r.tool_call_id for r in results] == [c.id for c in ai.tool_calls]
    assert results[0].text() == "5"
    assert results[1].status == "error" and "Error invoking tool 'add'" in results[1].text()
    assert results[2].status == "error" and "not_a_tool" in results[2].text()


async def test_a_tool_that_raises_fails_its_task_with_the_exception(
    deployment: tuple[str, str],
) -> None:
    redis_url, prefix = deployment
    call = ScriptedToolCall("fail_always", {"reason": "no network"})
    prompt = scripted_prompt(Reply(tool_calls=(call,)), Reply(content="never"))
    async with Client(redis_url, prefix) as client:
        task_id = await client.submit(SPEC, [HumanMessage(content=prompt)])
        _, outcome = await asyncio.wait_for(client.outcome(task_id), 30)
        log = [e async for _, e in client.events(task_id, follow=False)]
    assert isinstance(outcome, TaskFailed) and outcome.exception is not None
    assert outcome.exception.type == "builtins:RuntimeError"
    assert outcome.exception.message == "cannot do it: no network"
    assert "ToolFailed" not in [e.type for e in log]  # the loop's input, not the task's log


async def test_the_step_limit_ends_a_task_that_never_answers(
    deployment: tuple[str, str],
) -> None:
    redis_url, prefix = deployment
    prompt = scripted_prompt(*[Reply(tool_calls=(ScriptedToolCall("add", {"a": 1, "b": 1}),))] * 5)
    async with Client(redis_url, prefix) as client:
        task_id = await client.submit(SPEC, [HumanMessage(content=prompt)])
        _, outcome = await asyncio.wait_for(client.outcome(task_id), 30)
    assert isinstance(outcome, TaskFailed)
    assert outcome.reason.startswith("step limit reached") and "max_steps=3" in outcome.reason


async def test_ended_tasks_leave_empty_work_streams_and_only_their_own_keys_expire(
    deployment: tuple[str, str],
) -> None:
    redis_url, prefix = deployment
    names = Names(prefix)
    async with Client(redis_url, prefix) as client:
        ids = []
        for _ in range(5):
            prompt = scripted_prompt(
                Reply(tool_calls=(ScriptedToolCall("add", {"a": 1, "b": 2}),)), Reply(content="3")
            )
            ids.append(await client.submit(SPEC, [HumanMessage(content=prompt)]))
        await asyncio.wait_for(asyncio.gather(*(client.wait(t) for t in ids)), 30)
        redis = client.redis
        work = [stream for service in SERVICES for stream in names.inputs_of(service)]

        async def trimmed() -> bool:
            return sum([await redis.xlen(stream) for stream in work]) == 0

        await wait_for(trimmed, timeout=10)  # everything was acknowledged, then trimmed
        for service in SERVICES:
            for stream in names.inputs_of(service):
                info: Any = await redis.xpending(stream, GROUPS[service])
                assert info["pending"] == 0, stream
        for stream in (names.tasks, names.model, names.tools):
            assert await redis.exists(stream) == 1  # trimmed, not deleted
            assert await redis.ttl(stream) == -1
        assert await redis.ttl(names.deadlines) in (-1, -2)  # never given a TTL
        for key in (names.task_state(ids[0]), names.task_messages(ids[0]), names.task_log(ids[0])):
            assert 0 < await redis.ttl(key) <= RETENTION_S
        assert 0 < await redis.ttl(names.agent(SPEC.agent_id)) <= RETENTION_S
        assert json.loads(await redis.get(names.agent(SPEC.agent_id)) or "{}")


async def test_an_invalid_todo_list_is_answered_with_an_error_and_changes_nothing(
    deployment: tuple[str, str],
) -> None:
    redis_url, prefix = deployment
    good = {"todos": [{"content": "a", "status": "pending"}]}
    prompt = scripted_prompt(
        Reply(tool_calls=(ScriptedToolCall("write_todos", good),)),
        Reply(tool_calls=(ScriptedToolCall("write_todos", {"todos": [{"status": "pending"}]}),)),
        Reply(content="kept the first list"),
    )
    spec, _ = agent_from_dict({"model": "m", "middleware": [{"type": "TodoListMiddleware"}]})
    async with Client(redis_url, prefix) as client:
        task_id = await client.submit(spec, [HumanMessage(content=prompt)])
        await asyncio.wait_for(client.wait(task_id), 30)
        todos = await client.todos(task_id)
        log = [e async for _, e in client.events(task_id, follow=False)]
        messages = await client.messages(task_id)
    assert todos == good["todos"]
    assert [e.todos[0].status for e in log if isinstance(e, TodosUpdated)] == ["pending"]
    (error,) = [m for m in messages if isinstance(m, ToolMessage) and m.status == "error"]
    assert "content" in error.text()


async def test_context_edits_are_published_and_the_model_sees_the_placeholder(
    deployment: tuple[str, str], scripted: ScriptedOpenAIServer
) -> None:
    redis_url, prefix = deployment
    big = Reply(tool_calls=(ScriptedToolCall("big_output", {"n": 800}),))
    prompt = scripted_prompt(big, big, big, Reply(content="edited"))
    edits = [{"type": "ClearToolUsesEdit", "trigger": 300, "keep": 1}]
    spec, _ = agent_from_dict(
        {
            "model": "m",
            "tools": ["tests.tooling:big_output"],
            "middleware": [{"type": "ContextEditingMiddleware", "edits": edits}],
        }
    )
    async with Client(redis_url, prefix) as client:
        task_id = await client.submit(spec, [HumanMessage(content=prompt)], max_steps=5)
        await asyncio.wait_for(client.wait(task_id), 30)
        messages = await client.messages(task_id)
        published = await events_on(client.redis, Names(prefix).edits, ContextEdited)
    edited = [e for e in published if e.task_id == task_id]
    assert [e.step for e in edited] == [3, 4]
    assert [len(e.cleared_tool_call_ids) for e in edited] == [1, 2]
    assert all(e.tokens_after < e.tokens_before for e in edited)
    assert "[cleared]" not in json.dumps([m.model_dump() for m in messages])  # the view only
    seen = [r for r in scripted.chat_requests() if prompt in json.dumps(r["messages"][:2])]
    assert "[cleared]" not in json.dumps(seen[1]) and "[cleared]" in json.dumps(seen[2])


async def test_a_call_gated_per_call_waits_alone_while_the_step_goes_on(
    deployment: tuple[str, str],
) -> None:
    redis_url, prefix = deployment
    prompt = scripted_prompt(
        Reply(
            tool_calls=(
                ScriptedToolCall("add", {"a": 1, "b": 2}),
                ScriptedToolCall("big_output", {"n": 3}),
            )
        ),
        Reply(content="both done"),
    )
    gate = {"type": "HumanInTheLoopMiddleware", "interrupt_on": {"add": True}}
    spec, _ = agent_from_dict(
        {
            "model": "m",
            "tools": ["tests.tooling:add", "tests.tooling:big_output"],
            "middleware": [{**gate, "interrupt_mode": "per_call"}],
        }
    )
    names = Names(prefix)
    async with Client(redis_url, prefix) as client:
        task_id = await client.submit(spec, [HumanMessage(content=prompt)])
        (asked,) = await wait_for(lambda: client.waiting_calls(task_id), timeout=20)
        assert (asked.request["name"], asked.request["args"]) == ("add", {"a": 1, "b": 2})

        async def the_other_call_is_in() -> bool:
            return bool(await client.redis.hlen(names.task_results(task_id)))

        await wait_for(the_other_call_is_in, timeout=20)  # big_output ran meanwhile
        assert await client.status(task_id) == "running"

        assert await client.decide(task_id, {"type": "approve"}) == [asked.request["tool_call_id"]]
        done = await asyncio.wait_for(client.wait(task_id), 30)
        messages = await client.messages(task_id)
    assert done.answer == "both done"
    results = {m.name: m.text() for m in messages if isinstance(m, ToolMessage)}
    assert results == {"add": "3", "big_output": "xxx"}

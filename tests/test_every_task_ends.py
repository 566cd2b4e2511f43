"""Every task ends: an event of a task that a stage dead-letters, for any reason, ends
the task with TaskFailed naming the stage and the reason, and its waiting client hears
it. The services run as processes on a real Redis; the model is the scripted server."""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from collections.abc import Iterator

import pytest

from contracts import AgentSpec, DeadLettered, HumanMessage, TaskFailed
from contracts.streams import DATA_FIELD
from loopline.client import Client, TaskFailedError
from loopline.testing.harness import services_on
from loopline.testing.processes import ServiceProcesses
from loopline.testing.scripted import (
    Reply,
    ScriptedOpenAIServer,
    ScriptedToolCall,
    responder_by_prompt,
)
from tests.support import wait_for

SCRIPTS: dict[str, list[Reply]] = {}
ADD_SCHEMA = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


@pytest.fixture(scope="module")
def stack(redis_url: str) -> Iterator[ServiceProcesses]:
    with (
        ScriptedOpenAIServer(responder=responder_by_prompt(SCRIPTS)) as server,
        services_on(
            redis_url, server, LOOPLINE_CLAIM_IDLE_MS="300", LOOPLINE_MAX_DELIVERIES="2"
        ) as procs,
    ):
        yield procs


def calling_add(prompt: str) -> str:
    SCRIPTS[prompt] = [
        Reply(tool_calls=(ScriptedToolCall("add", {"a": 1, "b": 2}),)),
        Reply(content="done"),
    ]
    return prompt


async def ends_failed(client: Client, task_id: str) -> TaskFailed:
    with pytest.raises(TaskFailedError) as failed:
        await asyncio.wait_for(client.wait(task_id), 60)
    return failed.value.event


async def test_a_tool_missing_on_the_tools_service_fails_its_task(
    stack: ServiceProcesses,
) -> None:
    """The client computed the tool's schema; the tools service cannot import it."""
    spec = AgentSpec(
        model={"name": "gpt-4o-mini"},  # type: ignore[arg-type]
        tools=["tests.client_side_only:add"],  # allowed, but not importable there
        tool_schemas=[ADD_SCHEMA],
    )
    prompt = calling_add(f"missing {uuid.uuid4().hex}")
    async with Client(stack.redis_url, stack.prefix) as client:
        task_id = await client.submit(spec, [HumanMessage(content=prompt)])
        failed = await ends_failed(client, task_id)
        assert await client.status(task_id) == "failed"
    assert failed.reason.startswith("the tools stage could not handle ToolRequested:")
    assert "client_side_only" in failed.reason


def bus_submission(middleware: list[dict[str, object]]) -> dict[str, object]:
    """A TaskSubmitted put on the bus as data, past every client-side check."""
    spec = AgentSpec.model_validate({"model": {"name": "gpt-4o-mini"}, "middleware": middleware})
    return {
        "type": "TaskSubmitted",
        "task_id": uuid.uuid4().hex,
        "agent": json.loads(spec.model_dump_json()),
        "messages": [{"type": "human", "content": f"bus {uuid.uuid4().hex}"}],
    }


@pytest.mark.parametrize(
    ("middleware", "reason"),
    [
        pytest.param(
            {
                "type": "ContextEditingMiddleware",
                "params": {"edits": [{"type": "ClearToolUsesEdit", "trigger": "lots"}]},
            },
            "BadEvent: ContextEditingMiddleware: ClearToolUsesEdit: trigger must be int, "
            "got 'lots' (str)",
            id="a wrong-type parameter",
        ),
        pytest.param(
            {"type": "langchain.agents.middleware.shell_tool:ShellToolMiddleware", "params": {}},
            "BadEvent: ShellToolMiddleware: state field shell_session_resources cannot be "
            "stored (_SessionResources): a task's state is stored between its stages as "
            "LangGraph's checkpoint serializer carries it",
            id="ShellToolMiddleware",
        ),
    ],
)
async def test_a_spec_the_loop_refuses_fails_its_task_with_the_reason(
    stack: ServiceProcesses, middleware: dict[str, object], reason: str
) -> None:
    """A spec that create_agent and agent files refuse at the call, put on the bus as
    data: the loop refuses the submission before any stage runs, and the waiting client
    hears the one-line reason."""
    event = bus_submission([middleware])
    async with Client(stack.redis_url, stack.prefix) as client:
        await client.redis.xadd(client.names.tasks, {DATA_FIELD: json.dumps(event)})
        failed = await ends_failed(client, str(event["task_id"]))
        assert await client.status(str(event["task_id"])) == "failed"
    assert failed.reason == f"the loop stage could not handle TaskSubmitted: {reason}"


@pytest.mark.parametrize(
    "broken",
    [
        # (no messages at all is a task, as LangChain runs one: tests/test_input_parity.py)
        pytest.param({"messages": [{"type": "robot", "content": "x"}]}, id="an unknown message"),
        pytest.param({"agent": {"model": {"name": "gpt-4o-mini"}, "oops": 1}}, id="bad agent"),
    ],
)
async def test_a_refused_submission_ends_its_task(
    stack: ServiceProcesses, broken: dict[str, object]
) -> None:
    """A TaskSubmitted the loop cannot start still ends its task: the client that
    waits on it gets TaskFailed with the reason, and status says failed."""
    task_id = uuid.uuid4().hex
    event = {
        "type": "TaskSubmitted",
        "task_id": task_id,
        "agent": {"model": {"name": "gpt-4o-mini"}},
        "messages": [{"type": "human", "content": "hi"}],
        **broken,
    }
    async with Client(stack.redis_url, stack.prefix) as client:
        await client.redis.xadd(client.names.tasks, {DATA_FIELD: json.dumps(event)})
        failed = await ends_failed(client, task_id)
        assert await client.status(task_id) == "failed"

        async def lettered() -> bool:  # the dead letter is committed right after the end
            return any(letter.task_id == task_id for _, letter in await client.dead_letters(500))

        await wait_for(lettered, timeout=10)
    assert failed.reason.startswith("the loop stage could not handle TaskSubmitted:")


async def test_a_refused_cancel_or_decision_leaves_its_task_alone(
    stack: ServiceProcesses,
) -> None:
    """Requests about a task from outside that cannot apply are dead-lettered without
    ending the task they name."""
    spec = AgentSpec(model={"name": "gpt-4o-mini"}, tools=[])  # type: ignore[arg-type]
    prompt = f"plain {uuid.uuid4().hex}"
    SCRIPTS[prompt] = [Reply(content="fine")]
    async with Client(stack.redis_url, stack.prefix) as client:
        task_id = await client.submit(spec, [HumanMessage(content=prompt)])
        await asyncio.wait_for(client.wait(task_id), 60)
        decisions = {"type": "DecisionsSubmitted", "task_id": task_id, "decisions": [{}]}
        await client.redis.xadd(client.names.tasks, {DATA_FIELD: json.dumps(decisions)})
        await asyncio.sleep(1.5)
        assert await client.status(task_id) == "completed"


async def test_an_oversized_submission_ends_its_task_and_its_dead_letter_is_bounded(
    stack: ServiceProcesses,
) -> None:
    """A TaskSubmitted over LOOPLINE_MAX_EVENT_BYTES (1 MiB): its task ends, and its dead
    letter keeps 1 MiB of it with its whole size and hash, not all 3 MiB."""
    task_id = uuid.uuid4().hex
    event = {
        "type": "TaskSubmitted",
        "task_id": task_id,
        "agent": {"model": {"name": "gpt-4o-mini"}},
        "messages": [{"type": "human", "content": "x" * (3 * 1024 * 1024)}],
    }
    data = json.dumps(event).encode()
    async with Client(stack.redis_url, stack.prefix) as client:
        await client.redis.xadd(client.names.tasks, {DATA_FIELD: data})
        failed = await ends_failed(client, task_id)

        async def letter() -> DeadLettered | None:
            found = [d for _, d in await client.dead_letters(500) if d.task_id == task_id]
            return found[0] if found else None

        dead = await wait_for(letter, timeout=10)
    assert "exceeds the limit of 1048576 bytes" in failed.reason
    assert dead.truncated and dead.payload_bytes == len(data)
    assert len(dead.payload.encode()) <= 1024 * 1024
    assert dead.payload_sha256 == hashlib.sha256(data).hexdigest()

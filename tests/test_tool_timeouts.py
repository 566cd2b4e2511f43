"""Tools never hold the tools service hostage: per-call timeouts, calls whose task ended,
tools that raise SystemExit or KeyboardInterrupt, and SIGTERM with hung tools. The
services run as processes on a real Redis; the model is the scripted server."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections.abc import Iterator

import pytest

from contracts import ExceptionInfo, HumanMessage, TaskFailed, ToolMessage
from loopline.agentfile import agent_from_dict
from loopline.client import Client
from loopline.testing.scripted import (
    Reply,
    ScriptedOpenAIServer,
    ScriptedToolCall,
)
from tests.support import ServiceProcesses, unique_prefix

TOOLS = [
    "tests.tooling:add",
    "tests.tooling:hang",
    "tests.tooling:hang_async",
    "tests.tooling:exit_now",
    "tests.tooling:interrupt_async",
]
SCRIPTS: dict[str, list[Reply]] = {}
TOOL_SLOTS = 8


def calling(tool: str, args: dict[str, object]) -> list[Reply]:
    return [Reply(tool_calls=(ScriptedToolCall(tool, args),)), Reply(content=f"{tool} done")]


def services(redis_url: str, server: ScriptedOpenAIServer, **env: str) -> ServiceProcesses:
    full = {
        "OPENAI_BASE_URL": server.url,
        "OPENAI_API_KEY": "test",
        "LOOPLINE_CONCURRENCY_TOOLS": str(TOOL_SLOTS),
        **env,
    }
    return ServiceProcesses(redis_url, unique_prefix(), env=full)


@pytest.fixture(scope="module")
def stack(redis_url: str, scripted: ScriptedOpenAIServer) -> Iterator[ServiceProcesses]:
    with services(redis_url, scripted, LOOPLINE_TOOL_TIMEOUT_S="1") as procs:
        yield procs


def prompt_for(tool: str, args: dict[str, object]) -> str:
    prompt = f"{tool} {uuid.uuid4().hex}"
    SCRIPTS[prompt] = calling(tool, args)
    return prompt


async def run_task(client: Client, prompt: str, **extra: object) -> list[object]:
    """The messages of a task that completes."""
    spec = agent_from_dict({"model": "gpt-4o-mini", "tools": TOOLS, **extra})[0]
    task_id = await client.submit(spec, [HumanMessage(content=prompt)])
    await asyncio.wait_for(client.wait(task_id), 60)
    return list(await client.messages(task_id))


async def failure(client: Client, prompt: str, **extra: object) -> ExceptionInfo:
    """The exception a task failed with (a tool's exception fails its task, as in
    LangChain; a call past its time limit raises TimeoutError)."""
    spec = agent_from_dict({"model": "gpt-4o-mini", "tools": TOOLS, **extra})[0]
    task_id = await client.submit(spec, [HumanMessage(content=prompt)])
    _, outcome = await asyncio.wait_for(client.outcome(task_id), 60)
    assert isinstance(outcome, TaskFailed) and outcome.exception is not None, outcome
    return outcome.exception


def tool_result(messages: list[object]) -> ToolMessage:
    (found,) = [m for m in messages if isinstance(m, ToolMessage)]
    return found


async def test_hung_calls_time_out_and_free_their_slots(stack: ServiceProcesses) -> None:
    """Ten calls that hang (sync and async) on eight tool slots, each past its 1 s limit:
    every task fails with the call's TimeoutError, and a task after them completes."""
    async with Client(stack.redis_url, stack.prefix) as client:
        hung = [
            failure(client, prompt_for("hang" if i % 2 else "hang_async", {"seconds": 3600}))
            for i in range(TOOL_SLOTS + 2)
        ]
        started = time.monotonic()
        results = await asyncio.gather(*hung)
        took = time.monotonic() - started
        after = await run_task(client, prompt_for("add", {"a": 2, "b": 3}))

    for raised in results:
        assert raised.type == "builtins:TimeoutError"
        assert raised.message == "the call did not finish within 1 s"
    assert took < 30  # two rounds of 1 s timeouts, not 3600 s
    assert tool_result(after).text() == "5"
    assert stack.alive("tools")


async def test_the_agent_and_the_tool_set_their_own_timeouts(stack: ServiceProcesses) -> None:
    async with Client(stack.redis_url, stack.prefix) as client:
        by_agent = await run_task(client, prompt_for("hang", {"seconds": 1.5}), tool_timeout_s=5)
        by_tool = await failure(
            client,
            prompt_for("hang", {"seconds": 3600}),
            tool_timeout_s=60,
            tool_timeouts={"hang": 0.5},
        )
    assert tool_result(by_agent).text() == "woke up"
    assert by_tool.message == "the call did not finish within 0.5 s"


@pytest.mark.parametrize(
    ("tool", "raised"), [("exit_now", "SystemExit"), ("interrupt_async", "KeyboardInterrupt")]
)
async def test_a_tool_raising_a_base_exception_fails_only_its_task(
    stack: ServiceProcesses, tool: str, raised: str
) -> None:
    """Its task fails (with ``ToolAborted``: the client never raises SystemExit or
    KeyboardInterrupt again), the service lives on and runs the next task."""
    async with Client(stack.redis_url, stack.prefix) as client:
        aborted = await failure(client, prompt_for(tool, {"code": 3}))
        after = await run_task(client, prompt_for("add", {"a": 1, "b": 1}))
    assert aborted.type == "services.tools.threads:ToolAborted"
    assert aborted.message == f"the tool raised {raised}: 3"
    assert stack.alive("tools")
    assert tool_result(after).text() == "2"


async def test_a_cancelled_task_frees_its_hung_call_at_once(
    redis_url: str, scripted: ScriptedOpenAIServer
) -> None:
    """One tool slot, a call that would hang for an hour (the timeout is longer): cancel
    its task and the next task's call runs within seconds."""
    with services(redis_url, scripted, LOOPLINE_CONCURRENCY_TOOLS="1") as procs:
        async with Client(procs.redis_url, procs.prefix) as client:
            spec = agent_from_dict({"model": "gpt-4o-mini", "tools": TOOLS})[0]
            prompt = prompt_for("hang", {"seconds": 3600})
            stuck = await client.submit(spec, [HumanMessage(content=prompt)])
            await asyncio.sleep(1.5)  # the call is running
            await client.cancel(stuck, "not needed")
            started = time.monotonic()
            after = await run_task(client, prompt_for("add", {"a": 4, "b": 5}))
            took = time.monotonic() - started
    assert tool_result(after).text() == "9"
    assert took < 10


def test_sigterm_ends_the_tools_service_with_hung_tools(
    redis_url: str, scripted: ScriptedOpenAIServer
) -> None:
    """A sync tool hangs for an hour; SIGTERM still ends the process within the graceful
    timeout (the hung thread does not hold the exit)."""
    graceful_s = 2.0
    with services(redis_url, scripted, LOOPLINE_GRACEFUL_TIMEOUT_S=str(graceful_s)) as procs:

        async def start_hung_call() -> None:
            async with Client(procs.redis_url, procs.prefix) as client:
                spec = agent_from_dict({"model": "gpt-4o-mini", "tools": TOOLS})[0]
                prompt = prompt_for("hang", {"seconds": 3600})
                await client.submit(spec, [HumanMessage(content=prompt)])
                await asyncio.sleep(1.5)

        asyncio.run(start_hung_call())
        (tools,) = procs.procs["tools"]
        tools.send_signal(signal.SIGTERM)
        started = time.monotonic()
        tools.wait(timeout=graceful_s + 15)
        took = time.monotonic() - started
    assert took < graceful_s + 10


async def test_too_many_stuck_threads_make_the_tools_service_exit(
    redis_url: str, scripted: ScriptedOpenAIServer
) -> None:
    """Past LOOPLINE_TOOL_STUCK_MAX threads of timed-out sync calls the tools process
    hands its work over and exits, for its supervisor to start a fresh one."""
    env = {"LOOPLINE_TOOL_TIMEOUT_S": "0.5", "LOOPLINE_TOOL_STUCK_MAX": "1"}
    with services(redis_url, scripted, **env) as procs:
        async with Client(procs.redis_url, procs.prefix) as client:
            hung = [failure(client, prompt_for("hang", {"seconds": 3600})) for _ in range(2)]
            assert {e.type for e in await asyncio.gather(*hung)} == {"builtins:TimeoutError"}
        (tools,) = procs.procs["tools"]
        tools.wait(timeout=30)
        assert "handing this process's work over and exiting" in procs.output("tools")

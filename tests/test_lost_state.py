"""Lost state is reported, not hidden: Redis killed and restarted without persistence
while ten tasks run. Every waiting client returns with the error, the services recover
on their own (groups, consumers, specs written again), and the next task completes."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

import pytest

from contracts import AgentSpec, HumanMessage
from contracts.streams import Names
from loopline.client import LOST_STATE, Client, TaskFailedError
from loopline.testing.processes import ServiceProcesses
from loopline.testing.redis_server import RedisServer
from loopline.testing.scripted import (
    Reply,
    ScriptedOpenAIServer,
    ScriptedToolCall,
    responder_by_prompt,
)
from tests.support import unique_prefix, wait_for

SCRIPTS: dict[str, list[Reply]] = {}
RUNNING = 10


def task_prompt(tool_args: dict[str, object] | None) -> str:
    prompt = f"lost {uuid.uuid4().hex}"
    calls = (ScriptedToolCall("hang", tool_args),) if tool_args else ()
    SCRIPTS[prompt] = (
        [Reply(tool_calls=calls), Reply(content="ok")] if calls else [Reply(content="ok")]
    )
    return prompt


async def outcome(client: Client, task_id: str) -> str:
    try:
        await asyncio.wait_for(client.wait(task_id), 60)
    except TaskFailedError as failed:
        return failed.event.reason
    return "completed"


@pytest.mark.timeout(240)
async def test_a_redis_restart_without_persistence_ends_every_running_task(
    tmp_path: Path,
) -> None:
    server = RedisServer(tmp_path, persistent=False).start()
    spec = AgentSpec(model={"name": "gpt-4o-mini"}, tools=["tests.tooling:hang"])  # type: ignore[arg-type]
    prefix = unique_prefix()
    names = Names(prefix)
    try:
        with ScriptedOpenAIServer(responder=responder_by_prompt(SCRIPTS)) as model:
            env = {"OPENAI_BASE_URL": model.url, "OPENAI_API_KEY": "test"}
            with ServiceProcesses(server.url, prefix, env=env) as procs:
                async with Client(server.url, prefix) as client:
                    prompts = [task_prompt({"seconds": 20}) for _ in range(RUNNING)]
                    ids = [await client.submit(spec, [HumanMessage(content=p)]) for p in prompts]
                    waits = [asyncio.create_task(outcome(client, task_id)) for task_id in ids]

                    async def all_calls_running() -> bool:
                        states = [
                            await client.redis.hget(names.task_state(t), "phase") for t in ids
                        ]
                        return all(s == b"tools" for s in states)

                    await wait_for(all_calls_running, timeout=30)
                    server.kill()
                    killed = time.monotonic()
                    await asyncio.sleep(1)
                    server.start()  # the same port, nothing kept
                    reasons = await asyncio.gather(*waits)
                    ended_s = time.monotonic() - killed

                    async def consumers_listed() -> bool:
                        listed = await client.redis.hvals(names.consumers)
                        return {json.loads(v)["service"] for v in listed} >= set(procs.services)

                    await wait_for(consumers_listed, timeout=10)
                    after = await client.submit(spec, [HumanMessage(content=task_prompt(None))])
                    after_outcome = await outcome(client, after)
    finally:
        server.stop()
    assert reasons == [LOST_STATE] * RUNNING
    assert ended_s < 30
    assert after_outcome == "completed"

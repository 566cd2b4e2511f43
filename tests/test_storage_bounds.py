"""Storage stays bounded: after a batch of tasks the work streams hold only what some
group has not acknowledged, a finished task's keys and its agent's spec expire, and the
shared keys never do (the deadlines set, while a task with a deadline still runs,
included). The services run as processes on a real Redis."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from contracts import AgentSpec, HumanMessage
from contracts.streams import SERVICES, Names
from loopline.client import Client, TaskFailedError
from loopline.testing.harness import services_on
from loopline.testing.scripted import (
    Reply,
    ScriptedOpenAIServer,
    ScriptedToolCall,
    responder_by_prompt,
)
from tests.support import wait_for

SCRIPTS: dict[str, list[Reply]] = {}
TASKS = 20
RETENTION_S = 60


async def test_streams_are_trimmed_and_only_a_tasks_own_keys_expire(redis_url: str) -> None:
    spec = AgentSpec(
        model={"name": "gpt-4o-mini"}, tools=["tests.tooling:add", "tests.tooling:hang"]
    )  # type: ignore[arg-type]
    env = {"LOOPLINE_TRIM_INTERVAL_S": "0.5", "LOOPLINE_RETENTION_S": str(RETENTION_S)}
    with (
        ScriptedOpenAIServer(responder=responder_by_prompt(SCRIPTS)) as server,
        services_on(redis_url, server, **env) as procs,
    ):
        names = Names(procs.prefix)
        async with Client(procs.redis_url, procs.prefix) as client:
            prompts = [f"trim {uuid.uuid4().hex}" for _ in range(TASKS)]
            for prompt in prompts:
                SCRIPTS[prompt] = [
                    Reply(tool_calls=(ScriptedToolCall("add", {"a": 1, "b": 2}),)),
                    Reply(content="3"),
                ]
            parked_prompt = f"parked {uuid.uuid4().hex}"  # runs on, with a deadline
            SCRIPTS[parked_prompt] = [
                Reply(tool_calls=(ScriptedToolCall("hang", {"seconds": 20}),)),
                Reply(content="late"),
            ]
            parked = await client.submit(
                spec, [HumanMessage(content=parked_prompt)], deadline_s=120
            )
            ids = [await client.submit(spec, [HumanMessage(content=p)]) for p in prompts]
            await asyncio.gather(*(client.wait(task_id) for task_id in ids))
            redis = client.redis
            work = [stream for service in SERVICES for stream in names.inputs_of(service)]

            async def trimmed() -> bool:
                lengths = [await redis.xlen(stream) for stream in work]
                return sum(lengths) == 0

            # every finished task ran its retention EXPIRE; the parked task's deadline
            # is still kept, with no TTL from them
            assert await redis.zscore(names.deadlines, parked) is not None
            assert await redis.ttl(names.deadlines) == -1
            await client.cancel(parked)
            with pytest.raises(TaskFailedError):
                await asyncio.wait_for(client.wait(parked), 30)

            await wait_for(trimmed, timeout=15)  # everything was acknowledged
            for stream in (names.tasks, names.model, names.tools):
                assert await redis.exists(stream) == 1  # trimmed, not deleted
                assert await redis.ttl(stream) == -1
            assert await redis.ttl(names.deadlines) in (-1, -2)  # never given a TTL
            task = ids[0]
            for key in (names.task_state(task), names.task_messages(task), names.task_log(task)):
                assert 0 < await redis.ttl(key) <= RETENTION_S
            assert 0 < await redis.ttl(names.agent(spec.agent_id)) <= RETENTION_S

"""Redis at maxmemory (noeviction): a batch of tasks is submitted while memory fills, so
the services' writes are refused in the middle of their steps; once the limit is raised,
no task stays running: what Redis refused is retried until it can be recorded, so every
accepted task completes, and no dead letter says "last error: unknown". The services run
as processes on a Redis server of the test's own; the model is the scripted server."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.exceptions import OutOfMemoryError

from contracts import AgentSpec, HumanMessage
from loopline.client import Client, TaskFailedError
from loopline.testing.processes import ServiceProcesses
from loopline.testing.redis_server import RedisServer
from loopline.testing.scripted import (
    Reply,
    ScriptedOpenAIServer,
    ScriptedToolCall,
    responder_by_prompt,
)
from tests.support import unique_prefix

SCRIPTS: dict[str, list[Reply]] = {}
BATCH = 80
HEADROOM = 512 * 1024
"""Bytes over the memory in use when the batch starts: room for a part of the batch."""
FULL_FOR_S = 4.0
"""How long memory stays full after the batch: longer than all the deliveries an entry
may have (max deliveries times the claim idle time), so a refused write outlives them."""
ENDS_WITHIN_S = 60
"""The bound on how long after memory is back every task has ended."""
PADDING = "p" * 2048


def two_step_prompt() -> str:
    """A task with a tool call that takes a while and a final answer: it is in flight
    when memory runs out, and writes at every stage."""
    prompt = f"oom {uuid.uuid4().hex} {PADDING}"
    SCRIPTS[prompt] = [
        Reply(tool_calls=(ScriptedToolCall("hang", {"seconds": 0.5}),)),
        Reply(content="done"),
    ]
    return prompt


async def submit_batch(client: Client, spec: AgentSpec) -> tuple[list[str], int]:
    """Submit BATCH tasks; returns the accepted ids and how many Redis refused."""
    accepted: list[str] = []
    refused = 0
    for _ in range(BATCH):
        try:
            accepted.append(await client.submit(spec, [HumanMessage(content=two_step_prompt())]))
        except OutOfMemoryError:
            refused += 1
        await asyncio.sleep(0.02)  # a stream of traffic, not one burst
    return accepted, refused


async def outcome(client: Client, task_id: str, timeout: float) -> str:
    """How the task ended: "completed", its failure's reason, or "stuck" when nothing
    ended it within ``timeout`` seconds."""
    try:
        await asyncio.wait_for(client.wait(task_id), timeout)
    except TaskFailedError as failed:
        return failed.event.reason
    except TimeoutError:
        return "stuck"
    return "completed"


@pytest.mark.timeout(300)
async def test_no_task_stays_running_after_redis_ran_out_of_memory(tmp_path: Path) -> None:
    server = RedisServer(
        tmp_path, persistent=False, extra=("--maxmemory-policy", "noeviction")
    ).start()
    spec = AgentSpec(model={"name": "gpt-4o-mini"}, tools=["tests.tooling:hang"])  # type: ignore[arg-type]
    prefix = unique_prefix()
    admin = aioredis.Redis.from_url(server.url)
    try:
        with ScriptedOpenAIServer(responder=responder_by_prompt(SCRIPTS)) as model:
            env = {
                "OPENAI_BASE_URL": model.url,
                "OPENAI_API_KEY": "test",
                "LOOPLINE_CLAIM_IDLE_MS": "300",
                "LOOPLINE_MAX_DELIVERIES": "3",
            }
            with ServiceProcesses(server.url, prefix, env=env):
                async with Client(server.url, prefix) as client:
                    warm = await client.submit(spec, [HumanMessage(content=two_step_prompt())])
                    assert await outcome(client, warm, 60) == "completed"
                    used = int((await admin.info("memory"))["used_memory"])
                    await admin.config_set("maxmemory", used + HEADROOM)
                    accepted, refused = await submit_batch(client, spec)  # memory fills
                    bound = FULL_FOR_S + ENDS_WITHIN_S
                    waits = [asyncio.create_task(outcome(client, t, bound)) for t in accepted]
                    await admin.config_set("maxmemory", 1)  # and stays full: no write passes
                    await asyncio.sleep(FULL_FOR_S)
                    errors = await admin.info("errorstats")
                    refused_writes = int(errors.get("errorstat_OOM", {}).get("count", 0))
                    await admin.config_set("maxmemory", 0)
                    freed = time.monotonic()
                    outcomes = await asyncio.gather(*waits)
                    ended_s = time.monotonic() - freed
                    states = [await client.status(t) for t in accepted]  # what status counts
                    after = await client.submit(spec, [HumanMessage(content=two_step_prompt())])
                    after_outcome = await outcome(client, after, 60)
                    unknown = [
                        letter.error
                        for _, letter in await client.dead_letters(10_000)
                        if "unknown" in letter.error
                    ]
    finally:
        await admin.aclose()
        server.stop()
    stuck = outcomes.count("stuck")
    failures = [o for o in outcomes if o not in ("completed", "stuck")]
    print(
        f"\nmaxmemory: {len(accepted)} tasks accepted, {refused} refused at submission, "
        f"{outcomes.count('completed')} completed, {len(failures)} failed, {stuck} stuck; "
        f"{refused_writes - refused} writes of the services refused; all ended "
        f"{ended_s:.1f} s after memory was back"
    )
    for reason in sorted(set(failures)):
        print(f"  failed: {failures.count(reason)} x {reason}")
    assert accepted and refused, "memory must fill during the batch"
    assert refused_writes > refused, "the services' writes must be refused too"
    assert stuck == 0
    assert states.count("running") == 0
    assert not unknown, unknown  # a dead letter always names its last error
    # what Redis refused was retried until it could be recorded: nothing failed for it
    assert outcomes.count("completed") == len(accepted), failures
    assert after_outcome == "completed"

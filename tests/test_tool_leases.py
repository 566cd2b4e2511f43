"""A tool call's lease on a real Redis, when its worker died: a call whose tool may have
run answers "outcome unknown" (not declared idempotent), but a call whose worker died
while only its wrap_tool_call middleware ran (a per-call approval about to park it) runs
its chain again: the tool never started."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from contracts.events import ToolCompleted, ToolInterrupted, ToolRequested
from contracts.messages import ToolCall
from loopline.agentfile import agent_from_dict
from services.runtime import Runtime
from services.tasks.issued import record_field
from services.tools.handlers import handlers as tools_handlers
from tests.support import MakeRuntime, events_on, issue_calls, pending_on, run_entry

pytestmark = pytest.mark.fast

GATED_SPEC = agent_from_dict(
    {
        "model": "gpt-4o-mini",
        "tools": ["tests.tooling:slow_effect"],
        "middleware": [
            {
                "type": "HumanInTheLoopMiddleware",
                "interrupt_on": {"slow_effect": True},
                "interrupt_mode": "per_call",
            }
        ],
    }
)[0]


@pytest.fixture
async def rt(make_runtime: MakeRuntime) -> Runtime:
    return await make_runtime(claim_idle_ms=1000)


async def redeliver_after_death(rt: Runtime, task_id: str, record: dict[str, Any]) -> Any:
    """The call's record as its dead worker left it (lease run out), then a redelivery."""
    stream = rt.names.work("tools", task_id)  # the task's partition's, if partitioned
    on_tool = tools_handlers(rt)[stream]
    agent_id = await rt.save_agent(GATED_SPEC)
    call = ToolCall(id="c1", name="slow_effect", args={"tag": "t", "seconds": 0, "record": "-"})
    left = {"state": "running", "consumer": "dead", "until": time.time() - 1, **record}
    await rt.redis.hset(rt.names.task_calls(task_id), record_field(1, "c1"), json.dumps(left))
    await issue_calls(rt.redis, rt.names, task_id, agent_id, ["c1"])
    event = ToolRequested(task_id=task_id, step=1, agent_id=agent_id, call=call)
    await run_entry(rt, "tools", event, on_tool, stream=stream)
    # what the tools service published for the call, committed with the entry's ack
    loop = rt.names.work("loop", task_id)
    (published,) = [e for e in await events_on(rt.redis, loop) if e.task_id == task_id]
    assert await pending_on(rt.redis, stream, "tools") == 0
    return published


async def test_a_call_whose_worker_died_in_its_middleware_is_asked_again(rt: Runtime) -> None:
    published = await redeliver_after_death(rt, "died-early", {"started": False})
    assert isinstance(published, ToolInterrupted)  # parked for the human, not answered
    assert published.request["name"] == "slow_effect"
    record = json.loads(
        await rt.redis.hget(rt.names.task_calls("died-early"), record_field(1, "c1"))
    )
    assert record == {"state": "waiting"}


async def test_a_call_whose_tool_may_have_run_has_an_unknown_outcome(rt: Runtime) -> None:
    for task_id, record in (("died-late", {"started": True}), ("died-old", {})):
        published = await redeliver_after_death(rt, task_id, record)
        assert isinstance(published, ToolCompleted)
        assert "outcome of this call is unknown" in published.message.text()

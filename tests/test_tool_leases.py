"""A tool call's lease on a real Redis, when its worker died: a call whose tool may have
run answers "outcome unknown" (not declared idempotent), but a call whose worker died
while only its wrap_tool_call middleware ran (a per-call approval about to park it) runs
its chain again: the tool never started."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from contracts.events import ToolCompleted, ToolInterrupted, ToolRequested, dump_event, parse_event
from contracts.messages import ToolCall
from loopline.agentfile import agent_from_dict
from services.runtime import Runtime
from services.settings import Settings
from services.tools.handlers import handlers as tools_handlers
from tests.test_fused_commit import deliver, handle

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
async def rt(redis_url: str, prefix: str) -> AsyncIterator[Runtime]:
    runtime = Runtime(redis_url, Settings(prefix=prefix, claim_idle_ms=1000))
    stream = runtime.names.inputs_of("tools")[0]
    await runtime.redis.xgroup_create(stream, "tools", id="0", mkstream=True)
    yield runtime
    await runtime.close()


async def redeliver_after_death(rt: Runtime, task_id: str, record: dict[str, Any]) -> Any:
    """The call's record as its dead worker left it (lease run out), then a redelivery."""
    (on_tool,) = tools_handlers(rt).values()
    agent_id = await rt.save_agent(GATED_SPEC)
    call = ToolCall(id="c1", name="slow_effect", args={"tag": "t", "seconds": 0, "record": "-"})
    left = {"state": "running", "consumer": "dead", "until": time.time() - 1, **record}
    await rt.redis.hset(rt.names.task_calls(task_id), "c1", json.dumps(left))
    event = ToolRequested(task_id=task_id, step=1, agent_id=agent_id, call=call)
    entry = await deliver(rt, "tools", dump_event(event))
    await handle(entry, on_tool(event))
    (published,) = [parse_event(data) for _, data in entry.outbox]
    return published


async def test_a_call_whose_worker_died_in_its_middleware_is_asked_again(rt: Runtime) -> None:
    published = await redeliver_after_death(rt, "died-early", {"started": False})
    assert isinstance(published, ToolInterrupted)  # parked for the human, not answered
    assert published.request["name"] == "slow_effect"
    record = json.loads(await rt.redis.hget(rt.names.task_calls("died-early"), "c1"))
    assert record == {"state": "waiting"}


async def test_a_call_whose_tool_may_have_run_has_an_unknown_outcome(rt: Runtime) -> None:
    for task_id, record in (("died-late", {"started": True}), ("died-old", {})):
        published = await redeliver_after_death(rt, task_id, record)
        assert isinstance(published, ToolCompleted)
        assert "outcome of this call is unknown" in published.message.text()

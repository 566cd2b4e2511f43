"""``loopline stats``: analytics computed from the tasks' own event logs.

Per agent (by name): tasks (completed, failed, waiting), steps, model calls, tokens, tool
calls and tool errors, and latency percentiles per stage: ``model`` (a step's start to the
model's reply, context included), ``tools`` (the reply to each tool result) and ``task``
(submission to the end). Logs are read with SCAN, so this suits analytics, not a hot path.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis

from contracts.events import (
    AnyEvent,
    ApprovalRequested,
    ModelResponded,
    StepStarted,
    TaskCompleted,
    TaskFailed,
    TaskSubmitted,
    ToolCompleted,
    parse_event,
)
from contracts.streams import DATA_FIELD, Names


@dataclass
class AgentStats:
    tasks: int = 0
    completed: int = 0
    failed: int = 0
    waiting: int = 0
    steps: int = 0
    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    latency: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: v for k, v in self.__dict__.items() if k != "latency"}
        out["latency_ms"] = {
            stage: percentiles(values) for stage, values in sorted(self.latency.items())
        }
        return out


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2)

    return {"count": len(ordered), "p50": at(0.5), "p90": at(0.9), "p99": at(0.99)}


def add_task(stats: dict[str, AgentStats], log: list[AnyEvent]) -> None:
    if not log or not isinstance(log[0], TaskSubmitted):
        return
    submitted = log[0]
    agent = stats.setdefault(submitted.agent_name, AgentStats())
    agent.tasks += 1
    step_started: dict[int, float] = {}
    replied: dict[int, float] = {}
    for event in log:
        if isinstance(event, StepStarted):
            agent.steps += 1
            step_started[event.step] = event.at
        elif isinstance(event, ModelResponded):
            agent.model_calls += 1
            usage = event.message.usage_metadata or {}
            agent.input_tokens += int(usage.get("input_tokens", 0))
            agent.output_tokens += int(usage.get("output_tokens", 0))
            replied[event.step] = event.at
            if event.step in step_started:
                agent.latency["model"].append(event.at - step_started[event.step])
        elif isinstance(event, ToolCompleted):
            agent.tool_calls += 1
            agent.tool_errors += event.message.status == "error"
            if event.step in replied:
                agent.latency["tools"].append(event.at - replied[event.step])
    last = log[-1]
    if isinstance(last, TaskCompleted):
        agent.completed += 1
        agent.latency["task"].append(last.at - submitted.at)
    elif isinstance(last, TaskFailed):
        agent.failed += 1
    elif isinstance(last, ApprovalRequested):
        agent.waiting += 1


async def collect(redis: aioredis.Redis, names: Names) -> dict[str, dict[str, Any]]:
    stats: dict[str, AgentStats] = {}
    pattern = names.task_key("*", "log").replace("{*}", "{*}")
    async for key in redis.scan_iter(match=pattern, count=500, _type="STREAM"):
        entries: Any = await redis.xrange(key)
        log = [parse_event(fields[DATA_FIELD.encode()]) for _, fields in entries]
        add_task(stats, log)
    return {name: s.summary() for name, s in sorted(stats.items())}

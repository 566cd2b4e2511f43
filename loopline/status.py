"""``loopline status``: what a deployment is doing, read from Redis alone.

- **services and consumers**: the consumer registry (``<prefix>:consumers``, where every
  process announces its consumers once they read, and removes them on a clean shutdown)
  joined with ``XINFO CONSUMERS`` of each input stream. A consumer Redis lists but nobody
  announces belongs to a process that is gone (its pending entries are reclaimed by the
  other replicas; the consumer itself is deleted once idle for long).
- **lag and pending** of each service's input streams, from ``XINFO GROUPS``: ``lag`` is
  how many entries the group has not been delivered yet, ``pending`` how many were
  delivered and not acknowledged (being handled, or waiting to be reclaimed). ``lag`` is
  null when Redis cannot tell (after entries were deleted from the middle of a stream).
- **dead letters**: ``XLEN`` of the dead-letter stream.
- **entries failing**: the entries a stage failed on and is retrying (``<prefix>:errors``,
  one field per entry with its last error), by the stage whose input stream holds them,
  and the first few with their task, event and error: while a stage retries an event,
  this names the stage at fault (the task's phase cannot: ``model`` covers both the
  context stage and the model stage).
- **the server**: ``INFO server`` (kind, version, pid, port); when it is the embedded
  server of a loopline process (``loopline up`` or a program calling ``create_agent`` with
  no ``REDIS_URL``), that process's pid, read from the server's folder name.
- **tasks in flight**: task state hashes whose ``status`` is ``running``, by phase
  (``model``, ``tools``, ``approval``: waiting for a human). Nothing maintains a count, so
  this SCANs the keyspace for ``<prefix>:task:*:state`` (``COUNT`` 1000 per call) and reads
  ``status``, ``phase`` and ``cause`` of every match, 500 per round trip; a failed task
  is counted under the stage that ended it (from its cause: a stage that dead-lettered
  one of its events, the model stage, the loop's own failures, a cancel, a deadline).
  The cost grows with the whole database, not with the running tasks: SCAN visits every
  key (the match is applied after), so a database of N keys costs about N/1000 round
  trips, plus one HMGET per task kept (finished tasks keep their keys for
  ``LOOPLINE_RETENTION_S``, a week by default). That is fine for an operator's command
  and too much for a tight monitoring loop: ``--no-tasks`` skips it. On a Redis
  Cluster the scan runs on every primary.

Every other figure costs a few commands per stream.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from contracts.events import TaskFailed, parse_event
from contracts.streams import GROUPS, SERVICES, Names
from loopline.embedded_server import owner_of
from services.redisconn import async_client
from services.runner import entry_payload, task_of
from services.secrets import redact
from services.tasks.state import Cause

SCAN_COUNT = 1000
READ_BATCH = 500
FAILING_SHOWN = 5
"""How many of the entries being retried the report shows with their task and error."""
FAILING_LOOKED_UP = 100
"""How many of them are looked up for the running tasks they hold."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


async def _stream_info(redis: aioredis.Redis, stream: str, group: str) -> dict[str, Any]:
    info: dict[str, Any] = {
        "stream": stream,
        "group": group,
        "exists": False,
        "length": 0,
        "lag": None,
        "pending": None,
        "entries_read": None,
        "consumers": [],
    }
    try:
        groups: Any = await redis.xinfo_groups(stream)
    except aioredis.ResponseError:  # no such stream: nothing was ever published or read
        return info
    info["exists"] = True
    info["length"] = int(await redis.xlen(stream))
    for g in groups:
        if _text(g["name"]) == group:
            lag = g.get("lag")
            info["lag"] = None if lag is None else int(lag)
            info["pending"] = int(g["pending"])
            read = g.get("entries-read")  # how many the group was ever handed: a rate's base
            info["entries_read"] = None if read is None else int(read)
            consumers: Any = await redis.xinfo_consumers(stream, group)
            info["consumers"] = [
                {"name": _text(c["name"]), "pending": int(c["pending"]), "idle_ms": int(c["idle"])}
                for c in consumers
            ]
    return info


async def _task_states(
    redis: aioredis.Redis, names: Names, *fields: str
) -> AsyncIterator[tuple[str, list[Any]]]:
    """Every task state hash (SCAN) with these fields of it, ``READ_BATCH`` per round
    trip; a hash gone between the scan and the read is skipped (its status is None)."""
    keys = [key async for key in redis.scan_iter(match=_state_pattern(names), count=SCAN_COUNT)]
    for start in range(0, len(keys), READ_BATCH):
        batch = keys[start : start + READ_BATCH]
        async with redis.pipeline(transaction=False) as pipe:
            for key in batch:
                pipe.hmget(key, "status", *fields)
            rows: list[Any] = await pipe.execute()
        for key, row in zip(batch, rows, strict=True):
            if row[0] is not None:
                yield _text(key), row


def _state_pattern(names: Names) -> str:
    return f"{_glob_escape(names.prefix)}:task:*:state"


async def _tasks(redis: aioredis.Redis, names: Names) -> dict[str, Any]:
    by_status: dict[str, int] = {}
    by_phase: dict[str, int] = {}
    failed_by: dict[str, int] = {}
    keys = 0
    async for _, (status_raw, phase_raw, cause_raw) in _task_states(redis, names, "phase", "cause"):
        keys += 1
        status = _text(status_raw)
        by_status[status] = by_status.get(status, 0) + 1
        if status == "running":
            phase = _text(phase_raw or b"")
            by_phase[phase] = by_phase.get(phase, 0) + 1
        elif status == "failed":
            stage = ended_by(_text(cause_raw or b""))
            failed_by[stage] = failed_by.get(stage, 0) + 1
    return {
        "running": by_status.get("running", 0),
        "running_by_phase": dict(sorted(by_phase.items())),
        "kept": dict(sorted(by_status.items())),
        "failed_by": dict(sorted(failed_by.items())),
        "state_keys": keys,
        "method": f"SCAN MATCH {_state_pattern(names)} COUNT {SCAN_COUNT}",
    }


FAILED_SHOWN = 50
"""How many failed tasks ``failed_tasks`` gives by default (the newest)."""


async def failed_tasks(
    redis: aioredis.Redis, names: Names, limit: int = FAILED_SHOWN
) -> list[dict[str, Any]]:
    """The failed tasks the deployment keeps, newest first: each with the stage that
    ended it (``ended_by``), the reason its log ends with (``TaskFailed.reason``), its
    agent, thread and step. It SCANs the keyspace as the task counts do: an operator's
    view, not a hot path."""
    failed: list[tuple[str, str, str, str]] = []
    async for key, row in _task_states(redis, names, "cause", "agent", "thread"):
        if _text(row[0]) == "failed":
            task_id = names.task_of_state_key(key)
            failed.append((task_id, *(_text(v or b"") for v in row[1:])))  # type: ignore[arg-type]
    found: list[dict[str, Any]] = []
    for start in range(0, len(failed), READ_BATCH):  # each log's last entry, batched
        batch = failed[start : start + READ_BATCH]
        async with redis.pipeline(transaction=False) as pipe:
            for task_id, *_ in batch:
                pipe.xrevrange(names.task_log(task_id), count=1)
            lasts: list[Any] = await pipe.execute()
        found += [_failure(*row, last) for row, last in zip(batch, lasts, strict=True)]
    found.sort(key=lambda item: -(item["at"] or 0.0))
    return found[:limit]


def _failure(task_id: str, cause: str, agent: str, thread: str, last: Any) -> dict[str, Any]:
    """One failed task as ``failed_tasks`` shows it, its reason from its log's last entry."""
    event = parse_event(entry_payload(last[0][1])) if last else None
    ended = event if isinstance(event, TaskFailed) else None
    return {
        "task_id": task_id,
        "stage": ended_by(cause),
        "cause": cause,
        "reason": redact(ended.reason) if ended else "",
        "exception": ended.exception.type if ended and ended.exception else None,
        "step": ended.step if ended else None,
        "at": ended.at if ended else None,
        "agent": agent,
        "thread": thread,
    }


def ended_by(cause: str) -> str:
    """Who ended a failed task, from the cause its last transition recorded
    (``services.tasks.state.Cause``): the stage that dead-lettered one of its events
    (``refused:<stage>``), the model stage (``model-failed:<step>``), the tools stage
    (``tool-failed:<step>:<call>``: a tool raised), a cancel, a deadline; else the loop
    (its own failures: a hook that raised, the step limit)."""
    kind, _, rest = cause.partition(":")
    if kind == "refused":
        return rest or "?"
    if kind == "model-failed":
        return "model"
    if kind == "tool-failed":
        return "tools"
    if cause == Cause.CANCEL:
        return "cancelled"
    if cause == Cause.DEADLINE:
        return "deadline"
    return "loop" if kind else "?"


async def _failing(redis: aioredis.Redis, names: Names) -> dict[str, Any]:
    """The entries being retried after a failure, by the stage that failed on them; the
    running tasks they hold, by stage (the first ``FAILING_LOOKED_UP`` entries are looked
    up); the first ``FAILING_SHOWN`` with their task, event and last error."""
    stage_of = {stream: service for service in SERVICES for stream in names.inputs_of(service)}
    by_stage: dict[str, int] = {}
    looked_up: list[dict[str, Any]] = []
    async for field_raw, error_raw in redis.hscan_iter(names.errors, count=SCAN_COUNT):
        stream, _, entry_id = _text(field_raw).rpartition("|")
        stage = stage_of.get(stream, "?")
        by_stage[stage] = by_stage.get(stage, 0) + 1
        if len(looked_up) < FAILING_LOOKED_UP:
            error = redact(_text(error_raw))
            looked_up.append(
                {"stage": stage, "stream": stream, "entry_id": entry_id, "error": error}
            )
    held: dict[str, set[str]] = {}
    for item in looked_up:
        item["task_id"], item["event"] = await _entry_task(redis, item["stream"], item["entry_id"])
        if item["task_id"] and await _running(redis, names, item["task_id"]):
            held.setdefault(item["stage"], set()).add(item["task_id"])
    return {
        "entries": sum(by_stage.values()),
        "by_stage": dict(sorted(by_stage.items())),
        "running_tasks_by_stage": {stage: len(held[stage]) for stage in sorted(held)},
        "shown": looked_up[:FAILING_SHOWN],
    }


async def _running(redis: aioredis.Redis, names: Names, task_id: str) -> bool:
    return _text(await redis.hget(names.task_state(task_id), "status") or b"") == "running"


async def _entry_task(redis: aioredis.Redis, stream: str, entry_id: str) -> tuple[str, str]:
    """The task and event type of one stream entry ("" when gone or naming none)."""
    try:
        entries: Any = await redis.xrange(stream, entry_id, entry_id, count=1)
    except aioredis.ResponseError:  # not a stream id: a field nobody should have written
        return "", ""
    found = task_of(entry_payload(entries[0][1])) if entries else None
    return found if found is not None else ("", "")


async def _server(redis: aioredis.Redis) -> dict[str, Any] | None:
    """Which server answers, and whose embedded server it is; None on a Redis Cluster
    (each node answers for itself) or where INFO is not allowed."""
    if isinstance(redis, RedisCluster):
        return None
    try:
        info: Any = await redis.info("server")
    except aioredis.ResponseError:  # an ACL user without INFO
        return None
    if not isinstance(info, dict) or "process_id" not in info:
        return None
    folder = os.path.dirname(str(info.get("config_file") or ""))
    owner = owner_of(folder) if folder else None
    return {
        "name": str(info.get("server_name") or "redis"),
        "version": str(info.get("valkey_version") or info.get("redis_version") or ""),
        "pid": int(info["process_id"]),
        "port": int(info.get("tcp_port") or 0),
        "embedded": None if owner is None else {"owner_pid": owner, "folder": folder},
    }


async def collect(redis: aioredis.Redis, names: Names, *, tasks: bool = True) -> dict[str, Any]:
    """The status of the deployment with these names, as one JSON-able dict."""
    announced_raw: Any = await redis.hgetall(names.consumers)
    announced: dict[str, dict[str, Any]] = {}
    for name, value in announced_raw.items():
        try:
            announced[_text(name)] = dict(json.loads(value))
        except (ValueError, TypeError):
            announced[_text(name)] = {}
    now = time.time()
    services: dict[str, Any] = {}
    for service in SERVICES:
        streams = [await _stream_info(redis, s, GROUPS[service]) for s in names.inputs_of(service)]
        consumers: dict[str, dict[str, Any]] = {}
        for name, meta in announced.items():
            if meta.get("service") == service:
                consumers[name] = _consumer(name, meta, now)
        for stream in streams:
            for c in stream.pop("consumers"):
                entry = consumers.setdefault(c["name"], _consumer(c["name"], None, now))
                entry["pending"] += c["pending"]
                idle = entry["idle_ms"]
                entry["idle_ms"] = c["idle_ms"] if idle is None else min(idle, c["idle_ms"])
        services[service] = {
            "consumers": [consumers[name] for name in sorted(consumers)],
            "live": sum(1 for c in consumers.values() if c["announced"]),
            "streams": streams,
        }
    report: dict[str, Any] = {
        "prefix": names.prefix,
        "server": await _server(redis),
        "services": services,
        "dlq": {"stream": names.dlq, "length": int(await redis.xlen(names.dlq))},
        "failing": await _failing(redis, names),
        "tasks": await _tasks(redis, names) if tasks else None,
    }
    return report


def _consumer(name: str, meta: dict[str, Any] | None, now: float) -> dict[str, Any]:
    started = meta.get("started") if meta else None
    return {
        "name": name,
        "announced": meta is not None,
        "host": meta.get("host") if meta else None,
        "pid": meta.get("pid") if meta else None,
        "started": started,
        "uptime_s": round(now - float(started), 1) if started else None,
        "pending": 0,
        "idle_ms": None,
    }


async def status(url: str, prefix: str, *, tasks: bool = True) -> dict[str, Any]:
    """``collect`` on a fresh connection to ``url`` (a server or a Redis Cluster)."""
    redis = async_client(url)
    try:
        return await collect(redis, Names(prefix), tasks=tasks)
    finally:
        await redis.aclose()


# -- rendering ---------------------------------------------------------------------------


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def _num(value: Any) -> str:
    return "-" if value is None else str(value)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


def _server_line(server: dict[str, Any]) -> str:
    line = (
        f"server: {server['name']} {server['version']}, pid {server['pid']}, port {server['port']}"
    )
    embedded = server.get("embedded")
    if embedded:
        line += (
            f"; the embedded server of process {embedded['owner_pid']}, "
            f"which it stops with itself ({embedded['folder']})"
        )
    return line


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k or '?'} {v}" for k, v in counts.items())


def _failing_lines(failing: dict[str, Any] | None) -> list[str]:
    """The entries being retried, by stage, and the first few with their error."""
    if not failing or not failing["entries"]:
        return []
    lines = [f"entries failing, retried: {failing['entries']} ({_counts(failing['by_stage'])})"]
    for item in failing["shown"]:
        what = f"{item['event'] or 'an event'} of task {item['task_id'] or '?'}"
        error = item["error"] if len(item["error"]) <= 160 else item["error"][:157] + "..."
        lines.append(f"  {item['stage']}: {what}: {error}")
    return lines


def _tasks_line(tasks: dict[str, Any] | None, failing: dict[str, Any] | None) -> str:
    """The running tasks by phase (and the ones a failing stage holds, by that stage),
    then the finished ones kept (the failed ones by the stage that ended them)."""
    if tasks is None:
        return "tasks in flight: not counted (--no-tasks)"
    phases = _counts(tasks["running_by_phase"])
    held = (failing or {}).get("running_tasks_by_stage")
    if held:
        phases += f"; held by a failing stage: {_counts(held)}"
    kept = []
    for status, count in tasks["kept"].items():
        if status == "running":
            continue
        by = tasks.get("failed_by") if status == "failed" else None
        kept.append(f"{status} {count}" + (f" ({_counts(by)})" if by else ""))
    return (
        f"tasks in flight: {tasks['running']}"
        + (f" ({phases})" if phases else "")
        + f"; finished and kept: {', '.join(kept) or 'none'}"
    )


def service_rows(report: dict[str, Any]) -> list[list[str]]:
    """The services table: a header, then one row per input stream of each service."""
    rows = [["SERVICE", "CONSUMERS", "STREAM", "LENGTH", "LAG", "PENDING"]]
    for service, info in report["services"].items():
        for i, stream in enumerate(info["streams"]):
            group = stream["pending"] is not None
            rows.append(
                [
                    service if i == 0 else "",
                    str(info["live"]) if i == 0 else "",
                    stream["stream"],
                    str(stream["length"]),
                    _num(stream["lag"]) if group else "no group",
                    _num(stream["pending"]),
                ]
            )
    return rows


def consumer_rows(report: dict[str, Any]) -> list[list[str]]:
    """The consumers table: a header, then one row per consumer (only the header when
    no service runs)."""
    rows = [["CONSUMER", "SERVICE", "HOST", "PID", "UP", "IDLE", "PENDING"]]
    for service, info in report["services"].items():
        for c in info["consumers"]:
            idle = None if c["idle_ms"] is None else c["idle_ms"] / 1000
            rows.append(
                [
                    c["name"] + ("" if c["announced"] else " (gone?)"),
                    service,
                    _num(c["host"]),
                    _num(c["pid"]),
                    _duration(c["uptime_s"]),
                    _duration(idle),
                    str(c["pending"]),
                ]
            )
    return rows


def summary_lines(report: dict[str, Any]) -> list[str]:
    """Dead letters, the entries being retried, the tasks."""
    dlq = report["dlq"]
    lines = [f"dead letters: {dlq['length']} ({dlq['stream']}; see `loopline dlq list`)"]
    lines.extend(_failing_lines(report.get("failing")))
    lines.append(_tasks_line(report["tasks"], report.get("failing")))
    return lines


NO_CONSUMERS = "no consumers: no service of this deployment is running"


def render(report: dict[str, Any]) -> str:
    """The report as compact text tables (for a pipe or a file)."""
    lines = [_server_line(report["server"]), ""] if report.get("server") else []
    lines += _table(service_rows(report))
    lines += ["", *summary_lines(report), ""]
    consumers = consumer_rows(report)
    lines += _table(consumers) if len(consumers) > 1 else [NO_CONSUMERS]
    return "\n".join(lines)


def server_line(report: dict[str, Any]) -> str | None:
    return _server_line(report["server"]) if report.get("server") else None

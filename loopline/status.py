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
- **the server**: ``INFO server`` (kind, version, pid, port); when it is the embedded
  server of a loopline process (``loopline up`` or a program calling ``create_agent`` with
  no ``REDIS_URL``), that process's pid, read from the server's folder name.
- **tasks in flight**: task state hashes whose ``status`` is ``running``, by phase
  (``model``, ``tools``, ``approval``: waiting for a human). Nothing maintains a count, so
  this SCANs the keyspace for ``<prefix>:task:*:state`` (``COUNT`` 1000 per call) and reads
  ``status`` and ``phase`` of every match, 500 per round trip. The cost grows with the
  whole database, not with the running tasks: SCAN visits every key (the match is applied
  after), so a database of N keys costs about N/1000 round trips, plus one HMGET per task
  kept (finished tasks keep their keys for ``LOOPLINE_RETENTION_S``, a week by default).
  That is fine for an operator's command and too much for a tight monitoring loop:
  ``--no-tasks`` skips it. On a Redis Cluster the scan runs on every primary.

Every other figure costs a few commands per stream.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from contracts.streams import GROUPS, SERVICES, Names
from loopline.embedded_server import owner_of
from services.redisconn import async_client

SCAN_COUNT = 1000
READ_BATCH = 500


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
            consumers: Any = await redis.xinfo_consumers(stream, group)
            info["consumers"] = [
                {"name": _text(c["name"]), "pending": int(c["pending"]), "idle_ms": int(c["idle"])}
                for c in consumers
            ]
    return info


async def _tasks(redis: aioredis.Redis, names: Names) -> dict[str, Any]:
    pattern = f"{_glob_escape(names.prefix)}:task:*:state"
    keys = [key async for key in redis.scan_iter(match=pattern, count=SCAN_COUNT)]
    by_status: dict[str, int] = {}
    by_phase: dict[str, int] = {}
    for start in range(0, len(keys), READ_BATCH):
        async with redis.pipeline(transaction=False) as pipe:
            for key in keys[start : start + READ_BATCH]:
                pipe.hmget(key, "status", "phase")
            rows: list[Any] = await pipe.execute()
        for status_raw, phase_raw in rows:
            if status_raw is None:  # expired between the scan and the read
                continue
            status = _text(status_raw)
            by_status[status] = by_status.get(status, 0) + 1
            if status == "running":
                phase = _text(phase_raw or b"")
                by_phase[phase] = by_phase.get(phase, 0) + 1
    return {
        "running": by_status.get("running", 0),
        "running_by_phase": dict(sorted(by_phase.items())),
        "kept": dict(sorted(by_status.items())),
        "state_keys": len(keys),
        "method": f"SCAN MATCH {pattern} COUNT {SCAN_COUNT}",
    }


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


def render(report: dict[str, Any]) -> str:
    """The report as compact tables for a terminal."""
    head = [_server_line(report["server"]), ""] if report.get("server") else []
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
    lines = head + _table(rows)
    dlq = report["dlq"]
    lines.append("")
    lines.append(f"dead letters: {dlq['length']} ({dlq['stream']}; see `loopline dlq list`)")
    tasks = report["tasks"]
    if tasks is None:
        lines.append("tasks in flight: not counted (--no-tasks)")
    else:
        phases = ", ".join(f"{k or '?'} {v}" for k, v in tasks["running_by_phase"].items())
        kept = ", ".join(f"{k} {v}" for k, v in tasks["kept"].items() if k != "running")
        lines.append(
            f"tasks in flight: {tasks['running']}"
            + (f" ({phases})" if phases else "")
            + f"; finished and kept: {kept or 'none'}"
        )
    consumers = [c for info in report["services"].values() for c in info["consumers"]]
    services_of = {
        c["name"]: service
        for service, info in report["services"].items()
        for c in info["consumers"]
    }
    lines.append("")
    if not consumers:
        lines.append("no consumers: no service of this deployment is running")
        return "\n".join(lines)
    rows = [["CONSUMER", "SERVICE", "HOST", "PID", "UP", "IDLE", "PENDING"]]
    for c in consumers:
        idle = None if c["idle_ms"] is None else c["idle_ms"] / 1000
        rows.append(
            [
                c["name"] + ("" if c["announced"] else " (gone?)"),
                services_of[c["name"]],
                _num(c["host"]),
                _num(c["pid"]),
                _duration(c["uptime_s"]),
                _duration(idle),
                str(c["pending"]),
            ]
        )
    lines.extend(_table(rows))
    return "\n".join(lines)

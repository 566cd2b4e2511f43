"""``loopline threads list|show|history|rm``: the deployment's conversations; ``history``
lists a thread's checkpoints, one per superstep, as ``get_state_history`` does
(``loopline.history``)."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from loopline.cli.common import UsageError, check_redis, settings


def cmd_threads(args: argparse.Namespace) -> int:
    current = settings()
    if not current.redis_url:
        raise UsageError("threads needs REDIS_URL: the deployment whose threads to read")
    if args.action in ("show", "history", "rm") and not args.thread_id:
        raise UsageError(f"threads {args.action} needs a thread id")
    return asyncio.run(_threads(args, current.redis_url, current.prefix))


async def _threads(args: argparse.Namespace, url: str, prefix: str) -> int:
    from loopline.client import Client

    await check_redis(url)
    async with Client(url, prefix) as client:
        reader = client.threads()
        if args.action == "list":
            found = await reader.list()
            rows: list[dict[str, Any]] = [
                {
                    "thread_id": t.thread_id,
                    "runs": len(t.runs),
                    "active": t.active,
                    "updated": t.updated,
                }
                for t in found
            ]
            if args.json:
                print(json.dumps(rows))
            for row in [] if args.json else rows:
                age = time.time() - float(row["updated"])
                busy = f", active run {row['active']}" if row["active"] else ""
                print(f"{row['thread_id']}  {row['runs']} runs, updated {age:.0f}s ago{busy}")
            return 0
        if args.action == "rm":
            try:
                removed = await reader.remove(args.thread_id)
            except ValueError as exc:
                raise UsageError(str(exc)) from exc
            if not removed:
                raise UsageError(f"no thread {args.thread_id!r}")
            print(f"removed thread {args.thread_id}")
            return 0
        if args.action == "history":
            return await _history(reader, args.thread_id, limit=args.limit, as_json=args.json)
        return await _show(reader, args.thread_id, as_json=args.json)


async def _history(reader: Any, thread_id: str, *, limit: int | None, as_json: bool) -> int:
    """The thread's checkpoints, newest first: id, step, source, what runs next, and
    how many messages the state holds."""
    from loopline.history import ThreadHistory

    if await reader.info(thread_id) is None:
        raise UsageError(f"no thread {thread_id!r}")
    states = await ThreadHistory(reader).snapshots(thread_id, limit=limit)
    rows = [
        {
            "checkpoint_id": s.config["configurable"]["checkpoint_id"],
            "step": (s.metadata or {}).get("step"),
            "source": (s.metadata or {}).get("source"),
            "next": list(s.next),
            "messages": len(s.values.get("messages", [])),
            "created_at": s.created_at,
        }
        for s in states
    ]
    if as_json:
        print(json.dumps(rows))
        return 0
    for row in rows:
        upcoming = ", ".join(row["next"]) or "-"
        print(
            f"{row['checkpoint_id']}  step {row['step']:>3} {row['source']:<6} "
            f"next {upcoming}  ({row['messages']} messages)"
        )
    return 0


async def _show(reader: Any, thread_id: str, *, as_json: bool) -> int:
    info = await reader.info(thread_id)
    if info is None:
        raise UsageError(f"no thread {thread_id!r}")
    state = await reader.current(thread_id)
    shown = {
        "thread_id": thread_id,
        "active": info.active,
        "runs": info.runs,
        "messages": [m.model_dump(mode="json", exclude_none=True) for m in state.messages],
        "todos": state.todos,
        "state": state.extra,
    }
    if as_json:
        print(json.dumps(shown))
        return 0
    print(
        f"thread {thread_id}: {len(info.runs)} runs"
        + (f", active {info.active}" if info.active else "")
    )
    for run_id in await reader.run_ids(thread_id):
        print(f"  run {run_id}: {info.runs.get(run_id, '?')}")
    for m in state.messages:
        text = m.text() or (", ".join(c.name for c in getattr(m, "tool_calls", [])) or "")
        print(f"  {m.type}: {text[:200]}")
    if state.todos:
        print("  todos: " + "; ".join(f"{t['content']} [{t['status']}]" for t in state.todos))
    return 0

"""Commands for the operator of a deployment: ``status``, ``stats``, ``dlq`` (dead
letters), and the contracts as documents: ``schema``, ``asyncapi``."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TYPE_CHECKING, Any

from contracts.events import event_schemas
from loopline.cli.common import UsageError, check_redis, deployment
from loopline.cli.live import is_terminal
from loopline.cli.render import dead_letter_line, json_line
from loopline.cli.tables import latency_rows, show_table, stats_rows

if TYPE_CHECKING:
    from loopline.client import Client


def cmd_stats(args: argparse.Namespace) -> int:
    import redis.asyncio as aioredis

    from contracts.streams import Names
    from loopline.stats import collect
    from services.redisconn import async_client

    url, prefix = deployment()

    async def main() -> dict[str, dict[str, Any]]:
        await check_redis(url)
        client: aioredis.Redis = async_client(url)  # a server or a Redis Cluster
        try:
            return await collect(client, Names(prefix))
        finally:
            await client.aclose()

    stats = asyncio.run(main())
    if args.json:
        print(json.dumps(stats))
        return 0
    if not stats:
        print("no tasks found", file=sys.stderr)
        return 0
    show_table(stats_rows(stats), title="tasks by agent")
    print()
    show_table(latency_rows(stats), title="stage latencies")
    return 0


def cmd_dlq(args: argparse.Namespace) -> int:
    from loopline.client import Client

    url, prefix = deployment()

    async def main() -> int:
        await check_redis(url)
        async with Client(url, prefix) as client:
            if args.action == "list":
                return await _list_dead_letters(client, args)
            if not args.id:
                raise UsageError(f"dlq {args.action} needs an entry ID (see `loopline dlq list`)")
            try:
                await _act_on_dead_letter(client, args)
            except KeyError as exc:
                raise UsageError(f"no dead letter {args.id}") from exc
        return 0

    return asyncio.run(main())


async def _list_dead_letters(client: Client, args: argparse.Namespace) -> int:
    letters = await client.dead_letters(count=args.count)
    if args.json:
        for entry_id, letter in letters:
            print(json_line(entry_id, letter))
    else:
        for entry_id, letter in letters:
            print(dead_letter_line(entry_id, letter))
        print(f"{len(letters)} dead letter(s)", file=sys.stderr)
    return 0


async def _act_on_dead_letter(client: Client, args: argparse.Namespace) -> None:
    """``show``, ``replay`` or ``drop`` one dead letter; KeyError when there is none."""
    if args.action == "show":
        letter = await client.dead_letter(args.id)
        print(json.dumps(letter.model_dump(mode="json"), indent=2))
    elif args.action == "replay":
        new_id = await client.replay(args.id)
        print(
            json.dumps({"replayed": args.id, "as": new_id})
            if args.json
            else f"replayed {args.id} as {new_id}"
        )
    elif not await client.drop(args.id):
        raise KeyError(args.id)
    else:
        print(json.dumps({"dropped": args.id}) if args.json else f"dropped {args.id}")


def cmd_schema(args: argparse.Namespace) -> int:
    print(json.dumps(event_schemas(), indent=2))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from loopline.status import render, status

    url, prefix = deployment()

    async def main() -> dict[str, object]:
        await check_redis(url)
        return await status(url, prefix, tasks=not args.no_tasks)

    report = asyncio.run(main())
    if args.json:
        print(json.dumps(report))
    elif not is_terminal(sys.stdout):
        print(render(report))
    else:
        _show_status(report)
    return 0


def _show_status(report: dict[str, Any]) -> None:
    """The status report as tables in a terminal."""
    from loopline.status import (
        NO_CONSUMERS,
        consumer_rows,
        server_line,
        service_rows,
        summary_lines,
    )

    if line := server_line(report):
        print(line)
    show_table(service_rows(report), title="services")
    for line in summary_lines(report):
        print(line)
    consumers = consumer_rows(report)
    if len(consumers) > 1:
        show_table(consumers, title="consumers")
    else:
        print(NO_CONSUMERS)


def cmd_asyncapi(args: argparse.Namespace) -> int:
    from loopline.asyncapi import run

    return run(args)


def cmd_doctor(args: argparse.Namespace) -> int:
    """Check the deployment; exit 1 when a check failed."""
    from loopline.doctor import as_json, diagnose
    from services.redisconn import async_client

    url, prefix = deployment()

    async def main() -> list[Any]:
        await check_redis(url)
        client = async_client(url)
        try:
            from contracts.streams import Names

            return await diagnose(client, Names(prefix))
        finally:
            await client.aclose()

    checks = asyncio.run(main())
    report = as_json(checks)
    if args.json:
        print(json.dumps(report))
    else:
        show_table([["CHECK", "STATUS", "DETAIL", "FIX"], *(c.as_row() for c in checks)])
        failed = sum(c.level == "fail" for c in checks)
        warned = sum(c.level == "warn" for c in checks)
        print(f"{failed} failed, {warned} warning(s), {len(checks) - failed - warned} ok")
    return 0 if report["ok"] else 1

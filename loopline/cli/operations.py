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
from loopline.cli.render import dead_letter_line, json_line, stats_lines

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
    for line in stats_lines(stats):
        print(line)
    if not stats:
        print("no tasks found", file=sys.stderr)
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
        print(f"replayed {args.id} as {new_id}")
    elif not await client.drop(args.id):
        raise KeyError(args.id)
    else:
        print(f"dropped {args.id}")


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
    print(json.dumps(report) if args.json else render(report))
    return 0


def cmd_asyncapi(args: argparse.Namespace) -> int:
    from loopline.asyncapi import run

    return run(args)

"""The client side of one ``benchmarks.ab`` measurement, run with a tree's own code.

Each tree's services validate the events of that tree's contracts, so a revision must be
driven by its own client: ``benchmarks.ab`` copies this file into every exported tree and
runs it there (``PYTHONPATH`` = the tree). It uses only what every measured revision has
(``benchmarks.suite``, ``benchmarks.loopline_side``, ``loopline.client.Client``) and
prints one JSON object on stdout.

``python -m benchmarks.ab_client steps URL PREFIX``: a warm-up task, then the step
durations of 3 tasks of 25 model calls. ``python -m benchmarks.ab_client throughput URL
PREFIX``: steps per second over 200 tasks of 10 model calls. ``python -m
benchmarks.ab_client commands URL PREFIX``: the Redis commands the services send per
step, by command (``INFO commandstats`` around one task of 20 model calls): unlike time,
a count the machine's load does not move.
"""

from __future__ import annotations

import asyncio
import json
import sys

from benchmarks import suite
from loopline.client import Client


async def steps(url: str, prefix: str) -> list[float]:
    client = Client(url, prefix)
    try:
        await suite._loopline_task_steps(client, 5, "warm-up")
        durations: list[float] = []
        for t in range(3):
            durations += await suite._loopline_task_steps(client, 25, f"t{t}")
        return durations
    finally:
        await client.close()


async def throughput(url: str, prefix: str) -> float:
    return await suite._loopline_throughput(url, prefix, 200, 10)


async def commands(url: str, prefix: str) -> dict[str, float]:
    client = Client(url, prefix)
    try:
        await suite._loopline_task_steps(client, 5, "warm-up")
        return await suite._commands_per_step(client, url, 20)
    finally:
        await client.close()


def main(argv: list[str]) -> int:
    what, url, prefix = argv
    if what == "steps":
        result: object = asyncio.run(steps(url, prefix))
    elif what == "commands":
        result = asyncio.run(commands(url, prefix))
    else:
        result = asyncio.run(throughput(url, prefix))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

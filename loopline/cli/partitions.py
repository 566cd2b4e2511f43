"""``loopline partitions``: where a deployment's partitions live, and moving them between
a Redis Cluster's masters while it runs (``loopline.partitions``)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from loopline.cli.common import UsageError, deployment, settings
from loopline.cli.tables import show_table

SERVICE_COLUMNS = ("loop", "context", "model", "tools", "todos")


def add_parser(sub: Any) -> None:
    """``loopline partitions`` and its actions, on the command line's subparsers."""
    p = sub.add_parser(
        "partitions",
        help="a deployment's partitions: where each lives, and moving them between masters",
        description="Each partition of the work streams (LOOPLINE_PARTITIONS) is one hash "
        "slot. 'map' shows each one's master and backlog; on a Redis Cluster 'move' "
        "migrates one to another master with its keys, 'spread' evens them out over the "
        "masters and 'add-master' joins a new node (started with cluster mode on, no "
        "slots) and gives it its share. A replica of a service needs no command: start one "
        "more 'loopline serve NAME'.",
    )
    p.add_argument(
        "action", nargs="?", default="map", choices=("map", "move", "spread", "add-master")
    )
    p.add_argument("args", nargs="*", help="move: PARTITION HOST:PORT; add-master: HOST:PORT")
    p.add_argument("--json", action="store_true", help="map: one JSON document")
    p.set_defaults(func=cmd_partitions)


def cmd_partitions(args: argparse.Namespace) -> int:
    from contracts.streams import Names
    from loopline.partitions import Deployment, PartitionError

    url, prefix = deployment()
    target = Deployment(url, Names(prefix, settings().partitions))
    try:
        return _act(target, args)
    except PartitionError as exc:
        raise UsageError(str(exc)) from None
    finally:
        target.close()


def _act(target: Any, args: argparse.Namespace) -> int:
    if args.action == "map":
        return _show(target, as_json=args.json)
    if args.action == "move":
        if len(args.args) != 2 or not args.args[0].isdigit():
            raise UsageError("usage: loopline partitions move PARTITION HOST:PORT")
        moved = target.move(int(args.args[0]), args.args[1])
        print(f"partition {args.args[0]} is on {args.args[1]} ({moved} keys moved)")
        return 0
    if args.action == "spread":
        _report(target.spread())
        return 0
    if len(args.args) != 1:
        raise UsageError("usage: loopline partitions add-master HOST:PORT")
    _report(target.add_master(args.args[0]))
    return 0


def _report(moves: list[tuple[int, str, str]]) -> None:
    if not moves:
        print("the partitions are spread evenly already: nothing moved")
    for number, source, destination in moves:
        print(f"partition {number}: {source} -> {destination}")


def _show(target: Any, *, as_json: bool) -> int:
    partitions = target.partitions()
    if as_json:
        print(json.dumps([p.__dict__ for p in partitions]))
        return 0
    header = ["partition", "slot", "master", *(f"{s} backlog" for s in SERVICE_COLUMNS)]
    rows = [header]
    for p in partitions:
        master = p.master or "(one server)"
        rows.append(
            [str(p.number), str(p.slot), master, *(str(p.backlog[s]) for s in SERVICE_COLUMNS)]
        )
    show_table(rows, title=f"{len(partitions)} partitions")
    return 0

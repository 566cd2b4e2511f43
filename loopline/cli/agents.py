"""The operator's agents: ``deploy`` registers an agent file by name (a new version when
it changed), ``agents list|show|rm`` read and remove registrations. Tasks name a
deployed agent; the services run nothing else (unless inline agents are allowed)."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import TYPE_CHECKING

from loopline.cli.common import UsageError, check_redis, deployment

if TYPE_CHECKING:
    from contracts.agent import DeployedAgent


def cmd_deploy(args: argparse.Namespace) -> int:
    from loopline.agentfile import load_agent_file
    from loopline.client import Client

    spec, file_max_steps = load_agent_file(args.agent_file)  # every problem: one line
    url, prefix = deployment()
    overridable = _overridable(args)

    async def main() -> int:
        await check_redis(url)
        async with Client(url, prefix) as client:
            before = await client.list_agents(all_versions=True)
            found = await client.deploy(
                spec,
                name=args.name,
                overridable=overridable,
                max_steps=args.max_steps or file_max_steps,
            )
        new = all(a.ref != found.ref for a in before)
        if args.json:
            print(json.dumps({"agent": found.ref, "new": new, "agent_id": found.spec.agent_id}))
        else:
            print(f"{'deployed' if new else 'unchanged'} {found.ref}")
        return 0

    return asyncio.run(main())


def _overridable(args: argparse.Namespace) -> list[str] | None:
    if args.no_overrides:
        return []
    if args.overridable is None:
        return None
    return [part.strip() for part in args.overridable.split(",") if part.strip()]


def cmd_agents(args: argparse.Namespace) -> int:
    from loopline.client import Client

    url, prefix = deployment()

    async def main() -> int:
        await check_redis(url)
        async with Client(url, prefix) as client:
            if args.action == "list":
                _print_list(await client.list_agents(all_versions=args.all), args.json)
                return 0
            if not args.ref:
                raise UsageError(f"agents {args.action} needs NAME or NAME@VERSION")
            if args.action == "show":
                found = await client.get_agent(args.ref)
                print(found.model_dump_json(indent=None if args.json else 2))
                return 0
            removed = await client.remove_agent(args.ref)
            name = args.ref.partition("@")[0]
            refs = [f"{name}@{v}" for v in removed]
            print(json.dumps({"removed": refs}) if args.json else "removed " + ", ".join(refs))
            return 0

    return asyncio.run(main())


def _print_list(agents: list[DeployedAgent], as_json: bool) -> None:
    if as_json:
        rows = [
            {
                "agent": a.ref,
                "model": a.spec.model.name,
                "tools": a.spec.tools,
                "overridable": a.overridable,
                "deployed_at": a.deployed_at,
            }
            for a in agents
        ]
        print(json.dumps(rows))
        return
    if not agents:
        print("no deployed agents (loopline deploy AGENT_FILE)")
    for a in agents:
        tools = ", ".join(a.spec.tools) or "no tools"
        print(f"{a.ref}  model {a.spec.model.name}  {tools}")

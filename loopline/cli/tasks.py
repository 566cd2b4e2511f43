"""Commands that start and follow tasks: ``run``, ``submit``, ``watch``, ``cancel`` and
``demo`` (a scripted ``run``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from typing import TYPE_CHECKING

from contracts.agent import AgentSpec
from contracts.events import ApprovalRequested, TaskCompleted, TaskFailed
from contracts.messages import HumanMessage
from loopline.cli.common import (
    UsageError,
    check_redis,
    deployment,
    load_agent,
    resolve_url,
    settings,
)
from loopline.cli.render import describe, json_line, run_result

if TYPE_CHECKING:
    from loopline.client import Client

Final = TaskCompleted | TaskFailed | ApprovalRequested


async def _run_task(
    agent: AgentSpec | str,
    prompt: str,
    *,
    max_steps: int | None,
    as_json: bool,
    follow: bool = True,
    quiet: bool = False,
    thread_id: str | None = None,
    multitask_strategy: str = "reject",
) -> int:
    """``agent``: an agent file's spec (registered first on a deployment: the operator's
    path), or a deployed agent's ``NAME[@VERSION]`` (a producer's)."""
    from loopline.client import Client

    current = settings()
    if not current.redis_url and isinstance(agent, AgentSpec):
        from loopline.embedded import check_endpoint

        check_endpoint(agent.model)  # embedded: this process is the model service
    url, embedded = resolve_url(current)
    await check_redis(url)
    if embedded:
        from loopline.embedded import ensure_services

        ensure_services(url, current)
    async with Client(url, current.prefix) as client:
        if isinstance(agent, AgentSpec) and not embedded:
            # the services run deployed agents only: register the file as read (the
            # operator's path); the services import and check it where its task runs
            agent = (await client.deploy(agent, max_steps=max_steps, check_here=False)).ref
            max_steps = None
        task_id = await client.submit(
            agent,
            [HumanMessage(content=prompt)],
            max_steps=max_steps,
            thread_id=thread_id,
            multitask_strategy=multitask_strategy,
        )
        if not follow:
            print(task_id)
            return 0
        final = await _follow(client, task_id, as_json=as_json, quiet=quiet)
        messages = await client.messages(task_id)
        todos = await client.todos(task_id)
    if as_json:
        print(run_result(task_id, final, messages, todos))
    elif isinstance(final, TaskCompleted):
        print(final.answer)
    return 0 if isinstance(final, TaskCompleted | ApprovalRequested) else 1


def _task_agent(args: argparse.Namespace) -> tuple[AgentSpec | str, int | None]:
    """The agent a ``run`` or ``submit`` names and its step limit."""
    if args.deployed:
        if args.agent:
            raise UsageError("give --agent FILE or --deployed NAME, not both")
        if not settings().redis_url:
            raise UsageError("--deployed needs REDIS_URL: the deployment the agent is deployed on")
        return args.deployed, args.max_steps
    spec, file_max_steps = load_agent(args.agent)
    return spec, args.max_steps or file_max_steps


async def _follow(client: Client, task_id: str, *, as_json: bool, quiet: bool) -> Final | None:
    """Show the task's progress on stderr until it ends or waits for a human."""
    final: Final | None = None
    async for _, event in client.events(task_id):
        if not as_json and not quiet and (line := describe(event)):
            print(line, file=sys.stderr)
        if isinstance(event, TaskCompleted | TaskFailed | ApprovalRequested):
            final = event
        if isinstance(event, ApprovalRequested):
            if not as_json:
                print(
                    f"task {task_id} waits for a human: loopline decide {task_id} --approve",
                    file=sys.stderr,
                )
            break
    return final


def cmd_run(args: argparse.Namespace) -> int:
    agent, max_steps = _task_agent(args)
    return asyncio.run(
        _run_task(
            agent,
            args.prompt,
            max_steps=max_steps,
            as_json=args.json,
            thread_id=args.thread,
            multitask_strategy=args.multitask_strategy,
        )
    )


def cmd_submit(args: argparse.Namespace) -> int:
    if not settings().redis_url:
        raise UsageError(
            "submit needs REDIS_URL (a running deployment); without one use `loopline run`"
        )
    agent, max_steps = _task_agent(args)
    return asyncio.run(
        _run_task(
            agent,
            args.prompt,
            max_steps=max_steps,
            as_json=False,
            follow=False,
            thread_id=args.thread,
            multitask_strategy=args.multitask_strategy,
        )
    )


def cmd_watch(args: argparse.Namespace) -> int:
    current = settings()
    if not current.redis_url:
        raise UsageError("watch needs REDIS_URL: the deployment whose streams to read")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_watch(args, current.redis_url, current.prefix))
    return 0


async def _watch(args: argparse.Namespace, url: str, prefix: str) -> None:
    from loopline.client import Client

    await check_redis(url)
    async with Client(url, prefix) as client:
        if args.what == "task":
            if not args.task_id:
                raise UsageError("watch task needs a TASK_ID")
            source = client.events(args.task_id, follow=not args.no_follow)
        else:
            source = client.subscribe(
                args.what, from_start=args.from_start, follow=not args.no_follow
            )
        async for entry_id, event in source:
            if args.json:
                print(json_line(entry_id, event))
            else:
                line = describe(event)
                if line:
                    tid = "" if args.what == "task" else f"[{event.task_id[:8]}] "
                    print(f"{tid}{line}")
            sys.stdout.flush()


def cmd_cancel(args: argparse.Namespace) -> int:
    from loopline.client import Client

    url, prefix = deployment()

    async def main() -> int:
        await check_redis(url)
        async with Client(url, prefix) as client:
            if await client.status(args.task_id) is None:
                raise UsageError(f"no task {args.task_id} (finished tasks expire)")
            await client.cancel(args.task_id, args.reason)
            async for _, event in client.events(args.task_id):
                if isinstance(event, TaskCompleted | TaskFailed):
                    print(describe(event))
        return 0

    return asyncio.run(main())


def cmd_demo(args: argparse.Namespace) -> int:
    from loopline.agentfile import agent_from_dict
    from loopline.demo import DEMO_AGENT, DEMO_PROMPT, DEMO_TURNS
    from loopline.testing.scripted import ScriptedOpenAIServer

    with ScriptedOpenAIServer(DEMO_TURNS) as server:
        os.environ["OPENAI_BASE_URL"] = server.url
        print(
            "loopline demo: the model is SCRIPTED: a local OpenAI-compatible server at "
            f"{server.url} replays a fixed script; no API key is used.",
            file=sys.stderr,
        )
        spec, _ = agent_from_dict(DEMO_AGENT)
        print(f"prompt: {DEMO_PROMPT}", file=sys.stderr)
        code = asyncio.run(_run_task(spec, DEMO_PROMPT, max_steps=None, as_json=args.json))
        print(
            f"(the scripted model answered {len(server.requests)} requests over HTTP)",
            file=sys.stderr,
        )
    return code

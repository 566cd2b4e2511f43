"""Commands that start and follow tasks: ``run``, ``submit``, ``watch``, ``cancel`` and
``demo`` (a scripted ``run``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from contracts.agent import AgentSpec
from contracts.events import ApprovalRequested, TaskCompleted, TaskFailed, new_task_id
from contracts.messages import HumanMessage
from loopline.cli.common import (
    UsageError,
    check_redis,
    deployment,
    load_agent,
    resolve_url,
    settings,
)
from loopline.cli.live import (
    LiveProgress,
    PlainProgress,
    Progress,
    QuietProgress,
    is_terminal,
)
from loopline.cli.render import describe, json_line, run_result

if TYPE_CHECKING:
    from loopline.client import Client

Final = TaskCompleted | TaskFailed | ApprovalRequested

DEMO_CHUNK_DELAY_S = 0.02
"""Seconds between the demo's streamed pieces in the live view (8 characters each)."""


@dataclass
class RunRequest:
    """What ``run``, ``submit`` and ``demo`` ask for, and how to show it."""

    agent: AgentSpec | str
    """An agent file's spec (registered first on a deployment: the operator's path), or
    a deployed agent's ``NAME[@VERSION]`` (a producer's)."""
    prompt: str
    max_steps: int | None = None
    as_json: bool = False
    follow: bool = True
    live: bool = False
    """Draw the live view (a terminal) instead of plain lines."""
    thread_id: str | None = None
    multitask_strategy: str = "reject"
    task_id: str = field(default_factory=new_task_id)
    """Chosen here, so an interrupted run can say which task runs on."""
    embedded: bool = field(default_factory=lambda: not settings().redis_url)
    """No ``REDIS_URL``: the task runs in this process (the embedded default)."""
    submitted: bool = False


async def _run_task(req: RunRequest) -> int:
    from loopline.client import Client

    current = settings()
    if not current.redis_url and isinstance(req.agent, AgentSpec):
        from loopline.embedded import check_endpoint

        check_endpoint(req.agent.model)  # embedded: this process is the model service
    url, _ = resolve_url(current)
    await check_redis(url)
    if req.embedded:
        from loopline.embedded import ensure_services

        ensure_services(url, current)
    async with Client(url, current.prefix) as client:
        agent, max_steps = req.agent, req.max_steps
        if isinstance(agent, AgentSpec) and not req.embedded:
            # the services run deployed agents only: register the file as read (the
            # operator's path); the services import and check it where its task runs
            agent = (await client.deploy(agent, max_steps=max_steps, check_here=False)).ref
            max_steps = None
        if req.live:  # the live view shows the model's text as it is generated
            await client.stream_replies(req.task_id, current.stream_ttl_s)
        await client.submit(
            agent,
            [HumanMessage(content=req.prompt)],
            task_id=req.task_id,
            max_steps=max_steps,
            thread_id=req.thread_id,
            multitask_strategy=req.multitask_strategy,
        )
        req.submitted = True
        if not req.follow:
            print(json.dumps({"task_id": req.task_id}) if req.as_json else req.task_id)
            return 0
        final = await _show(client, req)
        messages = await client.messages(req.task_id)
        todos = await client.todos(req.task_id)
    if req.as_json:
        print(run_result(req.task_id, final, messages, todos))
    elif isinstance(final, TaskCompleted) and not req.live:
        print(final.answer)  # the live view showed it already
    return 0 if isinstance(final, TaskCompleted | ApprovalRequested) else 1


async def _show(client: Client, req: RunRequest) -> Final | None:
    """Follow the task, shown as ``req`` asks, until it ends or waits for a human."""
    if req.as_json:
        return await follow_task(client, req.task_id, QuietProgress())
    if req.live:
        with LiveProgress(req.task_id) as live:
            return await follow_task(client, req.task_id, live)
    final = await follow_task(client, req.task_id, PlainProgress())
    if isinstance(final, ApprovalRequested):
        print(
            f"task {req.task_id} waits for a human: loopline decide {req.task_id} --approve",
            file=sys.stderr,
        )
    return final


async def follow_task(
    client: Client, task_id: str, progress: Progress, *, follow: bool = True
) -> Final | None:
    """Feed the task's events and streamed chunks to ``progress`` until it ends or waits
    for a human (``follow=False``: what is there now)."""
    from loopline.client import LostTaskWatch

    watch = LostTaskWatch(client, task_id)  # a task Redis lost would never end
    await watch.begin()
    chunks_after, log_after = "0", "0"
    while True:
        batches, events = await client.feed(
            task_id, chunks_after, log_after, block_ms=1000 if follow else None
        )
        for _, batch in batches:
            progress.chunks(batch)
        if batches:
            chunks_after = batches[-1][0]
        if events:
            log_after = events[-1][0]
            watch.seen = True
        elif not batches:
            if not follow:
                return None
            lost = await watch.lost()
            if lost is not None:
                progress.event(lost)
                return lost
        for _, event in events:
            progress.event(event)
            if isinstance(event, TaskCompleted | TaskFailed | ApprovalRequested):
                return event


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


def run_interruptibly(req: RunRequest, cancel_on_interrupt: bool = False) -> int:
    """Run the task; on Ctrl-C say what became of it: on a deployment it runs on (the
    command to stop it), or is cancelled with ``cancel_on_interrupt``; embedded, it
    stops with this process, whose services stop first so nothing fails on the way out."""
    try:
        return asyncio.run(_run_task(req))
    except KeyboardInterrupt:
        pass
    if req.embedded:
        from loopline.embedded import exit_now

        print("\ninterrupted: the task stopped with this process (embedded)", file=sys.stderr)
        exit_now(130)
    if not req.submitted:
        print("\ninterrupted: no task was submitted", file=sys.stderr)
    elif cancel_on_interrupt:
        asyncio.run(_cancel_quietly(req.task_id))
        print(f"\ninterrupted: cancelled task {req.task_id}", file=sys.stderr)
    else:
        print(
            f"\ninterrupted: task {req.task_id} runs on in the deployment; follow it with "
            f"`loopline watch task {req.task_id}`, stop it with `loopline cancel {req.task_id}`",
            file=sys.stderr,
        )
    return 130


async def _cancel_quietly(task_id: str) -> None:
    """Ask the deployment to stop the task (a task that never started is no error)."""
    from loopline.client import Client

    url, prefix = deployment()
    async with Client(url, prefix) as client:
        await client.cancel(task_id, "interrupted from the command line")


def cmd_run(args: argparse.Namespace) -> int:
    agent, max_steps = _task_agent(args)
    req = RunRequest(
        agent,
        args.prompt,
        max_steps=max_steps,
        as_json=args.json,
        live=not args.json and not args.plain and is_terminal(sys.stdout),
        thread_id=args.thread,
        multitask_strategy=args.multitask_strategy,
    )
    return run_interruptibly(req, cancel_on_interrupt=args.cancel_on_interrupt)


def cmd_submit(args: argparse.Namespace) -> int:
    if not settings().redis_url:
        raise UsageError(
            "submit needs REDIS_URL (a running deployment); without one use `loopline run`"
        )
    agent, max_steps = _task_agent(args)
    req = RunRequest(
        agent,
        args.prompt,
        max_steps=max_steps,
        as_json=args.json,
        follow=False,
        thread_id=args.thread,
        multitask_strategy=args.multitask_strategy,
    )
    return asyncio.run(_run_task(req))


def cmd_watch(args: argparse.Namespace) -> int:
    current = settings()
    if not current.redis_url:
        raise UsageError("watch needs REDIS_URL: the deployment whose streams to read")
    if args.what == "task" and not args.task_id:
        raise UsageError("watch task needs a TASK_ID")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_watch(args, current.redis_url, current.prefix))
    return 0


async def _watch(args: argparse.Namespace, url: str, prefix: str) -> None:
    from loopline.client import Client

    await check_redis(url)
    async with Client(url, prefix) as client:
        live = not args.json and not args.plain and is_terminal(sys.stdout)
        if args.what == "task" and live:
            await _watch_task_live(client, args)
            return
        if args.what == "task":
            source = client.events(args.task_id, follow=not args.no_follow)
        else:
            source = client.subscribe(
                args.what, from_start=args.from_start, follow=not args.no_follow
            )
        shown = 0
        plain = PlainProgress(sys.stdout, prefix_task=args.what != "task")
        async for entry_id, event in source:
            shown += 1
            if args.json:
                print(json_line(entry_id, event), flush=True)
            else:
                plain.event(event)
        if not shown:
            where = f"task {args.task_id}" if args.what == "task" else f"the {args.what} stream"
            print(f"no events in {where}", file=sys.stderr)


async def _watch_task_live(client: Client, args: argparse.Namespace) -> None:
    """The live view of a task someone else started: its model replies stream from the
    next step on (a task's chunks exist only once a client asked for them)."""
    if not args.no_follow:
        await client.stream_replies(args.task_id, settings().stream_ttl_s)
    with LiveProgress(args.task_id) as live:
        await follow_task(client, args.task_id, live, follow=not args.no_follow)
        if not live.view.steps and live.view.final is None:
            print(f"no events in task {args.task_id}", file=sys.stderr)


def cmd_cancel(args: argparse.Namespace) -> int:
    from loopline.client import Client

    url, prefix = deployment()

    async def main() -> int:
        await check_redis(url)
        async with Client(url, prefix) as client:
            if await client.status(args.task_id) is None:
                raise UsageError(f"no task {args.task_id} (finished tasks expire)")
            await client.cancel(args.task_id, args.reason)
            async for entry_id, event in client.events(args.task_id):
                if isinstance(event, TaskCompleted | TaskFailed):
                    print(json_line(entry_id, event) if args.json else describe(event))
        return 0

    return asyncio.run(main())


def cmd_demo(args: argparse.Namespace) -> int:
    from loopline.agentfile import agent_from_dict
    from loopline.demo import DEMO_AGENT, DEMO_PROMPT, DEMO_TURNS
    from loopline.testing.scripted import ScriptedOpenAIServer

    live = not args.json and not args.plain and is_terminal(sys.stdout)
    # in a terminal the scripted replies stream at a reading pace, as a model's would
    with ScriptedOpenAIServer(DEMO_TURNS, chunk_delay=DEMO_CHUNK_DELAY_S if live else 0) as server:
        os.environ["OPENAI_BASE_URL"] = server.url
        print(
            "loopline demo: the model is SCRIPTED: a local OpenAI-compatible server at "
            f"{server.url} replays a fixed script; no API key is used.",
            file=sys.stderr,
        )
        spec, _ = agent_from_dict(DEMO_AGENT)
        print(f"prompt: {DEMO_PROMPT}", file=sys.stderr)
        code = run_interruptibly(RunRequest(spec, DEMO_PROMPT, as_json=args.json, live=live))
        print(
            f"(the scripted model answered {len(server.requests)} requests over HTTP)",
            file=sys.stderr,
        )
    return code

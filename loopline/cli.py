"""The ``loopline`` command line. Errors a user can cause end in one line saying what to
do; a traceback means a bug in loopline."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from contracts.agent import AgentSpec
from contracts.events import (
    AnyEvent,
    ApprovalRequested,
    ContextEdited,
    ModelResponded,
    StepStarted,
    TaskCompleted,
    TaskFailed,
    TaskSubmitted,
    TodosUpdated,
    ToolCompleted,
    ToolInterrupted,
    event_schemas,
)
from contracts.messages import HumanMessage
from contracts.streams import SERVICES
from services.errors import ConfigurationError
from services.settings import Settings

if TYPE_CHECKING:
    from loopline.client import Client


class UsageError(Exception):
    """Something the user can fix; printed as one line."""


def fail(message: str) -> NoReturn:
    one_line = " ".join(message.split())  # a user error is one line, never a dump
    print(f"loopline: error: {one_line}", file=sys.stderr)
    raise SystemExit(2)


def _settings() -> Settings:
    return Settings()


async def _check_redis(url: str) -> None:
    import redis.asyncio as aioredis
    from redis.exceptions import RedisClusterException

    from services.redisconn import async_client

    client = async_client(url, socket_connect_timeout=3)
    try:
        await client.ping()
    except (aioredis.ConnectionError, aioredis.TimeoutError, RedisClusterException, OSError) as exc:
        raise UsageError(
            f"cannot reach Redis at {url} ({exc}); start it, fix REDIS_URL, "
            "or unset REDIS_URL to use the embedded server"
        ) from exc
    finally:
        await client.aclose()


def _url(settings: Settings) -> tuple[str, bool]:
    from loopline.agent import resolve_url

    return resolve_url(settings.redis_url)


# -- rendering ---------------------------------------------------------------------------


def describe(event: AnyEvent) -> str | None:
    """One human line per event of a task's log."""
    if isinstance(event, TaskSubmitted):
        return f"task {event.task_id} submitted (agent {event.agent.name})"
    if isinstance(event, StepStarted):
        return f"step {event.step}: calling the model"
    if isinstance(event, ModelResponded):
        calls = ", ".join(f"{c.name}({json.dumps(c.args)[:60]})" for c in event.message.tool_calls)
        return f"step {event.step}: model asked for {calls}" if calls else None
    if isinstance(event, ToolCompleted):
        text = event.message.text().replace("\n", " ")
        mark = "error" if event.message.status == "error" else "ok"
        return f"step {event.step}:   {event.message.tool_call_id} {mark}: {text[:80]}"
    if isinstance(event, TodosUpdated):
        marks = {"completed": "[x]", "in_progress": "[~]", "pending": "[ ]"}
        items = "  ".join(f"{marks[t.status]} {t.content}" for t in event.todos)
        return f"step {event.step}: todos {items}"
    if isinstance(event, ContextEdited):
        return (
            f"step {event.step}: context edit cleared {len(event.cleared_tool_call_ids)} "
            f"tool result(s), {event.tokens_before} -> {event.tokens_after} tokens"
        )
    if isinstance(event, ApprovalRequested) and event.request.get("type") == "tool_approval":
        req = event.request  # per-call mode: one ToolApprovalRequest
        args = json.dumps(req.get("args"))[:60]
        return (
            f"step {event.step}: WAITING for approval of call {req.get('tool_call_id')}: "
            f"{req.get('name')}({args})"
        )
    if isinstance(event, ToolInterrupted) and event.error:
        return f"step {event.step}: decision for call {event.call.id} REFUSED: {event.error}"
    if isinstance(event, ApprovalRequested):
        actions = ", ".join(
            f"{a.get('name')}({json.dumps(a.get('args'))[:60]})"
            for a in event.request.get("action_requests", [])
        )
        return f"step {event.step}: WAITING for approval of {actions}"
    if isinstance(event, TaskCompleted):
        return f"done after {event.steps} step(s)"
    if isinstance(event, TaskFailed):
        return f"FAILED at step {event.step}: {event.reason}"
    return None


# -- commands ----------------------------------------------------------------------------


def _load_agent(path: str | None) -> tuple[AgentSpec, int | None]:
    from loopline.agentfile import agent_from_dict, load_agent_file

    if path:
        return load_agent_file(path)
    return agent_from_dict({"model": os.environ.get("LOOPLINE_MODEL", "gpt-4o-mini")})


async def _run_task(
    spec: AgentSpec,
    prompt: str,
    *,
    max_steps: int | None,
    as_json: bool,
    follow: bool = True,
    quiet: bool = False,
) -> int:
    from loopline.client import Client
    from services.model.chat import endpoint_configured

    settings = _settings()
    if not endpoint_configured(spec.model):
        raise UsageError(
            "no model endpoint configured: set OPENAI_BASE_URL (any OpenAI-compatible "
            "server) and/or OPENAI_API_KEY, or try `loopline demo`"
        )
    url, embedded = _url(settings)
    await _check_redis(url)
    if embedded:
        from loopline.embedded import ensure_services

        ensure_services(url, settings)
    async with Client(url, settings.prefix) as client:
        task_id = await client.submit(spec, [HumanMessage(content=prompt)], max_steps=max_steps)
        if not follow:
            print(task_id)
            return 0
        final: TaskCompleted | TaskFailed | ApprovalRequested | None = None
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
        messages = await client.messages(task_id)
        todos = await client.todos(task_id)
    if as_json:
        print(
            json.dumps(
                {
                    "task_id": task_id,
                    "status": "completed"
                    if isinstance(final, TaskCompleted)
                    else "waiting"
                    if isinstance(final, ApprovalRequested)
                    else "failed",
                    "answer": final.answer if isinstance(final, TaskCompleted) else None,
                    "error": final.reason if isinstance(final, TaskFailed) else None,
                    "messages": [m.model_dump(mode="json") for m in messages],
                    "todos": todos,
                }
            )
        )
    elif isinstance(final, TaskCompleted):
        print(final.answer)
    return 0 if isinstance(final, TaskCompleted | ApprovalRequested) else 1


def cmd_run(args: argparse.Namespace) -> int:
    spec, file_max_steps = _load_agent(args.agent)
    return asyncio.run(
        _run_task(spec, args.prompt, max_steps=args.max_steps or file_max_steps, as_json=args.json)
    )


def cmd_submit(args: argparse.Namespace) -> int:
    settings = _settings()
    if not settings.redis_url:
        raise UsageError(
            "submit needs REDIS_URL (a running deployment); without one use `loopline run`"
        )
    spec, file_max_steps = _load_agent(args.agent)
    return asyncio.run(
        _run_task(
            spec,
            args.prompt,
            max_steps=args.max_steps or file_max_steps,
            as_json=False,
            follow=False,
        )
    )


def cmd_watch(args: argparse.Namespace) -> int:
    from loopline.client import Client

    settings = _settings()
    if not settings.redis_url:
        raise UsageError("watch needs REDIS_URL: the deployment whose streams to read")

    async def main() -> None:
        await _check_redis(settings.redis_url or "")
        async with Client(settings.redis_url or "", settings.prefix) as client:
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
                    print(json.dumps({"id": entry_id, **event.model_dump(mode="json")}))
                else:
                    line = describe(event)
                    if line:
                        tid = "" if args.what == "task" else f"[{event.task_id[:8]}] "
                        print(f"{tid}{line}")
                sys.stdout.flush()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
    return 0


def _deployment() -> tuple[str, str]:
    settings = _settings()
    if not settings.redis_url:
        raise UsageError("this command needs REDIS_URL: the deployment to act on")
    return settings.redis_url, settings.prefix


def cmd_cancel(args: argparse.Namespace) -> int:
    from loopline.client import Client

    url, prefix = _deployment()

    async def main() -> int:
        await _check_redis(url)
        async with Client(url, prefix) as client:
            if await client.status(args.task_id) is None:
                raise UsageError(f"no task {args.task_id} (finished tasks expire)")
            await client.cancel(args.task_id, args.reason)
            async for _, event in client.events(args.task_id):
                if isinstance(event, TaskCompleted | TaskFailed):
                    print(describe(event))
        return 0

    return asyncio.run(main())


def cmd_stats(args: argparse.Namespace) -> int:
    import redis.asyncio as aioredis

    from contracts.streams import Names
    from loopline.stats import collect
    from services.redisconn import async_client

    url, prefix = _deployment()

    async def main() -> dict[str, dict[str, object]]:
        await _check_redis(url)
        client: aioredis.Redis = async_client(url)  # a server or a Redis Cluster
        try:
            return await collect(client, Names(prefix))
        finally:
            await client.aclose()

    stats = asyncio.run(main())
    if args.json:
        print(json.dumps(stats))
        return 0
    for name, row in stats.items():
        print(f"agent {name}")
        for key, value in row.items():
            if key != "latency_ms":
                print(f"  {key:14} {value}")
        for stage, p in dict(row["latency_ms"]).items():  # type: ignore[call-overload]
            print(f"  latency {stage:6} p50 {p['p50']} ms  p90 {p['p90']} ms  p99 {p['p99']} ms")
    if not stats:
        print("no tasks found", file=sys.stderr)
    return 0


def cmd_approvals(args: argparse.Namespace) -> int:
    from loopline.client import Client

    url, prefix = _deployment()

    async def main() -> int:
        await _check_redis(url)
        async with Client(url, prefix) as client:
            waiting = await client.pending_approvals()
        for request in waiting:
            if args.json:
                print(json.dumps(request.model_dump(mode="json")))
            else:
                print(f"{request.task_id}  {describe(request)}")
        if not args.json:
            print(f"{len(waiting)} task(s) waiting for a decision", file=sys.stderr)
        return 0

    return asyncio.run(main())


def _decisions(args: argparse.Namespace, count: int) -> list[dict[str, object]]:
    if args.decisions:
        try:
            parsed = json.loads(args.decisions)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--decisions is not JSON: {exc}") from exc
        if not isinstance(parsed, list):
            raise UsageError("--decisions must be a JSON list, one decision per gated call")
        return parsed
    one: dict[str, object]
    if args.approve:
        one = {"type": "approve"}
    elif args.reject is not None:
        one = {"type": "reject", **({"message": args.reject} if args.reject else {})}
    elif args.respond is not None:
        one = {"type": "respond", "message": args.respond}
    elif args.edit is not None:
        try:
            action = json.loads(args.edit)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--edit is not JSON: {exc}") from exc
        one = {"type": "edit", "edited_action": action}
    else:
        raise UsageError("say what to do: --approve, --reject, --respond, --edit or --decisions")
    return [one] * count


def _call_decisions(
    args: argparse.Namespace, open_calls: list[ApprovalRequested]
) -> dict[str, Any] | list[Any]:
    """Per-call mode: ``--decisions`` as ``{call id: decision}`` (or a list of decisions
    with ``tool_call_id``), else one decision for ``--call`` (needed when several wait)."""
    if args.decisions:
        try:
            parsed = json.loads(args.decisions)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--decisions is not JSON: {exc}") from exc
        if not isinstance(parsed, dict | list):
            raise UsageError("--decisions must be {call id: decision} or a list of decisions")
        return parsed
    ids = [str(r.request.get("tool_call_id")) for r in open_calls]
    target = args.call
    if target is None:
        if len(ids) != 1:
            raise UsageError(f"{len(ids)} calls wait: name one with --call ({', '.join(ids)})")
        target = ids[0]
    if target not in ids:
        raise UsageError(f"call {target} is not waiting for a decision ({', '.join(ids)})")
    one = _decisions(args, 1)[0]
    action = one.get("edited_action")
    if isinstance(action, dict) and "name" not in action:  # --edit with the args only
        name = open_calls[ids.index(target)].request.get("name")
        one = {"type": "edit", "edited_action": {"name": name, "args": action}}
    return {target: one}


def cmd_decide(args: argparse.Namespace) -> int:
    from loopline.client import Client

    url, prefix = _deployment()

    async def main() -> int:
        await _check_redis(url)
        async with Client(url, prefix) as client:
            request = await client.waiting(args.task_id)
            if request is None:
                raise UsageError(f"task {args.task_id} is not waiting for a decision")
            if request.request.get("type") == "tool_approval":
                return await decide_calls(client)
            if args.call is not None:
                raise UsageError("--call is for per-call approvals (interrupt_mode='per_call')")
            count = len(request.request.get("action_requests", []))
            decisions = _decisions(args, count)
            if args.edit is not None and count == 1:
                action = decisions[0]["edited_action"]
                if isinstance(action, dict) and "name" not in action:
                    name = request.request["action_requests"][0]["name"]
                    decisions = [{"type": "edit", "edited_action": {"name": name, "args": action}}]
            after = await client.last_entry(args.task_id)
            await client.decide(args.task_id, decisions)
            _, outcome = await client.outcome(args.task_id, after=after)
        print(describe(outcome))
        if isinstance(outcome, TaskCompleted):
            print(outcome.answer)
        return 0 if not isinstance(outcome, TaskFailed) else 1

    async def decide_calls(client: Client) -> int:
        open_calls = await client.waiting_calls(args.task_id)
        decisions = _call_decisions(args, open_calls)
        after = await client.last_entry(args.task_id)
        try:
            answered = await client.decide(args.task_id, decisions)
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
        _, outcome = await client.outcome_of_decisions(args.task_id, answered, after=after)
        print(describe(outcome))
        if isinstance(outcome, TaskCompleted):
            print(outcome.answer)
        return 1 if isinstance(outcome, TaskFailed | ToolInterrupted) else 0

    return asyncio.run(main())


def cmd_dlq(args: argparse.Namespace) -> int:
    from loopline.client import Client

    url, prefix = _deployment()

    async def main() -> int:
        await _check_redis(url)
        async with Client(url, prefix) as client:
            if args.action == "list":
                letters = await client.dead_letters(count=args.count)
                if args.json:
                    for entry_id, letter in letters:
                        print(json.dumps({"id": entry_id, **letter.model_dump(mode="json")}))
                else:
                    for entry_id, letter in letters:
                        error = letter.error[:90]
                        print(f"{entry_id}  {letter.stream}  x{letter.deliveries}  {error}")
                    print(f"{len(letters)} dead letter(s)", file=sys.stderr)
                return 0
            if not args.id:
                raise UsageError(f"dlq {args.action} needs an entry ID (see `loopline dlq list`)")
            try:
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
            except KeyError as exc:
                raise UsageError(f"no dead letter {args.id}") from exc
        return 0

    return asyncio.run(main())


def _serve(services: Sequence[str], *, allow_embedded: bool) -> int:
    import logging

    from services.app import build_app

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = _settings()
    url, embedded = (settings.redis_url, False) if settings.redis_url else (None, True)
    if embedded:
        if not allow_embedded:
            raise UsageError(
                "serve needs REDIS_URL (services of one deployment share a Redis); "
                "`loopline up` runs every service on an embedded server"
            )
        url, _ = _url(settings)
        print(f"embedded server: REDIS_URL={url}", flush=True)
    assert url is not None
    asyncio.run(_check_redis(url))
    app, _ = build_app(list(services), url=url, settings=settings)
    print(f"serving {', '.join(services)} on {url} (prefix {settings.prefix!r})", flush=True)
    from services.app import tune_gc

    tune_gc(settings.gc_threshold)
    # asyncio's own event loop: under uvloop, a SIGTERM while a sync tool ran in a thread
    # sometimes left the tool's result undelivered until the graceful timeout
    # (tests/test_delivery.py::test_sigterm_lets_an_in_flight_tool_finish failed 1 in 3).
    asyncio.run(_run_app(app))
    return 0


async def _run_app(app: object) -> None:
    """Run until SIGTERM/SIGINT; SIGUSR1 prints every asyncio task's stack to stderr (for
    an operator asking what a stuck process waits on)."""
    import signal

    def dump() -> None:
        for task in asyncio.all_tasks():
            print(f"task {task.get_name()}: {task.get_coro()}", file=sys.stderr)
            task.print_stack(limit=6, file=sys.stderr)

    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, dump)
    await app.run()  # type: ignore[attr-defined]


def cmd_up(args: argparse.Namespace) -> int:
    return _serve(SERVICES, allow_embedded=True)


def cmd_serve(args: argparse.Namespace) -> int:
    return _serve([args.name], allow_embedded=False)


def cmd_schema(args: argparse.Namespace) -> int:
    print(json.dumps(event_schemas(), indent=2))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from loopline.status import render, status

    url, prefix = _deployment()

    async def main() -> dict[str, object]:
        await _check_redis(url)
        return await status(url, prefix, tasks=not args.no_tasks)

    report = asyncio.run(main())
    print(json.dumps(report) if args.json else render(report))
    return 0


def cmd_asyncapi(args: argparse.Namespace) -> int:
    from loopline.asyncapi import run

    return run(args)


def cmd_demo(args: argparse.Namespace) -> int:
    from loopline.agentfile import agent_from_dict
    from loopline.demo import DEMO_AGENT, DEMO_PROMPT, DEMO_TURNS
    from loopline.scripted import ScriptedOpenAIServer

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loopline", description="LLM agents as an event-driven pipeline on Redis Streams"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("up", help="run every service in one process (embedded without REDIS_URL)")
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("serve", help="run one service")
    p.add_argument("name", choices=SERVICES)
    p.set_defaults(func=cmd_serve)

    for name, func, help_text in (
        ("run", cmd_run, "submit a task, show progress, print the answer"),
        ("submit", cmd_submit, "submit a task and print its id"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("prompt")
        p.add_argument("--agent", metavar="FILE", help="agent file (YAML or JSON)")
        p.add_argument("--max-steps", type=int, default=None)
        if name == "run":
            p.add_argument("--json", action="store_true", help="print one JSON object")
        p.set_defaults(func=func)

    p = sub.add_parser("watch", help="follow the todos or edits stream, or one task's log")
    p.add_argument("what", choices=("todos", "edits", "task"))
    p.add_argument("task_id", nargs="?")
    p.add_argument("--from-start", action="store_true")
    p.add_argument("--no-follow", action="store_true", help="print what is there and exit")
    p.add_argument("--json", action="store_true", help="JSON lines")
    p.set_defaults(func=cmd_watch)

    p = sub.add_parser("cancel", help="stop a running task")
    p.add_argument("task_id")
    p.add_argument("--reason", default="cancelled from the command line")
    p.set_defaults(func=cmd_cancel)

    p = sub.add_parser("stats", help="per-agent counts and stage latencies from the task logs")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_stats)

    p = sub.add_parser("approvals", help="tasks waiting for a human decision")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_approvals)

    p = sub.add_parser("decide", help="answer a task waiting for approval")
    p.add_argument("task_id")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--approve", action="store_true")
    group.add_argument("--reject", nargs="?", const="", metavar="MESSAGE")
    group.add_argument("--respond", metavar="MESSAGE")
    group.add_argument("--edit", metavar="JSON", help='new args, or {"name": ..., "args": {...}}')
    group.add_argument(
        "--decisions",
        metavar="JSON",
        help="LangChain decisions, in order (per-call mode: {call id: decision})",
    )
    p.add_argument(
        "--call", metavar="ID", help="per-call mode: the waiting call to answer (its tool call id)"
    )
    p.set_defaults(func=cmd_decide)

    p = sub.add_parser("dlq", help="dead letters: list, show, replay or drop")
    p.add_argument("action", choices=("list", "show", "replay", "drop"))
    p.add_argument("id", nargs="?")
    p.add_argument("--count", type=int, default=100)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_dlq)

    p = sub.add_parser("demo", help="a scripted scenario end to end, no API key needed")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("schema", help="JSON Schema of every event")
    p.set_defaults(func=cmd_schema)

    p = sub.add_parser(
        "status", help="services and consumers, lag and pending, dead letters, tasks in flight"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--no-tasks", action="store_true", help="skip counting tasks (a SCAN of every key)"
    )
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("asyncapi", help="the AsyncAPI document of every stream and event")
    from loopline.asyncapi import add_arguments

    add_arguments(p)
    p.set_defaults(func=cmd_asyncapi)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except (UsageError, ConfigurationError) as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        return 130
    return code


def console() -> None:
    """The console script: exit with main's status."""
    raise SystemExit(main())


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

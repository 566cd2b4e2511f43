"""Every command's arguments, in one place and in the order ``loopline --help`` lists
them; each command's function lives in the module of its group."""

from __future__ import annotations

import argparse
from typing import Any

from contracts.agent import OVERRIDABLE
from contracts.events import MULTITASK_STRATEGIES
from contracts.streams import SERVICES
from loopline.cli.agents import cmd_agents, cmd_deploy
from loopline.cli.approvals import cmd_approvals, cmd_decide
from loopline.cli.operations import (
    cmd_asyncapi,
    cmd_dlq,
    cmd_doctor,
    cmd_schema,
    cmd_stats,
    cmd_status,
)
from loopline.cli.partitions import add_parser as add_partitions_parser
from loopline.cli.security import add_parser as add_acl_parser
from loopline.cli.serving import cmd_serve, cmd_up
from loopline.cli.tasks import cmd_cancel, cmd_demo, cmd_run, cmd_submit, cmd_watch
from loopline.cli.threads import cmd_threads

NO_KEY_HELP = """\
without an API key:
  loopline demo                           a scripted scenario, nothing to set up
  python -m loopline.testing.scripted --script script.json --port 8000
                                          a scripted OpenAI-compatible server: it
                                          answers every conversation from the script,
                                          a JSON list of turns
                                          [{"content": "...", "tool_calls":
                                            [{"name": "add", "args": {"a": 1}}]}, ...]
                                          (the n-th turn for a request that already
                                          holds n assistant messages; --help for more)
  export OPENAI_BASE_URL=http://127.0.0.1:8000/v1
  loopline run "what is 20 + 22?" --agent adder.yaml
                                          your agent (and create_agent in Python)
                                          against it; see the README's
                                          "Try it without a key"

with a key: set OPENAI_API_KEY (and OPENAI_BASE_URL for another OpenAI-compatible
server). With REDIS_URL, commands act on that deployment: its services call the model
and import the tools, so the client needs neither.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loopline",
        description="LLM agents as an event-driven pipeline on Redis Streams",
        epilog=NO_KEY_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("up", help="run every service in one process (embedded without REDIS_URL)")
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("serve", help="run one service, or the HTTP gateway (api)")
    p.add_argument("name", choices=(*SERVICES, "api"))
    p.add_argument("--host", help="api only: the interface to listen on (LOOPLINE_API_HOST)")
    p.add_argument("--port", type=int, help="api only: the port (LOOPLINE_API_PORT, 2024)")
    p.set_defaults(func=cmd_serve)

    _task_commands(sub)
    _agent_commands(sub)

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
    p.add_argument("--json", action="store_true", help="print the outcome as JSON")
    p.set_defaults(func=cmd_decide)

    p = sub.add_parser("dlq", help="dead letters: list, show, replay or drop")
    p.add_argument("action", choices=("list", "show", "replay", "drop"))
    p.add_argument("id", nargs="?")
    p.add_argument("--count", type=int, default=100)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_dlq)

    p = sub.add_parser("demo", help="a scripted scenario end to end, no API key needed")
    p.add_argument("--json", action="store_true")
    p.add_argument("--plain", action="store_true", help="plain lines instead of the live view")
    p.set_defaults(func=cmd_demo)

    sub.add_parser("schema", help="JSON Schema of every event").set_defaults(func=cmd_schema)

    p = sub.add_parser(
        "status", help="services and consumers, lag and pending, dead letters, tasks in flight"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--no-tasks", action="store_true", help="skip counting tasks (a SCAN of every key)"
    )
    p.set_defaults(func=cmd_status)

    p = sub.add_parser(
        "doctor",
        help="check the deployment: Redis, the services, the deployed agents, the model "
        "endpoints; say what to fix",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_doctor)

    add_acl_parser(sub)
    add_partitions_parser(sub)

    p = sub.add_parser("asyncapi", help="the AsyncAPI document of every stream and event")
    from loopline.asyncapi import add_arguments

    add_arguments(p)
    p.set_defaults(func=cmd_asyncapi)
    return parser


def _agent_commands(sub: Any) -> None:
    """``deploy`` and ``agents``: the operator's registered agents."""
    p = sub.add_parser("deploy", help="register an agent file by name (the operator's)")
    p.add_argument("agent_file", metavar="AGENT_FILE")
    p.add_argument("--name", help="the name tasks use (default: the file's name field)")
    p.add_argument("--max-steps", type=int, default=None)
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--overridable",
        metavar="FIELDS",
        help=f"what a task may override, comma-separated (default: {','.join(OVERRIDABLE)})",
    )
    group.add_argument("--no-overrides", action="store_true", help="tasks override nothing")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_deploy)

    p = sub.add_parser("agents", help="deployed agents: list, show or rm (NAME[@VERSION])")
    p.add_argument("action", choices=("list", "show", "rm"))
    p.add_argument("ref", nargs="?", metavar="NAME[@VERSION]")
    p.add_argument("--all", action="store_true", help="list every version")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_agents)


def _task_commands(sub: Any) -> None:
    """run, submit, watch, cancel and threads."""
    for name, func, help_text in (
        ("run", cmd_run, "submit a task, show progress, print the answer"),
        ("submit", cmd_submit, "submit a task and print its id"),
    ):
        p = sub.add_parser(
            name,
            help=help_text,
            description=help_text,
            epilog=NO_KEY_HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.add_argument("prompt")
        p.add_argument("--agent", metavar="FILE", help="agent file (YAML or JSON)")
        p.add_argument(
            "--deployed",
            metavar="NAME[@VERSION]",
            help="a deployed agent (loopline agents list) instead of an agent file",
        )
        p.add_argument("--max-steps", type=int, default=None)
        p.add_argument("--thread", metavar="ID", help="a run of this thread: continue it")
        p.add_argument(
            "--multitask-strategy",
            choices=MULTITASK_STRATEGIES,
            default="reject",
            help="when the thread has a run going (default: reject this one)",
        )
        p.add_argument("--json", action="store_true", help="print one JSON object")
        if name == "run":
            p.add_argument(
                "--plain",
                action="store_true",
                help="plain lines instead of the live view (the default when not a terminal)",
            )
            p.add_argument(
                "--cancel-on-interrupt",
                action="store_true",
                help="on Ctrl-C, cancel the task (by default it runs on in the deployment)",
            )
        p.set_defaults(func=func)

    p = sub.add_parser("watch", help="follow the todos or edits stream, or one task's log")
    p.add_argument("what", choices=("todos", "edits", "task"))
    p.add_argument("task_id", nargs="?")
    p.add_argument("--from-start", action="store_true")
    p.add_argument("--no-follow", action="store_true", help="print what is there and exit")
    p.add_argument("--json", action="store_true", help="JSON lines")
    p.add_argument("--plain", action="store_true", help="plain lines instead of the live view")
    p.set_defaults(func=cmd_watch)

    p = sub.add_parser("cancel", help="stop a running task")
    p.add_argument("task_id")
    p.add_argument("--reason", default="cancelled from the command line")
    p.add_argument("--json", action="store_true", help="print how the task ended as JSON")
    p.set_defaults(func=cmd_cancel)

    p = sub.add_parser(
        "threads", help="conversations: list them, show one, its checkpoints, remove one"
    )
    p.add_argument("action", choices=("list", "show", "history", "rm"))
    p.add_argument("thread_id", nargs="?")
    p.add_argument("--limit", type=int, default=None, help="history: the newest N checkpoints")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_threads)

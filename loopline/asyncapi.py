"""The AsyncAPI document of a loopline deployment: every stream and every event.

The services consume their streams with loopline's own readers (``services.consumer``), not
with FastStream subscribers, so the app that runs them gives FastStream nothing to
document. This module declares the same topology on a FastStream broker that never
connects: one subscriber per consumed stream (with its service's consumer group) and one
publisher per stream read outside (the public streams, the dead letters, a task's log),
each typed with the events it carries, and lets FastStream generate the document. The
payloads are the pydantic event models of ``contracts.events`` (the schemas
``loopline schema`` prints). A few additions FastStream does not make: the task log's
address parameter, the wire format (one ``__data__`` field, no headers, so no correlation
id), and a stable key order.

Regenerate the committed copy after changing an event or a stream::

    loopline asyncapi -o docs/asyncapi.json        # or: python -m loopline.asyncapi -o ...
    loopline asyncapi --check docs/asyncapi.json   # exit 1 when it is not current

``tests/test_asyncapi.py`` fails when ``docs/asyncapi.json`` is not current.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Union

from pydantic import Field

from contracts.events import (
    SCHEMA_VERSION,
    ApprovalRequested,
    CancelRequested,
    ContextEdited,
    ContextRequested,
    DeadLettered,
    DecisionsRefused,
    DecisionsSubmitted,
    Event,
    ModelFailed,
    ModelInterrupted,
    ModelRequested,
    ModelResponded,
    ModelResumed,
    NodesUpdated,
    RunDequeued,
    StepStarted,
    TaskCompleted,
    TaskFailed,
    TaskSubmitted,
    TodosUpdated,
    ToolCompleted,
    ToolFailed,
    ToolInterrupted,
    ToolRequested,
    ToolResumed,
)
from contracts.streams import DATA_FIELD, GROUPS, Names

TASK_TAG = "task_tag"
THREAD_TAG = "thread_tag"
"""The task log's address parameter: the task id in braces (its hash tag)."""


@dataclass(frozen=True)
class Channel:
    title: str
    stream: Callable[[Names], str]
    events: tuple[type[Event], ...]
    published_by: str
    consumed_by: str | None
    """The service whose consumer group reads it; None: read outside the pipeline."""
    about: str


CHANNELS: tuple[Channel, ...] = (
    Channel(
        "tasks",
        lambda n: n.tasks,
        (TaskSubmitted, CancelRequested, DecisionsSubmitted, RunDequeued),
        "clients (loopline.Client, `loopline run|submit|cancel`, any Redis client); "
        "RunDequeued: whichever service ended a thread's run that others waited behind",
        "loop",
        "Work for the loop: new tasks, cancellations, a human's decisions for a task "
        "waiting for approval, and a run whose turn on its thread has come.",
    ),
    Channel(
        "loop",
        lambda n: n.loop,
        (ModelResponded, ModelInterrupted, ModelFailed, ToolCompleted, ToolFailed, ToolInterrupted),
        "model (replies, interrupts, failures), tools and todos (tool results and failures, "
        "their interrupts)",
        "loop",
        "Results coming back to the loop, which applies each as one atomic transition of "
        "the task's state. Replies and tool results of agents without loop-stage hooks do "
        "not come here: the model and tools services apply those transitions themselves.",
    ),
    Channel(
        "context",
        lambda n: n.context,
        (ContextRequested,),
        "loop, or tools when a result completes a step (agents with context editing)",
        "context",
        "Build the model's view of a step: context editing over the transcript prefix.",
    ),
    Channel(
        "model",
        lambda n: n.model,
        (ModelRequested, ModelResumed),
        "context; loop or tools (when a result completes a step) for agents without "
        "context editing; loop (ModelResumed: a wrap_model_call interrupt answered)",
        "model",
        "Call the model on the transcript prefix with the given edits applied.",
    ),
    Channel(
        "tools",
        lambda n: n.tools,
        (ToolRequested, ToolResumed),
        "loop, or model for agents without loop-stage hooks (one event per tool call; the "
        "calls of a step run in parallel)",
        "tools",
        "Run one of the agent's tool calls (ToolResumed: again, with a human's decision).",
    ),
    Channel(
        "todo-calls",
        lambda n: n.todo_calls,
        (ToolRequested,),
        "loop or model (the `write_todos` calls)",
        "todos",
        "Run a `write_todos` call: validate and store the task's todo list.",
    ),
    Channel(
        "todos",
        lambda n: n.todos,
        (TodosUpdated,),
        "todos",
        None,
        "Public: every accepted todo list of every task (`loopline watch todos`).",
    ),
    Channel(
        "edits",
        lambda n: n.edits,
        (ContextEdited,),
        "context",
        None,
        "Public: every context edit that changed the model's view (`loopline watch edits`).",
    ),
    Channel(
        "approvals",
        lambda n: n.approvals,
        (ApprovalRequested,),
        "loop",
        None,
        "Public: tasks waiting for a human decision (answer with DecisionsSubmitted on the "
        "tasks stream).",
    ),
    Channel(
        "dlq",
        lambda n: n.dlq,
        (DeadLettered,),
        "every service",
        None,
        "Dead letters: entries no consumer could handle, with the reason "
        "(`loopline dlq list|show|replay|drop`).",
    ),
    Channel(
        "task-log",
        lambda n: n.task_log(TASK_TAG),
        (
            TaskSubmitted,
            StepStarted,
            ContextEdited,
            ModelResponded,
            NodesUpdated,
            ApprovalRequested,
            TodosUpdated,
            ToolCompleted,
            ToolInterrupted,
            TaskCompleted,
            TaskFailed,
            DecisionsRefused,
        ),
        "loop (context and todos add their ContextEdited and TodosUpdated)",
        None,
        "A task's own ordered event log, read by clients from any offset "
        "(`loopline watch task ID`); ends with TaskCompleted or TaskFailed.",
    ),
    Channel(
        "thread-log",
        lambda n: n.thread_log(THREAD_TAG),
        (TaskSubmitted, TaskCompleted, TaskFailed),
        "loop (a run's start) and whichever service ended a run (its end)",
        None,
        "A thread's log of runs: each run's TaskSubmitted as it becomes the thread's "
        "active run, then its TaskCompleted or TaskFailed.",
    ),
)

INFO_DESCRIPTION = f"""\
LLM agents as an event-driven pipeline on Redis Streams: five services (loop, context,
model, tools, todos) exchange these events.

Wire format: every stream entry has one field, `{DATA_FIELD}`, holding the event as UTF-8
JSON; entries carry no headers. Every event has a `type` tag, `task_id`, `version` and
`at`. Stream and key names start with a deployment prefix (`LOOPLINE_PREFIX`; `loopline`
in this document). A service reads its streams in its own consumer group (named after
the service); its replicas share the group. The info version is the events' schema
version (their `version` field)."""


def _payload(events: tuple[type[Event], ...]) -> Any:
    if len(events) == 1:
        return events[0]
    return Annotated[Union[events], Field(discriminator="type")]  # noqa: UP007


def _describe(channel: Channel, stream: str) -> str:
    kinds = ", ".join(e.__name__ for e in channel.events)
    reader = (
        f"Consumed by the {channel.consumed_by} service (consumer group "
        f"`{GROUPS[channel.consumed_by]}`)."
        if channel.consumed_by
        else "Read outside the pipeline (XREAD from any offset)."
    )
    return (
        f"{channel.about}\n\nStream `{stream}`: {kinds}. "
        f"Published by {channel.published_by}. {reader}"
    )


def build_broker(prefix: str = "loopline") -> Any:
    """A FastStream broker declaring every stream (it is never started)."""
    from faststream.redis import RedisBroker, StreamSub

    names = Names(prefix)
    broker = RedisBroker(
        "redis://localhost:6379",
        description="The deployment's Redis (REDIS_URL): Redis 7 or a Redis Cluster.",
    )
    for channel in CHANNELS:
        stream = channel.stream(names)
        payload = _payload(channel.events)
        if channel.consumed_by is not None:
            service = channel.consumed_by

            async def handle(body: Any) -> None:  # never called: it documents the payload
                return None

            handle.__annotations__ = {"body": payload, "return": None}
            handle.__name__ = handle.__qualname__ = f"{service}_reads_{channel.title}"
            broker.subscriber(
                stream=StreamSub(
                    stream,
                    group=GROUPS[service],
                    consumer=f"{service}-<host>-<pid>-<random>",
                ),
                title=channel.title,
                description=_describe(channel, stream),
            )(handle)
        else:
            broker.publisher(
                stream=stream,
                title=channel.title,
                description=_describe(channel, stream),
                schema=payload,
            )
    return broker


def _sorted(mapping: dict[str, Any]) -> dict[str, Any]:
    return {key: mapping[key] for key in sorted(mapping)}


def _in_table_order(mapping: dict[str, Any]) -> dict[str, Any]:
    """Channels and operations in the order of ``CHANNELS`` (the data flow), whatever
    order FastStream keeps its subscribers in; anything else after them, sorted."""
    order = {channel.title: i for i, channel in enumerate(CHANNELS)}
    keys = sorted(mapping, key=lambda key: (order.get(key, len(order)), key))
    return {key: mapping[key] for key in keys}


def document(prefix: str = "loopline") -> dict[str, Any]:
    """The AsyncAPI 3.0 document as a dict, with a stable key order."""
    from faststream.specification import AsyncAPI

    spec = AsyncAPI(
        build_broker(prefix),
        title="loopline",
        version=str(SCHEMA_VERSION),
        description=INFO_DESCRIPTION,
    )
    raw: dict[str, Any] = json.loads(spec.to_specification().to_json())
    components = raw.get("components", {})
    for message in components.get("messages", {}).values():
        message.pop("correlationId", None)  # loopline entries carry no headers
    log_address = Names(prefix).task_log(TASK_TAG)
    for channel in raw.get("channels", {}).values():
        if channel.get("address") == log_address:
            channel["parameters"] = {
                TASK_TAG: {
                    "description": "The task id in braces, braces included: the key of "
                    f"task `3f2a` is `{Names(prefix).task_log('3f2a')}`. The braces make the "
                    "id a hash tag, so all of a task's keys share a Redis Cluster slot.",
                    "examples": ["{3f2a9c0d1e2b4a5f8e7d6c5b4a392817}"],
                }
            }
        if channel.get("address") == Names(prefix).thread_log(THREAD_TAG):
            channel["parameters"] = {
                THREAD_TAG: {
                    "description": "The thread id in braces, braces included (a hash tag: "
                    "all of a thread's keys share a Redis Cluster slot).",
                    "examples": ["{support-chat-42}"],
                }
            }
    ordered: dict[str, Any] = {
        "asyncapi": raw["asyncapi"],
        "info": raw["info"],
        "defaultContentType": raw.get("defaultContentType", "application/json"),
        "servers": raw.get("servers", {}),
        "channels": _in_table_order(raw.get("channels", {})),
        "operations": _in_table_order(raw.get("operations", {})),
        "components": {
            "messages": _sorted(components.get("messages", {})),
            "schemas": _sorted(components.get("schemas", {})),
        },
    }
    return ordered


def render(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def check(path: Path, prefix: str = "loopline") -> str | None:
    """None when ``path`` holds the current document; else what is wrong, in one line."""
    if not path.exists():
        return f"{path} does not exist"
    if path.read_text(encoding="utf-8") != render(document(prefix)):
        return f"{path} is not current"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loopline.asyncapi", description="the AsyncAPI document of loopline"
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", metavar="FILE", help="write it here (default: stdout)")
    parser.add_argument(
        "--check", metavar="FILE", help="exit 1 unless FILE holds the current document"
    )
    parser.add_argument("--prefix", default="loopline", help="stream prefix to document")


def run(args: argparse.Namespace) -> int:
    if args.check:
        problem = check(Path(args.check), args.prefix)
        if problem:
            print(
                f"loopline: {problem}; regenerate it: loopline asyncapi -o {args.check}",
                file=sys.stderr,
            )
            return 1
        print(f"{args.check} is current", file=sys.stderr)
        return 0
    text = render(document(args.prefix))
    if args.output:
        path = Path(args.output)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

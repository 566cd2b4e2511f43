"""A thread's supersteps written to a LangGraph checkpointer in LangGraph's own format.

loopline's thread model (``loopline.history``) folds each run's ordered event log into
the checkpoints LangGraph's Pregel loop makes for ``create_agent``'s graph: the input's,
``__start__``'s, one after each superstep, each with the tasks that ran next and what
they wrote. This module writes those supersteps to the checkpointer the user gave, so
that LangGraph itself reads them (``get_state_history`` lists the same states as for the
same run of LangChain's agent) and runs on from any of them (time travel, a fork).

The bookkeeping is LangGraph's own, done by its own functions on the agent's compiled
graph (LangChain's ``create_agent`` for the same arguments, ``loopline.graph``): which
tasks a checkpoint has next and their ids (``prepare_next_tasks``), how a superstep's
writes move the channels, their versions and the versions each node has seen
(``apply_writes``), and the checkpoint made of them (``create_checkpoint``). What loopline
supplies is what LangGraph cannot know without running the nodes: each task's writes,
taken from the fold (the node's update, and the route to the nodes that ran after it).
The checkpoints keep the fold's ids, so a checkpoint id means the same state to
loopline and to LangGraph.

Where the fold and LangGraph's reckoning of the graph disagree (a superstep LangGraph
would not have scheduled), ``SaverStepsError`` says so rather than writing a history
LangGraph cannot continue.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from langchain_core.messages import AIMessage, ToolMessage

from loopline.history import MODEL, START, TOOLS, Checkpoint, Task


class SaverStepsError(ValueError):
    """A run's supersteps do not fit the agent's graph as LangGraph schedules it, or
    that graph cannot be built (permanent: writing again would fail again)."""


@dataclass
class _Head:
    """Where the writing stands: the saver's checkpoint the next one is a child of, and
    the agent's channels as they hold its values."""

    checkpoint: dict[str, Any]
    config: dict[str, Any]
    step: int
    channels: Mapping[str, Any]
    managed: Any
    updated: set[str]
    stored: dict[str, Any]
    """The channel versions of the checkpoint last stored (what moved since is put)."""
    fresh: bool
    """The thread has no checkpoint in the saver yet."""
    writes: list[tuple[str, tuple[Any, ...]]]
    """The saver calls to make (``put``, ``put_writes``), made once every superstep
    fitted the graph: a run is written whole or not at all."""


def saver_config(thread_id: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    configurable = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


async def get_tuple(saver: Any, config: dict[str, Any]) -> Any:
    """The saver's checkpoint tuple for ``config``; a saver with only sync methods
    (``PostgresSaver``) is asked on a worker thread, one with only async ones
    (``AsyncPostgresSaver``) on this loop."""
    try:
        return await saver.aget_tuple(config)
    except NotImplementedError:
        return await asyncio.to_thread(saver.get_tuple, config)


async def _put(saver: Any, *args: Any) -> Any:
    try:
        return await saver.aput(*args)
    except NotImplementedError:
        return await asyncio.to_thread(saver.put, *args)


async def _put_writes(saver: Any, *args: Any) -> None:
    try:
        await saver.aput_writes(*args)
    except NotImplementedError:
        await asyncio.to_thread(saver.put_writes, *args)


async def write_supersteps(
    saver: Any,
    graph: Any,
    thread_id: str,
    made: Sequence[Checkpoint],
    *,
    parent: Checkpoint | None,
    metadata_of: Any,
) -> str | None:
    """Write the checkpoints ``made`` (one run's, oldest first, as the fold made them)
    to ``saver`` as LangGraph's loop would have written them running ``graph``.

    The first is written as a child of the saver's checkpoint of the fold's parent id
    when the saver has it (the run went on from a checkpoint loopline wrote, a fork
    included), else of the saver's newest (the thread as LangGraph left it). ``parent``:
    the fold's checkpoint before the first, whose tasks lead to it when the first is not
    an input's (a run that goes on without one).
    ``metadata_of(checkpoint)``: its LangGraph metadata (``source`` and the run's config
    metadata; ``step`` is counted on from the saver's parent). Checkpoints the saver
    holds already are skipped. The id of the last checkpoint written (None: none)."""
    if not made:
        return None
    if await get_tuple(saver, saver_config(thread_id, made[-1].id)) is not None:
        return None  # written already (a second call for the same run's end)
    head = await _head(saver, graph, thread_id, made[0].parent_id)
    last: str | None = None
    previous = parent
    for checkpoint in made:
        if checkpoint.source == "input":
            writes = _input_writes(checkpoint)
            if writes is not None:
                # a new input drops what the head had still to run (its tasks consume
                # their triggers, writing nothing), as LangGraph's loop does
                discarded = list(_next_tasks(graph, head).values())
                _apply(graph, saver, head, [*discarded, _input_task(writes)])
        elif checkpoint.source == "fork":
            head.updated = set()  # a copy of its parent, nothing written
        elif checkpoint.source == "update":
            _apply(graph, saver, head, [_update_task(graph, checkpoint)])
        elif previous is not None:
            _superstep(saver, graph, head, previous, checkpoint)
        _save(saver, graph, head, checkpoint, {**_graph_metadata(graph), **metadata_of(checkpoint)})
        _check_next(graph, head, checkpoint)
        last, previous = checkpoint.id, checkpoint
    for call, args in head.writes:
        await (_put(saver, *args) if call == "put" else _put_writes(saver, *args))
    return last


def _graph_metadata(graph: Any) -> dict[str, Any]:
    """The metadata of the graph's own config (``create_agent(name=...)``'s
    ``lc_agent_name``), which LangGraph's loop puts in every checkpoint's."""
    from langgraph.checkpoint.base import EXCLUDED_METADATA_KEYS

    given = (getattr(graph, "config", None) or {}).get("metadata") or {}
    return {k: v for k, v in given.items() if k not in EXCLUDED_METADATA_KEYS}


async def _head(saver: Any, graph: Any, thread_id: str, parent_id: str | None) -> _Head:
    from langgraph.pregel._checkpoint import channels_from_checkpoint, empty_checkpoint

    found = None
    if parent_id is not None:
        found = await get_tuple(saver, saver_config(thread_id, parent_id))
    if found is None:
        found = await get_tuple(saver, saver_config(thread_id))
    if found is None:
        checkpoint: dict[str, Any] = dict(empty_checkpoint())
        config, step = saver_config(thread_id), -2
    else:
        checkpoint = copy.deepcopy(dict(found.checkpoint))
        config, step = found.config, int((found.metadata or {}).get("step", -1))
    channels, managed = channels_from_checkpoint(graph.channels, checkpoint)  # type: ignore[arg-type]
    stored = dict(checkpoint["channel_versions"])
    return _Head(checkpoint, config, step, channels, managed, set(), stored, found is None, [])


def _input_writes(checkpoint: Checkpoint) -> list[tuple[str, Any]] | None:
    """The run's input as LangGraph's loop writes it to ``__start__``."""
    task = next((t for t in checkpoint.tasks if t.name == START), None)
    if task is None:
        return None
    return [(START, copy.deepcopy(task.result))]


def _input_task(writes: list[tuple[str, Any]]) -> Any:
    from langgraph._internal._constants import INPUT
    from langgraph.pregel._algo import PregelTaskWrites

    return PregelTaskWrites((), INPUT, writes, [])


def _update_task(graph: Any, checkpoint: Checkpoint) -> Any:
    """An ``update_state`` as LangGraph applies it: a task of the node it was written
    as (the tools when the model runs next, else the model), writing the state the
    fold holds after it (``Overwrite``: the update through the reducers is the fold's
    reckoning) and the route to what runs next."""
    from langgraph._internal._constants import INTERRUPT
    from langgraph.channels.binop import BinaryOperatorAggregate
    from langgraph.pregel._algo import PregelTaskWrites
    from langgraph.types import Overwrite

    def whole(key: str, value: Any) -> tuple[str, Any]:
        # a reducer's channel takes the value as it is (Overwrite), another one holds it
        reduced = isinstance(graph.channels.get(key), BinaryOperatorAggregate)
        return (key, Overwrite(copy.deepcopy(value)) if reduced else copy.deepcopy(value))

    as_node = TOOLS if checkpoint.next == (MODEL,) else MODEL
    writes = [whole("messages", checkpoint.messages)]
    writes.extend(whole(k, v) for k, v in checkpoint.keys.items() if k in graph.channels)
    writes.extend(_routes(graph, checkpoint))
    return PregelTaskWrites((INTERRUPT, 0), as_node, writes, [INTERRUPT])


def _apply(graph: Any, saver: Any, head: _Head, tasks: Sequence[Any]) -> None:
    from langgraph.pregel._algo import apply_writes

    head.updated = apply_writes(
        head.checkpoint,  # type: ignore[arg-type]
        head.channels,
        tasks,
        saver.get_next_version,
        graph.trigger_to_nodes,
    )


def _next_tasks(graph: Any, head: _Head) -> dict[str, Any]:
    """The tasks LangGraph schedules from the head's checkpoint, with their ids."""
    from langgraph.pregel._algo import prepare_next_tasks

    step = head.step + 1
    checkpoint: Any = head.checkpoint
    config: Any = head.config
    tasks: dict[str, Any] = prepare_next_tasks(
        checkpoint,
        [],
        graph.nodes,
        head.channels,
        head.managed,
        config,
        step,
        step + 2,
        # as ``get_state`` asks: tasks with the channels that trigger them, nothing run
        for_execution=True,
        store=None,
        checkpointer=None,
        manager=None,
        trigger_to_nodes=graph.trigger_to_nodes,
        updated_channels=head.updated,
    )
    return tasks


def _superstep(saver: Any, graph: Any, head: _Head, before: Checkpoint, after: Checkpoint) -> None:
    """The superstep from ``before`` to ``after``: the tasks LangGraph schedules at the
    head, each given what the fold's task of the same node wrote, saved as the head's
    pending writes and applied to the channels."""
    from langgraph._internal._constants import INTERRUPT, NO_WRITES
    from langgraph.pregel._algo import PregelTaskWrites, task_path_str

    scheduled = list(_next_tasks(graph, head).values())
    done = list(before.tasks) or [Task(name) for name in before.next]
    if sorted(t.name for t in scheduled) != sorted(t.name for t in done):
        raise SaverStepsError(
            f"checkpoint {before.id}: LangGraph schedules "
            f"{sorted(t.name for t in scheduled)}, the run ran {sorted(t.name for t in done)}"
        )
    routes = _routes(graph, after)
    updates = [_update_writes(ran.result) for ran in _by_name(done)]
    if len(updates) == 1:
        updates[0] = _as_after(graph, updates[0], before, after)
    # every task of the superstep routes to what runs next (the tools each route back
    # to the model, as their edges do); the Sends to the tools are the model's own
    applied = [
        PregelTaskWrites(
            task.path, task.name, [*update, *(routes if i == 0 else _pulls(routes))], task.triggers
        )
        for i, (task, update) in enumerate(zip(_by_name(scheduled), updates, strict=True))
    ]
    _apply(graph, saver, head, applied)  # message ids are given here, before they are saved
    for task, ran, written in zip(_by_name(scheduled), _by_name(done), applied, strict=True):
        path = task_path_str(task.path)
        if ran.interrupts:  # what the node asked a human, before it went on
            asked = [(INTERRUPT, list(ran.interrupts))]
            head.writes.append(("put_writes", (head.config, asked, task.id, path)))
        # a node that wrote nothing is recorded as done, as LangGraph's runner records it;
        # what it wrote to an untracked channel is applied, never stored (as LangGraph's
        # loop keeps it)
        writes = [w for w in written.writes if not _untracked(graph, w[0])]
        writes = writes or [(NO_WRITES, None)]
        head.writes.append(("put_writes", (head.config, writes, task.id, path)))


def _as_after(
    graph: Any, writes: list[tuple[str, Any]], before: Checkpoint, after: Checkpoint
) -> list[tuple[str, Any]]:
    """A lone node's writes completed from the state after its superstep, where the
    fold's record of the node's update holds less than the state shows: the messages it
    appended beyond its update's own (a structured-output tool's answer beside the
    model's reply) and the keys it set (``structured_response``)."""
    written = dict(writes)
    own = written.get("messages")
    appended = after.messages[len(before.messages) :]
    if isinstance(own, list) and len(appended) > len(own) and _same(appended[: len(own)], own):
        written["messages"] = copy.deepcopy(appended)
    for key, value in after.keys.items():
        if key not in written and key in graph.channels and before.keys.get(key) != value:
            written[key] = copy.deepcopy(value)
    return list(written.items())


def _same(left: Sequence[Any], right: Sequence[Any]) -> bool:
    return [(m.type, m.content) for m in left] == [(m.type, m.content) for m in right]


def _untracked(graph: Any, channel: str) -> bool:
    from langgraph.channels.untracked_value import UntrackedValue

    return isinstance(graph.channels.get(channel), UntrackedValue)


def _by_name(tasks: Sequence[Any]) -> list[Any]:
    """Tasks grouped by node name, each node's in their own order (the tools' in the
    order of the calls)."""
    order = {name: i for i, name in enumerate(dict.fromkeys(t.name for t in tasks))}
    return sorted(tasks, key=lambda t: order[t.name])


def _update_writes(result: Any) -> list[tuple[str, Any]]:
    if not isinstance(result, Mapping):
        return []
    return [(k, copy.deepcopy(v)) for k, v in result.items()]


def _pulls(writes: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    from langgraph._internal._constants import TASKS

    return [w for w in writes if w[0] != TASKS]


def _routes(graph: Any, after: Checkpoint) -> list[tuple[str, Any]]:
    """What a superstep's nodes write to route to the nodes that run next (``after.next``):
    a node's edge channel (``branch:to:<node>``), and for the tools one ``Send`` per call
    of the last reply that no tool message answers, as ``create_agent``'s model-to-tools
    edge sends them."""
    from langgraph._internal._constants import TASKS
    from langgraph.types import Send

    writes: list[tuple[str, Any]] = []
    for name in dict.fromkeys(n for n in after.next if n != TOOLS):
        channel = f"branch:to:{name}"
        if channel not in graph.channels:
            raise SaverStepsError(f"the agent's graph has no edge to {name!r} ({channel})")
        writes.append((channel, None))
    calls = after.next.count(TOOLS)
    if calls:
        for call in _pending_calls(after)[:calls]:
            writes.append((TASKS, Send(TOOLS, [copy.deepcopy(call)])))
    return writes


def _pending_calls(checkpoint: Checkpoint) -> list[dict[str, Any]]:
    messages = checkpoint.messages
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if isinstance(message, AIMessage) and message.tool_calls:
            answered = {m.tool_call_id for m in messages[i + 1 :] if isinstance(m, ToolMessage)}
            return [dict(c) for c in message.tool_calls if c["id"] not in answered]
    return []


def _save(
    saver: Any, graph: Any, head: _Head, checkpoint: Checkpoint, metadata: Mapping[str, Any]
) -> None:
    """The head's channels as a new checkpoint with the fold's id and time, a child of
    the head."""
    # the copy LangGraph's loop puts (the saver-level one adds a pending_sends key,
    # which a v4 checkpoint has not: what the saver keeps would differ from what was put)
    from langgraph.pregel._checkpoint import copy_checkpoint, create_checkpoint

    head.step += 1
    made: dict[str, Any] = dict(
        create_checkpoint(
            head.checkpoint,  # type: ignore[arg-type]
            head.channels,
            head.step,
            # the fold's id, unless it would sort before its parent in the saver (a
            # checkpoint LangGraph wrote later than the run's events)
            id=checkpoint.id if head.fresh or checkpoint.id > head.checkpoint["id"] else None,
            updated_channels=head.updated,
            get_next_version=saver.get_next_version,
            stored_versions=head.stored,
            trigger_to_nodes=graph.trigger_to_nodes,
        )
    )
    made["ts"] = datetime.datetime.fromtimestamp(checkpoint.at, datetime.UTC).isoformat()
    versions = {k: v for k, v in made["channel_versions"].items() if head.stored.get(k) != v}
    stored = {**metadata, "step": head.step, "parents": {}}
    # a copy: the head's checkpoint goes on changing in place (``apply_writes``)
    kept: Any = copy_checkpoint(cast(Any, made))
    head.writes.append(("put", (head.config, kept, stored, versions)))
    thread_id = head.config["configurable"]["thread_id"]
    head.config = saver_config(thread_id, made["id"])  # what the saver's put answers
    head.checkpoint, head.stored = made, dict(made["channel_versions"])
    head.fresh = False


def _check_next(graph: Any, head: _Head, checkpoint: Checkpoint) -> None:
    """What LangGraph schedules from the checkpoint written is what the run ran next."""
    scheduled = sorted(t.name for t in _next_tasks(graph, head).values())
    expected = sorted(checkpoint.next)
    if scheduled != expected:
        raise SaverStepsError(
            f"checkpoint {checkpoint.id}: LangGraph would run {scheduled} next, "
            f"the run ran {expected}"
        )

"""The checkpointer given to ``create_agent`` as the record of its threads, in LangGraph's
own format: at the end of each run loopline writes the run's checkpoints to it, one per
superstep as LangGraph's loop writes them (``loopline.saver_steps``, from the thread's
fold in ``loopline.history``), so LangGraph's ``create_agent`` on the same saver lists
the same history and continues the thread from any of its checkpoints; before a run it
takes the saver's newest checkpoint into the thread's working copy in Redis when the
saver holds a state loopline did not write (a thread LangGraph ran or continued).

A newest checkpoint is loopline's own when the thread's fold has its id (the saver's
checkpoints keep the fold's ids), or, as older versions wrote them, when its metadata
carries ``WRITER``. The one taken in last is kept in the thread's state hash
(``saver_checkpoint``), so it is taken in once. Only taking in writes Redis from the
caller's process (a producer under ACLs reads threads only: a thread LangGraph ran is
refused there with Redis's NOPERM, never skipped).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from typing import Any

import redis.asyncio as aioredis

from contracts.messages import from_langchain
from contracts.streams import Names
from loopline.history import MODEL, Checkpoint, ThreadHistory, next_after
from loopline.history import checkpoint_id as new_checkpoint_id
from loopline.saver_steps import get_tuple, saver_config, write_supersteps
from services.tasks.threads import stage_transcript

EXPIRES_FIELD = "loopline_expires_at"
"""In the metadata of a checkpoint loopline writes for a deployment whose threads
expire (``thread_ttl_s``): when the thread expires (epoch seconds), unless a later run
renews it. A thread gone from Redis whose saver's newest checkpoint is loopline's and
past it is deleted from the saver too (``take_in``): what expires is gone from both."""
SAVER_FIELD = "saver_checkpoint"
"""The thread state's field: the id of the saver's checkpoint last taken in."""
WRITER = {"writer": "loopline"}
"""In the metadata of the checkpoints older versions of loopline wrote (one per run)."""


def is_saver(checkpointer: Any) -> bool:
    from langgraph.checkpoint.base import BaseCheckpointSaver

    return isinstance(checkpointer, BaseCheckpointSaver)


async def latest(saver: Any, thread_id: str) -> Any:
    """The saver's newest checkpoint tuple of the thread (None: it has none); a saver
    with only sync methods (``PostgresSaver``) is asked on a worker thread."""
    return await get_tuple(saver, saver_config(thread_id))


async def write_run(
    saver: Any,
    graph: Any,
    history: ThreadHistory,
    thread_id: str,
    run_id: str,
    *,
    saved_as: str | None = None,
    expires_at: float | None = None,
) -> str | None:
    """A thread's run ended (or stopped for good): its checkpoints, one per superstep as
    the thread's fold has them, go to ``saver`` in LangGraph's format for ``graph`` (the
    agent's compiled graph as LangChain builds it), as thread ``saved_as`` (None: the
    same id); ``expires_at``: when the thread expires (``EXPIRES_FIELD``), None: never.
    A run that went on from an earlier checkpoint without an input starts from that one
    (the fork LangGraph saves first included). The id of the newest checkpoint written;
    None when there was none."""
    made = await history.checkpoints(thread_id)
    run = sorted((c for c in made if c.run_id == run_id), key=lambda c: c.id)
    if not run:
        return None
    if await _failed(history, run_id) and not run[-1].next:
        run[-1] = _stopped_at(run[-1])
    by_id = {c.id: c for c in made}
    parent = by_id.get(run[0].parent_id or "")
    if run[0].source != "input" and parent is not None and parent.source == "fork":
        run.insert(0, parent)  # LangGraph's copy of the checkpoint it went on from
        parent = by_id.get(parent.parent_id or "")
    return await write_supersteps(
        saver,
        graph,
        saved_as or thread_id,
        run,
        parent=parent,
        metadata_of=_with_expiry(history.metadata, expires_at),
    )


def _with_expiry(metadata_of: Any, expires_at: float | None) -> Any:
    if expires_at is None:
        return metadata_of
    return lambda checkpoint: {**metadata_of(checkpoint), EXPIRES_FIELD: expires_at}


async def _failed(history: ThreadHistory, run_id: str) -> bool:
    reader = history.reader
    status: Any = await reader.redis.hget(reader.names.task_state(run_id), "status")
    return _text(status) == "failed"


async def _delete_thread(saver: Any, thread_id: str) -> None:
    try:
        await saver.adelete_thread(thread_id)
    except NotImplementedError:
        await asyncio.to_thread(saver.delete_thread, thread_id)


def _stopped_at(checkpoint: Checkpoint) -> Checkpoint:
    """The last checkpoint of a run that failed, with what LangGraph has next there (the
    node that failed): the fold leaves a failed superstep's ``next`` empty. The tools for
    the reply's unanswered calls, else the model (``create_agent``'s own routing)."""
    pending = next_after(MODEL, checkpoint.messages)
    return dataclasses.replace(checkpoint, next=pending or (MODEL,), tasks=())


async def write_update(
    saver: Any,
    graph: Any,
    history: ThreadHistory,
    thread_id: str,
    checkpoint: Checkpoint,
    expires_at: float | None = None,
) -> str | None:
    """An ``update_state`` loopline recorded (the fold's ``checkpoint``, source
    "update") written to ``saver`` as LangGraph's ``update_state`` writes it: a child of
    the checkpoint it was applied to, what runs next routed as the node it was written
    as; ``expires_at`` as ``write_run``'s. Its id."""
    made = await history.checkpoints(thread_id)
    parent = next((c for c in made if c.id == checkpoint.parent_id), None)
    metadata_of = _with_expiry(history.metadata, expires_at)
    return await write_supersteps(
        saver, graph, thread_id, [checkpoint], parent=parent, metadata_of=metadata_of
    )


async def written_by_loopline(history: ThreadHistory, thread_id: str, checkpoint_id: str) -> bool:
    """Whether loopline wrote the saver's checkpoint ``checkpoint_id`` of the thread:
    the thread's fold has it, or it was made by one of the thread's runs (a run's
    checkpoint ids end with the run's node, ``loopline.history.checkpoint_id``; the
    thread's log of runs outlives the runs' own logs)."""
    if any(c.id == checkpoint_id for c in await history.checkpoints(thread_id)):
        return True
    runs = await history.reader.run_ids(thread_id)
    return any(new_checkpoint_id(0.0, 0, run)[-12:] == checkpoint_id[-12:] for run in runs)


async def take_in(
    redis: aioredis.Redis,
    names: Names,
    key: str,
    saver: Any,
    thread_id: str,
    *,
    is_ours: Any = None,
) -> dict[str, Any] | None:
    """Before a run or a read: the working copy becomes the values of the saver's newest
    checkpoint of the thread (messages, todos, the other keys as middleware state) when
    someone else wrote that one (not taken in yet), or when Redis has no working copy
    (it expired: an in-process saver's). Left as it is while a run of the thread is
    active (a waiting one included: its state is loopline's). ``is_ours(checkpoint_id)``
    (awaitable): whether the thread's fold has that checkpoint, which loopline wrote. A
    thread that expired (``EXPIRES_FIELD`` in its newest checkpoint, which only
    loopline writes) is deleted from the saver instead: it is gone. The values taken in
    (the state's keys, LangGraph's private channels left out), None when nothing was."""
    found = await latest(saver, thread_id)
    if found is None:
        return None
    checkpoint_id = str(found.config["configurable"]["checkpoint_id"])
    state_key = names.thread_state(key)
    known: Any = await redis.hmget(state_key, SAVER_FIELD, "active", "created")
    taken, active, exists = (_text(v) for v in known)
    if active or (exists and taken == checkpoint_id):
        return None
    if exists and (found.metadata or {}).get("writer") == WRITER["writer"]:
        return None
    if exists and is_ours is not None and await is_ours(checkpoint_id):
        return None
    expires_at = (found.metadata or {}).get(EXPIRES_FIELD)
    if not exists and expires_at is not None and _past(float(expires_at)):
        await _delete_thread(saver, thread_id)  # Redis's copy expired with it
        return None
    values = dict(found.checkpoint.get("channel_values") or {})
    given = {k: v for k, v in values.items() if not k.startswith(("__", "branch:"))}
    messages = [from_langchain(m).model_dump_json() for m in values.pop("messages", [])]
    todos = values.pop("todos", None)
    extra = {k: v for k, v in values.items() if not k.startswith(("__", "branch:"))}
    async with redis.pipeline(transaction=True) as pipe:
        stage_transcript(pipe, names, key, messages)
        if todos is None:
            pipe.delete(names.thread_todos(key))
        else:
            pipe.set(names.thread_todos(key), json.dumps(todos))
        pipe.hset(
            state_key,
            mapping={"extra": json.dumps(extra, default=_json), SAVER_FIELD: checkpoint_id},
        )
        pipe.hsetnx(state_key, "active", "")
        pipe.hsetnx(state_key, "created", time.time())
        await pipe.execute()
    return given


CLOCK_SLACK_S = 1.0
"""How far the clocks of the process that ended a thread's run (its expiry is counted
from there) and of this one may differ."""


def _past(expires_at: float) -> bool:
    return expires_at <= time.time() + CLOCK_SLACK_S


def _json(value: Any) -> Any:
    """A state value the thread's JSON working copy holds: a pydantic model or a
    dataclass (a ``structured_response``) as its fields; anything else is refused."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    raise TypeError(f"a thread's state value of type {type(value).__name__} is not JSON")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")

"""The checkpointer given to ``create_agent`` as the record of its threads, in LangGraph's
own format: at the end of each run loopline writes the thread's state to it as a
LangGraph checkpoint (so LangGraph's ``create_agent`` on the same saver continues the
thread), and before a run it takes the saver's newest checkpoint into the thread's
working copy in Redis when the saver holds a state loopline did not write (a thread
LangGraph ran or continued).

One checkpoint per run, the final state (``values``; LangGraph writes one per
superstep), marked as loopline's in its metadata (``WRITER``): a newest checkpoint
without the mark is someone else's. The one taken in last is kept in the thread's state
hash (``saver_checkpoint``), so it is taken in once. Only taking in writes Redis from
the caller's process (a producer under ACLs reads threads only: a thread LangGraph ran
is refused there with Redis's NOPERM, never skipped).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Mapping
from typing import Any

import redis.asyncio as aioredis

from contracts.messages import from_langchain
from contracts.streams import Names
from services.tasks.threads import stage_transcript

EXPIRES_FIELD = "loopline_expires_at"
"""In the metadata of a checkpoint loopline writes for a deployment whose threads
expire (``thread_ttl_s``): when the thread expires (epoch seconds), unless a later run
renews it. A thread gone from Redis whose saver's newest checkpoint is loopline's and
past it is deleted from the saver too (``take_in``): what expires is gone from both."""
SAVER_FIELD = "saver_checkpoint"
"""The thread state's field: the id of the saver's checkpoint last taken in."""
WRITER = {"writer": "loopline"}
"""In the metadata of the checkpoints loopline writes."""


def is_saver(checkpointer: Any) -> bool:
    from langgraph.checkpoint.base import BaseCheckpointSaver

    return isinstance(checkpointer, BaseCheckpointSaver)


def saver_config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


async def latest(saver: Any, thread_id: str) -> Any:
    """The saver's newest checkpoint tuple of the thread (None: it has none); a saver
    with only sync methods (``PostgresSaver``) is asked on a worker thread."""
    config = saver_config(thread_id)
    try:
        return await saver.aget_tuple(config)
    except NotImplementedError:
        return await asyncio.to_thread(saver.get_tuple, config)


async def _put(saver: Any, config: Any, checkpoint: Any, metadata: Any, versions: Any) -> Any:
    try:
        return await saver.aput(config, checkpoint, metadata, versions)
    except NotImplementedError:
        return await asyncio.to_thread(saver.put, config, checkpoint, metadata, versions)


async def _delete_thread(saver: Any, thread_id: str) -> None:
    try:
        await saver.adelete_thread(thread_id)
    except NotImplementedError:
        await asyncio.to_thread(saver.delete_thread, thread_id)


async def write_final(
    saver: Any, thread_id: str, values: Mapping[str, Any], expires_at: float | None = None
) -> str:
    """Write ``values`` (``StateSnapshot.values``: LangChain messages and the state's
    keys) as the thread's newest checkpoint, a child of the saver's newest; its id.
    ``expires_at``: when the thread expires (``EXPIRES_FIELD``), None: never.

    The checkpoint is the one LangGraph leaves after a run: the previous channel versions
    and versions seen kept, the written channels' versions moved on, so LangGraph's
    agent, given a new input, starts from ``__start__`` on these values."""
    from langgraph.checkpoint.base import empty_checkpoint

    parent = await latest(saver, thread_id)
    fresh = empty_checkpoint()  # a new id and time
    checkpoint: dict[str, Any] = dict(fresh)
    step = 0
    config = saver_config(thread_id)
    if parent is not None:
        previous = parent.checkpoint
        checkpoint["channel_versions"] = dict(previous["channel_versions"])
        checkpoint["versions_seen"] = {k: dict(v) for k, v in previous["versions_seen"].items()}
        step = int((parent.metadata or {}).get("step", -1)) + 1
        config = parent.config
    versions = checkpoint["channel_versions"]
    new_versions = {}
    for channel in values:
        new_versions[channel] = saver.get_next_version(versions.get(channel), None)
    versions.update(new_versions)
    checkpoint["channel_values"] = dict(values)
    checkpoint["updated_channels"] = sorted(values)
    metadata: dict[str, Any] = {"source": "loop", "step": step, "parents": {}, **WRITER}
    if expires_at is not None:
        metadata[EXPIRES_FIELD] = expires_at
    stored = await _put(saver, config, checkpoint, metadata, new_versions)
    return str(stored["configurable"]["checkpoint_id"])


async def take_in(
    redis: aioredis.Redis, names: Names, key: str, saver: Any, thread_id: str
) -> dict[str, Any] | None:
    """Before a run or a read: the working copy becomes the values of the saver's newest
    checkpoint of the thread (messages, todos, the other keys as middleware state) when
    someone else wrote that one (not taken in yet), or when Redis has no working copy
    (it expired: an in-process saver's). Left as it is while a run of the thread is
    active (a waiting one included: its state is loopline's). A thread that expired
    (``EXPIRES_FIELD``) is deleted from the saver instead: it is gone. The values taken
    in (the state's keys, LangGraph's private channels left out), None when nothing
    was."""
    found = await latest(saver, thread_id)
    if found is None:
        return None
    checkpoint_id = str(found.config["configurable"]["checkpoint_id"])
    state_key = names.thread_state(key)
    known: Any = await redis.hmget(state_key, SAVER_FIELD, "active", "created")
    taken, active, exists = (_text(v) for v in known)
    ours = (found.metadata or {}).get("writer") == WRITER["writer"]
    if active or (exists and (ours or taken == checkpoint_id)):
        return None
    expires_at = (found.metadata or {}).get(EXPIRES_FIELD)
    if ours and not exists and expires_at is not None and _past(float(expires_at)):
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

"""``/threads``: create one, read it (status, values, interrupts), search and count them
(metadata, values, ids, status), update its metadata, copy it, prune and remove them; its
state as LangGraph's ``ThreadState`` (values, next, tasks, checkpoint, interrupts), now or
at a checkpoint, state updates, and its history. The thread's values come from the thread
model (``loopline.threads``)."""

from __future__ import annotations

import contextlib
import datetime
import time
import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from loopline.agent import updated_values
from loopline.api.crons import CronStore
from loopline.api.gateway import body_of, tenant_of
from loopline.api.params import (
    HistoryBody,
    NoParams,
    StateAtCheckpoint,
    StateQuery,
    StateUpdate,
    ThreadCount,
    ThreadCreate,
    ThreadPatch,
    ThreadPrune,
    ThreadSearch,
    parse,
)
from loopline.api.records import ThreadRecord
from loopline.api.runs import state_values, thread_ids, was_stopped
from loopline.api.tenant import NotFound, Tenant
from loopline.api.wire import BadRequest, interrupt_json, iso, jsonable
from loopline.conversation import snapshot, waiting_interrupts
from loopline.history import copy_thread
from loopline.threads import ThreadValues
from services.hooks import hooks_for


async def create(request: Request) -> Response:
    tenant = await tenant_of(request)
    body = parse(ThreadCreate, await body_of(request))
    thread_id = body.thread_id or str(uuid.uuid4())
    existing = await tenant.records.thread(thread_id)
    if existing is not None or await tenant.threads.info(thread_id) is not None:
        if body.if_exists == "do_nothing":
            return JSONResponse(await thread_json(tenant, thread_id))
        return JSONResponse({"detail": f"Thread {thread_id} already exists"}, status_code=409)
    record = ThreadRecord(thread_id=thread_id, metadata=dict(body.metadata))
    await tenant.records.save_thread(record)
    return JSONResponse(await thread_json(tenant, thread_id))


async def get(request: Request) -> Response:
    parse(NoParams, request.query_params)
    tenant = await tenant_of(request)
    return JSONResponse(await thread_json(tenant, request.path_params["thread_id"]))


async def delete(request: Request) -> Response:
    parse(NoParams, request.query_params)
    tenant = await tenant_of(request)
    thread_id = request.path_params["thread_id"]
    try:
        removed = await _remove(tenant, thread_id)
    except ValueError as exc:  # a run is active
        return JSONResponse({"detail": str(exc)}, status_code=409)
    if not removed:
        raise NotFound(f"Thread {thread_id} not found")
    await CronStore(tenant.redis, tenant.names).delete_for_thread(thread_id)  # as LangGraph's
    return Response(status_code=204)


async def _remove(tenant: Tenant, thread_id: str) -> bool:
    """Remove a thread's values and the gateway's record of it; whether it existed
    (``ValueError`` for a thread with an active run)."""
    removed = await tenant.threads.remove(thread_id)
    return await tenant.records.delete_thread(thread_id) or removed


async def search(request: Request) -> Response:
    """``POST /threads/search``: the threads that match, sorted (by ``updated_at``,
    newest first, unless ``sort_by``), a page of them, ``select``'s fields."""
    tenant = await tenant_of(request)
    wanted = parse(ThreadSearch, await body_of(request))
    found = await _matching(tenant, wanted, wanted.ids)
    key = wanted.sort_by or "updated_at"
    found.sort(key=lambda t: t[key], reverse=(wanted.sort_order or "desc") == "desc")
    page = found[wanted.offset : wanted.offset + wanted.limit]
    if wanted.select:
        page = [{k: t[k] for k in wanted.select if k in t} for t in page]
    return JSONResponse(page)


async def count(request: Request) -> Response:
    """``POST /threads/count``: how many match (the filters of ``search``)."""
    tenant = await tenant_of(request)
    wanted = parse(ThreadCount, await body_of(request))
    return JSONResponse(len(await _matching(tenant, wanted, None)))


async def _matching(
    tenant: Tenant, wanted: ThreadCount, ids: list[str] | None
) -> list[dict[str, Any]]:
    """Every thread of the tenant (those the gateway created and those a client of the
    bus ran) that ``wanted`` matches, as ``thread_json`` shows it."""
    if ids is None:
        ids = await thread_ids(tenant)
    found = []
    for thread_id in ids:
        try:
            shown = await thread_json(tenant, thread_id)
        except NotFound:  # expired (``thread_ttl_s``) or deleted since it was listed
            await tenant.records.delete_thread(thread_id)  # out of the index too
            continue
        if wanted.status not in (None, shown["status"]):
            continue
        if not contains(shown["metadata"], wanted.metadata):
            continue
        if wanted.values and not contains(shown["values"] or {}, wanted.values):
            continue
        found.append(shown)
    return found


def contains(have: Any, want: Any) -> bool:
    """JSON containment, as PostgreSQL's ``@>`` and LangGraph's server filter: every key
    of a wanted object in the value with a contained value; every wanted list item
    contained in some item of the value's list; anything else equal."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(
            k in have and contains(have[k], v) for k, v in want.items()
        )
    if isinstance(want, list):
        return isinstance(have, list) and all(any(contains(h, w) for h in have) for w in want)
    return bool(have == want)


async def update(request: Request) -> Response:
    """``PATCH /threads/{id}``: its metadata merged with the body's."""
    tenant = await tenant_of(request)
    patch = parse(ThreadPatch, await body_of(request))
    thread_id = request.path_params["thread_id"]
    shown = await thread_json(tenant, thread_id)  # 404 for a thread that does not exist
    record = await tenant.records.thread(thread_id) or ThreadRecord(
        thread_id=thread_id, created_at=_epoch(shown["created_at"])
    )
    record.metadata = {**record.metadata, **patch.metadata}
    record.updated_at = time.time()
    await tenant.records.save_thread(record)
    return JSONResponse(await thread_json(tenant, thread_id))


async def copy(request: Request) -> Response:
    """``POST /threads/{id}/copy``: a new thread with the same metadata, values and every
    checkpoint (``loopline.history.copy_thread``; 409 for a thread that does not exist,
    as LangGraph's server answers, and for one with a run going)."""
    parse(NoParams, request.query_params)
    tenant = await tenant_of(request)
    source = request.path_params["thread_id"]
    try:
        shown = await thread_json(tenant, source)
    except NotFound as exc:
        return JSONResponse({"detail": str(exc)}, status_code=409)
    thread_id = str(uuid.uuid4())
    if await tenant.threads.info(source) is not None:  # no run yet: nothing on the bus
        try:
            await copy_thread(tenant.threads, source, thread_id)
        except ValueError as exc:  # a run going
            return JSONResponse({"detail": str(exc)}, status_code=409)
    await tenant.records.save_thread(ThreadRecord(thread_id, metadata=shown["metadata"]))
    return JSONResponse(await thread_json(tenant, thread_id))


async def prune(request: Request) -> Response:
    """``POST /threads/prune``: remove the threads named (those that exist and have no
    active run); how many were."""
    tenant = await tenant_of(request)
    body = parse(ThreadPrune, await body_of(request))
    if body.strategy == "keep_latest":
        raise BadRequest("strategy: 'keep_latest' is not supported (supported: 'delete')")
    pruned = 0
    for thread_id in body.thread_ids:
        with contextlib.suppress(ValueError):  # a run is active: left alone
            pruned += await _remove(tenant, thread_id)
    return JSONResponse({"pruned_count": pruned})


def _epoch(shown: str) -> float:
    return datetime.datetime.fromisoformat(shown).timestamp()


async def thread_json(tenant: Tenant, thread_id: str) -> dict[str, Any]:
    record = await tenant.records.thread(thread_id)
    info = await tenant.threads.info(thread_id)
    if record is None and info is None:
        raise NotFound(f"Thread {thread_id} not found")
    created = record.created_at if record else (info.created if info else 0.0)
    state = await tenant.threads.current(thread_id) if info else None
    waits = await waiting_interrupts(tenant.client, state) if state else []
    interrupts = [w.interrupt for w in waits]
    values = await state_values(tenant, state) if state and state.run_id else None
    state_updated = info.updated if info and info.updated else created
    updated = max(state_updated, record.updated_at if record else 0.0)
    return {
        "thread_id": thread_id,
        "created_at": iso(created),
        "updated_at": iso(updated),
        "state_updated_at": iso(state_updated),
        "metadata": record.metadata if record else {},
        "status": await _status(tenant, state, bool(interrupts)),
        "config": {},
        "values": values,
        "error": None,
        "interrupts": (
            {f"{state.run_id}:{state.step}": [interrupt_json(i) for i in interrupts]}
            if state and interrupts
            else {}
        ),
    }


async def _status(tenant: Tenant, state: ThreadValues | None, interrupted: bool) -> str:
    """idle, busy, interrupted (a human is asked) or error (the last run failed; one
    cancelled or stopped by a newer run leaves the thread idle, as LangGraph's)."""
    if state is None or not state.run_id:
        return "idle"
    if interrupted:
        return "interrupted"
    if state.status == "running":
        return "busy"
    if state.status != "failed":
        return "idle"
    return "idle" if await was_stopped(tenant, state.run_id) else "error"


async def state_json(
    tenant: Tenant, thread_id: str, state: ThreadValues, *, parent_run: str = ""
) -> dict[str, Any]:
    """A ``ThreadState``: loopline's ``StateSnapshot`` of the thread, as JSON (the run's
    id stands for LangGraph's checkpoint id)."""
    spec = await tenant.spec_of_task(state.run_id) if state.run_id else None
    if spec is None:
        return _empty_state(thread_id)
    waits = await waiting_interrupts(tenant.client, state)
    snap = snapshot(spec, state, waits, parent_run=parent_run)
    checkpoint = dict(snap.config["configurable"])
    parent = dict(snap.parent_config["configurable"]) if snap.parent_config else None
    return {
        "values": await state_values(tenant, state),
        "next": list(snap.next),
        "tasks": [
            {
                "id": task.id,
                "name": task.name,
                "path": list(task.path),
                "error": None,
                "interrupts": [interrupt_json(i) for i in task.interrupts],
                "checkpoint": None,
                "state": None,
                "result": None if task.result is None else jsonable(task.result),
            }
            for task in snap.tasks
        ],
        "metadata": jsonable(snap.metadata),
        "created_at": snap.created_at,
        "checkpoint": checkpoint,
        "parent_checkpoint": parent,
        "interrupts": [interrupt_json(i) for i in snap.interrupts],
        "checkpoint_id": checkpoint.get("checkpoint_id"),
        "parent_checkpoint_id": parent.get("checkpoint_id") if parent else None,
    }


def _empty_state(thread_id: str) -> dict[str, Any]:
    """A thread with no run yet, as LangGraph shows a thread without checkpoints."""
    checkpoint = {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": None}
    return {
        "values": {},
        "next": [],
        "tasks": [],
        "metadata": {},
        "created_at": None,
        "checkpoint": checkpoint,
        "parent_checkpoint": None,
        "interrupts": [],
        "checkpoint_id": None,
        "parent_checkpoint_id": None,
    }


async def state(request: Request) -> Response:
    parse(StateQuery, request.query_params)
    tenant = await tenant_of(request)
    thread_id = request.path_params["thread_id"]
    await thread_json(tenant, thread_id)  # 404 for a thread that does not exist
    current = await tenant.threads.current(thread_id)
    runs = await tenant.threads.run_ids(thread_id)
    parent = runs[runs.index(current.run_id) - 1] if current.run_id in runs[1:] else ""
    return JSONResponse(await state_json(tenant, thread_id, current, parent_run=parent))


async def state_at(request: Request) -> Response:
    """``GET /threads/{id}/state/{checkpoint_id}`` and ``POST .../state/checkpoint``: the
    state at a checkpoint (in loopline, a run's id names the state the run left)."""
    tenant = await tenant_of(request)
    thread_id = request.path_params["thread_id"]
    if request.method == "POST":
        body = parse(StateAtCheckpoint, await body_of(request))
        checkpoint_id = str(body.checkpoint.get("checkpoint_id") or "")
    else:
        parse(StateQuery, request.query_params)
        checkpoint_id = request.path_params["checkpoint_id"]
    await thread_json(tenant, thread_id)  # 404 for a thread that does not exist
    runs = await tenant.threads.run_ids(thread_id)
    if checkpoint_id not in runs:
        raise NotFound(f"Checkpoint {checkpoint_id} not found on thread {thread_id}")
    at = await tenant.threads.of_run(thread_id, checkpoint_id)
    parent = runs[runs.index(checkpoint_id) - 1] if runs.index(checkpoint_id) else ""
    return JSONResponse(await state_json(tenant, thread_id, at, parent_run=parent))


async def update_state(request: Request) -> Response:
    """``POST /threads/{id}/state``: LangGraph's ``update_state`` on a thread between
    runs (409 while a run goes or waits); the values go through the reducers of the
    agent that last ran on it. The answer names the thread's state (the run it came
    from: loopline makes no checkpoint of its own for an update)."""
    tenant = await tenant_of(request)
    body = parse(StateUpdate, await body_of(request))
    thread_id = request.path_params["thread_id"]
    await thread_json(tenant, thread_id)
    current = await tenant.threads.current(thread_id)
    spec = await tenant.spec_of_task(current.run_id) if current.run_id else None
    if spec is None:
        raise BadRequest(f"thread {thread_id} has not run: no agent's state to update yet")
    channels = hooks_for(spec.agent_id, spec).channels
    messages, todos, extra = updated_values(current, body.values or {}, channels)
    try:
        await tenant.threads.replace(thread_id, messages, todos, channels.codec.dumps(extra))
    except ValueError as exc:  # a run goes or waits for a human
        return JSONResponse({"detail": str(exc)}, status_code=409)
    checkpoint = {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": current.run_id}
    return JSONResponse(
        {"checkpoint": checkpoint, "configurable": checkpoint, "checkpoint_id": current.run_id}
    )


async def history(request: Request) -> Response:
    tenant = await tenant_of(request)
    thread_id = request.path_params["thread_id"]
    body = parse(HistoryBody, await body_of(request))
    await thread_json(tenant, thread_id)
    states = await tenant.threads.history(thread_id)
    before = ((body.before or {}).get("configurable") or {}).get("checkpoint_id")
    if before:
        ids = [s.run_id for s in states]
        states = states[ids.index(before) + 1 :] if before in ids else []
    out: list[dict[str, Any]] = []
    for i, past in enumerate(states):
        if len(out) >= body.limit:
            break
        parent = states[i + 1].run_id if i + 1 < len(states) else ""
        shown = await state_json(tenant, thread_id, past, parent_run=parent)
        if contains(shown["metadata"], body.metadata):
            out.append(shown)
    return JSONResponse(out)

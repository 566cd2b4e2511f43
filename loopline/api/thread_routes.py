"""``/threads``: create one, read it (status, values, interrupts), search and count them
(metadata, values, ids, status), update its metadata, copy it, prune and remove them; its
state as LangGraph's ``ThreadState`` (values, next, tasks, checkpoint, interrupts), now or
at a checkpoint, state updates, and its history of checkpoints, one per superstep. The
thread's values and checkpoints come from the thread model (``loopline.threads``,
``loopline.history``): the routes only read requests and write answers."""

from __future__ import annotations

import contextlib
import datetime
import time
import uuid
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from contracts.agent import AgentSpec
from contracts.events import TaskFailed
from loopline.api import delayed_runs
from loopline.api.crons import CronStore
from loopline.api.gateway import body_of, tenant_of
from loopline.api.graph import graph_json
from loopline.api.params import (
    HistoryBody,
    NoParams,
    StateAtCheckpoint,
    StateQuery,
    StateUpdate,
    Superstep,
    ThreadCount,
    ThreadCreate,
    ThreadPatch,
    ThreadPrune,
    ThreadSearch,
    ThreadTTL,
    parse,
)
from loopline.api.records import ThreadRecord
from loopline.api.run_errors import run_error
from loopline.api.runs import state_values, thread_ids, was_stopped
from loopline.api.tenant import NotFound, Tenant
from loopline.api.thread_sweep import remove_thread, remove_thread_and_runs, set_thread_ttl
from loopline.api.wire import BadRequest, interrupt_json, iso, jsonable
from loopline.conversation import waiting_interrupts
from loopline.history import ThreadHistory, copy_thread, current_snapshot, update_thread
from loopline.threads import ThreadValues

if TYPE_CHECKING:
    from langgraph.types import StateSnapshot


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
    await set_thread_ttl(tenant, thread_id, _minutes(body.ttl), created=True)
    if body.supersteps:
        problem = await _apply_supersteps(tenant, thread_id, body.supersteps)
        if problem is not None:  # as LangGraph's server: made, and says what went wrong
            made = f"Thread {thread_id} was created, but there were problems updating the state"
            return JSONResponse({"detail": f"{made}: {problem}"}, status_code=201)
    return JSONResponse(await thread_json(tenant, thread_id))


async def _apply_supersteps(
    tenant: Tenant, thread_id: str, supersteps: list[Superstep]
) -> str | None:
    """The new thread's state updates, each from the checkpoint the one before made;
    what stopped them, or None."""
    history = await thread_history(tenant, thread_id)
    if history.spec is None:
        return (
            f"Thread '{thread_id}' has no assigned graph ID: set metadata.graph_id to the "
            "agent whose state the updates write"
        )
    for step in supersteps:
        (update,) = step.updates
        try:
            await update_thread(history, thread_id, update.values or {}, update.as_node, None)
        except (ValueError, NotImplementedError) as exc:
            return str(exc)
    return None


def _minutes(ttl: ThreadTTL | None) -> float | None:
    return ttl.ttl if ttl is not None else None


async def get(request: Request) -> Response:
    parse(NoParams, request.query_params)
    tenant = await tenant_of(request)
    return JSONResponse(await thread_json(tenant, request.path_params["thread_id"]))


async def delete(request: Request) -> Response:
    parse(NoParams, request.query_params)
    tenant = await tenant_of(request)
    thread_id = request.path_params["thread_id"]
    try:
        removed = await remove_thread_and_runs(tenant, thread_id)
    except ValueError as exc:  # its run did not stop
        return JSONResponse({"detail": str(exc)}, status_code=409)
    if not removed:
        raise NotFound(f"Thread {thread_id} not found")
    await CronStore(tenant.redis, tenant.names).delete_for_thread(thread_id)  # as LangGraph's
    return Response(status_code=204)


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
    """``PATCH /threads/{id}``: its metadata merged with the body's; a ``ttl`` counts
    from now."""
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
    await set_thread_ttl(tenant, thread_id, _minutes(patch.ttl), created=False)
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
            pruned += await remove_thread(tenant, thread_id)
    return JSONResponse({"pruned_count": pruned})


def _epoch(shown: str) -> float:
    return datetime.datetime.fromisoformat(shown).timestamp()


async def thread_json(tenant: Tenant, thread_id: str) -> dict[str, Any]:
    await tenant.restore_thread(thread_id)  # its working copy back from its record
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
    delayed = await delayed_runs.waiting_on(tenant, thread_id)
    status = "busy" if delayed else await _status(tenant, state, bool(interrupts))
    return {
        "thread_id": thread_id,
        "created_at": iso(created),
        "updated_at": iso(updated),
        "state_updated_at": iso(state_updated),
        "metadata": record.metadata if record else {},
        "status": status,
        "config": {},
        "values": values,
        "error": await _last_error(tenant, state) if status == "error" else None,
        "interrupts": (
            {f"{state.run_id}:{state.step}": [interrupt_json(i) for i in interrupts]}
            if state and interrupts
            else {}
        ),
    }


async def _last_error(tenant: Tenant, state: ThreadValues | None) -> dict[str, str] | None:
    """The error of the thread's last run, which failed (LangGraph's thread shows it)."""
    if state is None or not state.run_id:
        return None
    failed = None
    async for _, event in tenant.client.events(state.run_id, follow=False):
        failed = event if isinstance(event, TaskFailed) else failed
    return run_error(failed) if failed is not None else None


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


async def thread_history(tenant: Tenant, thread_id: str) -> ThreadHistory:
    """The thread model's reading of the thread, for the agent of its last run (None
    before any run: no state keys but the messages). 404 for a thread that does not
    exist."""
    shown = await thread_json(tenant, thread_id)
    current = await tenant.threads.current(thread_id)
    spec = await tenant.spec_of_task(current.run_id) if current.run_id else None
    if spec is None and (graph_id := shown["metadata"].get("graph_id")):
        with contextlib.suppress(NotFound, BadRequest):  # its agent, named before it ran
            spec = (await tenant.deployed_agent(str(graph_id))).spec
    return ThreadHistory(tenant.threads, spec)


def snapshot_json(snap: StateSnapshot) -> dict[str, Any]:
    """A ``StateSnapshot`` as LangGraph's server shows a ``ThreadState``."""
    checkpoint = dict(snap.config["configurable"]) if snap.config else None
    parent = dict(snap.parent_config["configurable"]) if snap.parent_config else None
    return {
        "values": jsonable(snap.values),
        "next": list(snap.next),
        "tasks": [
            {
                "id": task.id,
                "name": task.name,
                "path": jsonable(task.path),
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
        "checkpoint_id": checkpoint.get("checkpoint_id") if checkpoint else None,
        "parent_checkpoint_id": parent.get("checkpoint_id") if parent else None,
    }


EMPTY_STATE: dict[str, Any] = {
    "values": {},
    "next": [],
    "tasks": [],
    "metadata": None,
    "created_at": None,
    "checkpoint": None,
    "parent_checkpoint": None,
    "interrupts": [],
    "checkpoint_id": None,
    "parent_checkpoint_id": None,
}
"""A thread with no checkpoint yet, as LangGraph's server shows it."""


async def state(request: Request) -> Response:
    """``GET /threads/{id}/state``: the thread as it stands, with its newest checkpoint
    (``loopline.history.current_snapshot``)."""
    parse(StateQuery, request.query_params)
    tenant = await tenant_of(request)
    thread_id = request.path_params["thread_id"]
    history = await thread_history(tenant, thread_id)
    if history.spec is None:
        return JSONResponse(EMPTY_STATE)
    return JSONResponse(snapshot_json(await current_snapshot(tenant.client, history, thread_id)))


async def state_at(request: Request) -> Response:
    """``GET /threads/{id}/state/{checkpoint_id}`` and ``POST .../state/checkpoint``: the
    state at a checkpoint (an id the thread does not have: an empty state, as LangGraph
    answers it)."""
    tenant = await tenant_of(request)
    thread_id = request.path_params["thread_id"]
    if request.method == "POST":
        body = parse(StateAtCheckpoint, await body_of(request))
        checkpoint_id = str(body.checkpoint.get("checkpoint_id") or "")
    else:
        parse(StateQuery, request.query_params)
        checkpoint_id = request.path_params["checkpoint_id"]
    history = await thread_history(tenant, thread_id)
    return JSONResponse(snapshot_json(await history.snapshot_at(thread_id, checkpoint_id)))


async def update_state(request: Request) -> Response:
    """``POST /threads/{id}/state``: LangGraph's ``update_state`` on a thread between
    runs (``loopline.history.update_thread``; 409 while a run goes or waits); the answer
    names the new checkpoint."""
    tenant = await tenant_of(request)
    body = parse(StateUpdate, await body_of(request))
    thread_id = request.path_params["thread_id"]
    history = await thread_history(tenant, thread_id)
    if history.spec is None:  # LangGraph's server: the thread has no graph yet
        detail = f"thread {thread_id} has not run: no agent's state to update yet"
        return JSONResponse({"detail": detail}, status_code=400)
    if body.as_node is not None and body.as_node not in _nodes(history.spec):
        return JSONResponse({"detail": f"Node {body.as_node} does not exist"}, status_code=400)
    at = (body.checkpoint or {}).get("checkpoint_id") or body.checkpoint_id
    try:
        made = await update_thread(history, thread_id, body.values or {}, body.as_node, at)
    except NotImplementedError as exc:  # as_node naming a middleware's hook
        raise BadRequest(str(exc)) from exc
    except ValueError as exc:  # a run goes or waits for a human
        return JSONResponse({"detail": str(exc)}, status_code=409)
    checkpoint = made.config(thread_id)["configurable"]
    return JSONResponse(
        {"checkpoint": checkpoint, "configurable": checkpoint, "checkpoint_id": made.id}
    )


def _nodes(spec: AgentSpec) -> set[str]:
    return {str(node["id"]) for node in graph_json(spec)["nodes"]}


async def history(request: Request) -> Response:
    """``POST /threads/{id}/history``: its checkpoints newest first
    (``loopline.history``'s ``snapshots``)."""
    tenant = await tenant_of(request)
    thread_id = request.path_params["thread_id"]
    body = parse(HistoryBody, await body_of(request))
    past = await thread_history(tenant, thread_id)
    before = ((body.before or {}).get("configurable") or {}).get("checkpoint_id")
    at = (body.checkpoint or {}).get("checkpoint_id")
    snaps = await past.snapshots(
        thread_id, filter=body.metadata, before=before, limit=body.limit, at=at
    )
    return JSONResponse([snapshot_json(snap) for snap in snaps])

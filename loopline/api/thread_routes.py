"""``/threads``: create one, read it (status, values, interrupts), its state as
LangGraph's ``ThreadState`` (values, next, tasks, checkpoint, interrupts), and its
history (one state per run, newest first), and remove it."""

from __future__ import annotations

import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from loopline.api.crons import CronStore
from loopline.api.gateway import body_of, tenant_of
from loopline.api.params import HistoryBody, NoParams, StateQuery, ThreadCreate, parse
from loopline.api.records import ThreadRecord
from loopline.api.runs import state_values, was_stopped
from loopline.api.tenant import NotFound, Tenant
from loopline.api.wire import interrupt_json, iso, jsonable
from loopline.conversation import snapshot, waiting_interrupts
from loopline.threads import ThreadValues


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
        removed = await tenant.threads.remove(thread_id)
    except ValueError as exc:  # a run is active
        return JSONResponse({"detail": str(exc)}, status_code=409)
    if not (await tenant.records.delete_thread(thread_id) or removed):
        raise NotFound(f"Thread {thread_id} not found")
    await CronStore(tenant.redis, tenant.names).delete_for_thread(thread_id)  # as LangGraph's
    return Response(status_code=204)


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
    updated = iso(info.updated if info and info.updated else created)
    return {
        "thread_id": thread_id,
        "created_at": iso(created),
        "updated_at": updated,
        "state_updated_at": updated,
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
    out = []
    for i, past in enumerate(states[: body.limit]):
        parent = states[i + 1].run_id if i + 1 < len(states) else ""
        out.append(await state_json(tenant, thread_id, past, parent_run=parent))
    return JSONResponse(out)

"""``/threads/{id}/runs...`` and the stateless ``/runs``, ``/runs/batch``,
``/runs/stream`` and ``/runs/wait``: start a run (in the background, streaming, or
waiting for its end), read it, join it, follow its stream (``Last-Event-ID`` resumes it),
cancel it."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from loopline.api.events import Cursor
from loopline.api.gateway import body_of, gateway_of, tenant_of, unless_stopping
from loopline.api.params import CancelManyBody, CancelQuery, JoinQuery, NoParams, RunsQuery, parse
from loopline.api.records import RunRecord
from loopline.api.runs import (
    Busy,
    RunRequest,
    cancel_run,
    run_agent,
    run_record,
    run_status,
    start_run,
    thread_exists,
    thread_ids,
    wait_for,
)
from loopline.api.sse import run_frames, with_heartbeats
from loopline.api.tenant import NotFound, Tenant
from loopline.api.wire import BadRequest, iso

SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


def _path(record: RunRecord) -> str:
    """Where the run lives (``Content-Location``; the SDK reads the run id from it)."""
    thread_id = record.thread_id or record.temporary_thread
    if thread_id:
        return f"/threads/{thread_id}/runs/{record.run_id}"
    return f"/runs/{record.run_id}"


MANY_RUNS = 1000
"""The most runs of a thread one ``POST /runs/cancel`` by status looks at."""

RUN_FIELDS = (
    "run_id",
    "thread_id",
    "assistant_id",
    "created_at",
    "updated_at",
    "status",
    "metadata",
    "kwargs",
    "multitask_strategy",
    "langsmith_session_name",
)
"""A run's fields, as ``run_json`` shows them (what ``runs.list(select=)`` may name)."""


async def run_json(tenant: Tenant, record: RunRecord) -> dict[str, Any]:
    status = await run_status(tenant, record)
    return {
        "run_id": record.run_id,
        "thread_id": record.thread_id or record.temporary_thread or None,
        "assistant_id": record.assistant_id,
        "created_at": iso(record.created_at),
        "updated_at": iso(record.created_at),
        "status": status,
        "metadata": record.metadata,
        "kwargs": record.kwargs,
        "multitask_strategy": record.multitask_strategy,
        "langsmith_session_name": None,  # loopline traces no run to LangSmith itself
    }


async def _started(request: Request) -> tuple[Tenant, RunRecord, RunRequest]:
    tenant = await tenant_of(request)
    parse(NoParams, request.query_params)
    run = RunRequest.parse(await body_of(request))
    record = await start_run(tenant, request.path_params.get("thread_id"), run)
    return tenant, record, run


async def create(request: Request) -> Response:
    """``POST /threads/{id}/runs`` and ``POST /runs``: a background run."""
    tenant, record, _ = await _started(request)
    return JSONResponse(await run_json(tenant, record), headers={"Content-Location": _path(record)})


async def batch(request: Request) -> Response:
    """``POST /runs/batch``: stateless background runs, every body read (and its
    assistant found) before any starts, so a bad one starts none."""
    parse(NoParams, request.query_params)
    tenant = await tenant_of(request)
    bodies = json.loads(await request.body() or b"null")
    if not isinstance(bodies, list) or not bodies:
        raise BadRequest("the body must be a non-empty list of runs")
    runs = [RunRequest.parse(body) for body in bodies]
    for run in runs:
        await run_agent(tenant, run)  # 422 for an assistant that does not exist
    records = [await start_run(tenant, None, run) for run in runs]
    return JSONResponse([await run_json(tenant, record) for record in records])


async def stream(request: Request) -> Response:
    """``POST .../runs/stream``: start a run and stream it."""
    tenant, record, run = await _started(request)
    return _sse(request, tenant, record, run.stream_mode, None)


async def wait(request: Request) -> Response:
    """``POST .../runs/wait``: start a run and answer with its final values."""
    tenant, record, _ = await _started(request)
    values = await unless_stopping(gateway_of(request), wait_for(tenant, record))
    headers = {"Content-Location": _path(record), "Location": f"{_path(record)}/join"}
    return JSONResponse(values, headers=headers)


async def get(request: Request) -> Response:
    parse(NoParams, request.query_params)
    tenant, record = await _record(request)
    return JSONResponse(await run_json(tenant, record))


async def listing(request: Request) -> Response:
    """``GET /threads/{id}/runs``: the runs the gateway started on the thread, newest
    first (``limit``, ``offset``, ``status``; ``select`` keeps those fields of each); runs
    rolled back are gone."""
    tenant = await tenant_of(request)
    query = parse(RunsQuery, request.query_params)
    unknown = sorted(set(query.select or ()) - set(RUN_FIELDS))
    if unknown:
        raise BadRequest(f"select: {unknown} are not run fields (fields: {', '.join(RUN_FIELDS)})")
    thread_id = request.path_params["thread_id"]
    if not await thread_exists(tenant, thread_id):
        raise NotFound(f"Thread {thread_id} not found")
    found = []
    for record in await _thread_runs(tenant, thread_id, query.offset, query.limit):
        try:
            shown = await run_json(tenant, record)
        except NotFound:
            continue
        if query.status in (None, shown["status"]):
            found.append({k: shown[k] for k in query.select} if query.select else shown)
    return JSONResponse(found)


async def _thread_runs(
    tenant: Tenant, thread_id: str, offset: int = 0, limit: int = MANY_RUNS
) -> list[RunRecord]:
    found = []
    for run_id in await tenant.records.run_ids(thread_id, offset, limit):
        record = await tenant.records.run(run_id)
        if record is not None:
            found.append(record)
    return found


async def join(request: Request) -> Response:
    """``GET .../runs/{run_id}/join``: wait for the run; its final values."""
    parse(JoinQuery, request.query_params)
    tenant, record = await _record(request)
    await run_status(tenant, record)  # 404 for a run rolled back
    values = await unless_stopping(gateway_of(request), wait_for(tenant, record))
    return JSONResponse(values, headers={"Content-Location": _path(record)})


async def join_stream(request: Request) -> Response:
    """``GET .../runs/{run_id}/stream``: the run's stream from its start, or after the
    ``Last-Event-ID`` a reconnecting client sends."""
    query = parse(JoinQuery, request.query_params)
    tenant, record = await _record(request)
    await run_status(tenant, record)
    modes: list[str] = [*query.stream_mode] or record.stream_mode
    return _sse(request, tenant, record, modes, request.headers.get("last-event-id") or None)


async def cancel(request: Request) -> Response:
    """``POST .../runs/{run_id}/cancel``: ``action=interrupt`` keeps what the run did,
    ``rollback`` undoes it and forgets the run; with ``wait``, once it stopped (the run,
    or for a rollback nothing, as LangGraph's server answers ``{}``)."""
    query = parse(CancelQuery, request.query_params)
    tenant, record = await _record(request)
    rollback = query.action == "rollback"
    if rollback and await run_status(tenant, record) not in ("pending", "running"):
        raise NotFound(NOTHING_TO_CANCEL)  # an ended run is kept, as on LangGraph's server
    await cancel_run(tenant, record, rollback=rollback)
    if query.wait:
        await unless_stopping(gateway_of(request), wait_for(tenant, record))
        return JSONResponse({} if rollback else await run_json(tenant, record))
    return Response(status_code=202)


async def delete(request: Request) -> Response:
    """``DELETE /threads/{id}/runs/{run_id}``: forget a run that has ended (409 for one
    still pending or running: cancel it first). The thread's state keeps what the run
    wrote; LangGraph's in-memory server also drops the run's checkpoints."""
    parse(NoParams, request.query_params)
    tenant, record = await _record(request)
    if await run_status(tenant, record) in ("pending", "running"):
        raise Busy(f"Run {record.run_id} is {await run_status(tenant, record)}: cancel it first")
    await tenant.records.delete_run(record)
    return Response(status_code=204)


async def cancel_many(request: Request) -> Response:
    """``POST /runs/cancel``: the runs ``run_ids`` of ``thread_id``, or every thread's
    runs in ``status`` (``pending``, ``running``, ``all``: both), as LangGraph's server
    takes them. Runs that are not pending or running are left alone; 404 when none was.
    A stateless run (of no thread) is cancelled by its id only."""
    query = parse(CancelQuery, request.query_params)
    body = parse(CancelManyBody, await body_of(request))
    if body.status is not None and (body.thread_id or body.run_ids is not None):
        raise BadRequest(STATUS_ALONE)
    if body.status is None and (not body.thread_id or body.run_ids is None):
        raise BadRequest("give thread_id with run_ids, or status alone")
    tenant = await tenant_of(request)
    if body.thread_id and body.run_ids is not None:
        records = [await run_record(tenant, body.thread_id, r) for r in body.run_ids]
    else:
        records = [r for t in await thread_ids(tenant) for r in await _thread_runs(tenant, t)]
    wanted = ("pending", "running") if body.status in (None, "all") else (body.status,)
    cancelled = 0
    for record in records:
        try:
            status = await run_status(tenant, record)
        except NotFound:
            continue
        if status in wanted:
            await cancel_run(tenant, record, rollback=query.action == "rollback")
            cancelled += 1
    if not cancelled:
        raise NotFound("No runs found to cancel.")
    return Response(status_code=204)


NOTHING_TO_CANCEL = (
    "No matching runs to cancel. Please verify the thread ID and run IDs are correct, and "
    "the runs haven't been deleted or completed."
)
"""LangGraph's server's words for cancelling a run that has ended (404)."""

STATUS_ALONE = (
    "When providing a 'status', 'thread_id' and 'run_ids' must be omitted. The 'status' "
    "parameter cancels all runs with the given status, regardless of thread or run ID."
)
"""LangGraph's server's words for a ``status`` given with a thread or runs."""


async def _record(request: Request) -> tuple[Tenant, RunRecord]:
    tenant = await tenant_of(request)
    record = await run_record(
        tenant, request.path_params.get("thread_id"), request.path_params["run_id"]
    )
    return tenant, record


def _sse(
    request: Request,
    tenant: Tenant,
    record: RunRecord,
    modes: list[str],
    last_event_id: str | None,
) -> Response:
    if last_event_id:
        try:
            Cursor.decode(last_event_id)
        except ValueError as exc:
            raise BadRequest(f"Last-Event-ID {last_event_id!r} is not a stream position") from exc
    headers = {
        **SSE_HEADERS,
        "Location": f"{_path(record)}/stream",
        "Content-Location": _path(record),
    }
    return StreamingResponse(
        with_heartbeats(
            run_frames(tenant, record, modes, last_event_id),
            stopping=gateway_of(request).stopping,
        ),
        media_type="text/event-stream",
        headers=headers,
    )

"""``/runs/crons...`` and ``/threads/{id}/runs/crons``: crons as LangGraph's server
answers them (create, create for a thread, get, update, delete, search, count). The
replicas' scheduler (``cron_scheduler``) fires them."""

from __future__ import annotations

import datetime
import uuid
from typing import Any, Literal

from pydantic import Field
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from contracts.events import MultitaskStrategy
from loopline.api import webhooks
from loopline.api.crons import (
    FIELDS,
    Cron,
    CronField,
    CronStore,
    check_schedule,
    check_timezone,
    now_utc,
)
from loopline.api.gateway import body_of, tenant_of
from loopline.api.params import NoParams, Params, RunConfigBody, StreamMode, parse
from loopline.api.runs import thread_exists
from loopline.api.tenant import NotFound, Tenant

SortField = Literal[
    "cron_id", "assistant_id", "thread_id", "next_run_date", "end_time", "created_at", "updated_at"
]


class CronRun(Params):
    """What a cron's runs are made of: a run body's fields loopline implements
    (``interrupt_before`` / ``interrupt_after`` and ``checkpoint_during`` are refused,
    as on runs)."""

    input: Any = None
    metadata: dict[str, Any] | None = None
    config: RunConfigBody | None = None
    context: dict[str, Any] | None = None
    webhook: str | None = Field(None, min_length=1)
    stream_mode: list[StreamMode] | StreamMode | None = None
    stream_subgraphs: bool | None = None
    stream_resumable: bool | None = None
    durability: Literal["sync", "async"] | None = None
    end_time: datetime.datetime | None = None
    enabled: bool | None = None
    timezone: str | None = None


class ThreadCronCreate(CronRun):
    """``POST /threads/{id}/runs/crons``."""

    assistant_id: str = Field(min_length=1)
    schedule: str
    multitask_strategy: MultitaskStrategy | None = None


class CronCreate(ThreadCronCreate):
    """``POST /runs/crons``: each tick runs on a new thread, removed after the run
    (``delete``, the default: a stateless run) or kept (``keep``)."""

    on_run_completed: Literal["delete", "keep"] | None = None


class CronPatch(CronRun):
    """``PATCH /runs/crons/{id}``."""

    schedule: str | None = None
    on_run_completed: Literal["delete", "keep"] | None = None


class CronCount(Params):
    """``POST /runs/crons/count``."""

    assistant_id: str | None = None
    thread_id: str | None = None
    metadata: dict[str, Any] | None = None


class CronSearch(CronCount):
    """``POST /runs/crons/search``."""

    enabled: bool | None = None
    limit: int = Field(10, ge=0)
    offset: int = Field(0, ge=0)
    sort_by: SortField | None = None
    sort_order: Literal["asc", "desc"] | None = None
    select: list[CronField] | None = None


def store_of(tenant: Tenant) -> CronStore:
    return CronStore(tenant.redis, tenant.names)


async def create(request: Request) -> Response:
    """``POST /runs/crons``."""
    tenant = await tenant_of(request)
    parse(NoParams, request.query_params)
    given = await body_of(request)
    body = parse(CronCreate, given)
    return await _created(tenant, body, given, None, body.on_run_completed or "delete")


async def create_for_thread(request: Request) -> Response:
    """``POST /threads/{id}/runs/crons``."""
    tenant = await tenant_of(request)
    parse(NoParams, request.query_params)
    given = await body_of(request)
    body = parse(ThreadCronCreate, given)
    thread_id = request.path_params["thread_id"]
    return await _created(tenant, body, given, thread_id, None)


async def _created(
    tenant: Tenant,
    body: ThreadCronCreate,
    given: dict[str, Any],
    thread_id: str | None,
    on_run_completed: str | None,
) -> Response:
    # checked in LangGraph's order: webhook, timezone, schedule, assistant, thread
    if body.webhook:
        await webhooks.policy().check(body.webhook)
    check_timezone(body.timezone)
    check_schedule(body.schedule)
    try:
        await tenant.assistant(body.assistant_id)
    except NotFound:
        raise NotFound(f"Assistant '{body.assistant_id}' not found") from None
    if thread_id is not None and not await thread_exists(tenant, thread_id):
        raise NotFound(
            f"Thread with ID '{thread_id}' not found. Please verify the ID is correct and "
            "the thread hasn't been deleted or expired."
        )
    cron_id = str(uuid.uuid4())
    now = now_utc()
    payload = _payload(given, cron_id)
    cron = Cron(
        cron_id=cron_id,
        assistant_id=body.assistant_id,
        thread_id=thread_id,
        schedule=body.schedule,
        payload=payload,
        metadata=dict(body.metadata or {}),
        enabled=True if body.enabled is None else body.enabled,
        timezone=body.timezone,
        end_time=_iso(body.end_time),
        on_run_completed=on_run_completed,
        created_at=now.isoformat(),
        updated_at=now.isoformat(),
    )
    next_ms = cron.next_ms_after(now)
    await store_of(tenant).save(cron, next_ms)
    return JSONResponse(cron.json(next_ms))


def _payload(given: dict[str, Any], cron_id: str) -> dict[str, Any]:
    """The body as sent (what LangGraph's server keeps as ``payload``), with the cron's
    id in the runs' ``config.configurable``."""
    payload = {k: v for k, v in given.items() if v is not None}
    config = dict(payload.get("config") or {})
    config["configurable"] = {**(config.get("configurable") or {}), "cron_id": cron_id}
    payload["config"] = config
    return payload


def _iso(moment: datetime.datetime | None) -> str | None:
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.isoformat()


async def get(request: Request) -> Response:
    """``GET /runs/crons/{id}``."""
    tenant = await tenant_of(request)
    parse(NoParams, request.query_params)
    store = store_of(tenant)
    cron = await _cron(store, request.path_params["cron_id"])
    (next_ms,) = await store.next_ms([cron.cron_id])
    return JSONResponse(cron.json(next_ms))


async def _cron(store: CronStore, cron_id: str) -> Cron:
    cron = await store.get(cron_id)
    if cron is None:
        raise NotFound(f"Cron '{cron_id}' not found")
    return cron


async def update(request: Request) -> Response:
    """``PATCH /runs/crons/{id}``: the fields given change; ``metadata`` is merged into
    the cron's, the run fields into its payload; an explicit ``end_time: null`` clears
    the end. A new schedule or timezone starts from now."""
    tenant = await tenant_of(request)
    parse(NoParams, request.query_params)
    given = await body_of(request)
    if not given:
        raise HTTPException(400, "Request body cannot be empty")  # as LangGraph: not 422
    body = parse(CronPatch, given)
    if body.webhook:
        await webhooks.policy().check(body.webhook)
    check_timezone(body.timezone)
    if body.schedule is not None:
        check_schedule(body.schedule)
    store = store_of(tenant)
    cron = await _cron(store, request.path_params["cron_id"])
    (next_ms,) = await store.next_ms([cron.cron_id])
    now = now_utc()
    _apply(cron, body, given)
    cron.updated_at = now.isoformat()
    if body.schedule is not None or body.timezone is not None or next_ms is None:
        next_ms = cron.next_ms_after(now)
    following = None if cron.ended_by(now) or next_ms is None else int(next_ms)
    await store.save(cron, following)
    return JSONResponse(cron.json(following))


def _apply(cron: Cron, body: CronPatch, given: dict[str, Any]) -> None:
    if body.schedule is not None:
        cron.schedule = body.schedule
    if body.timezone is not None:
        cron.timezone = body.timezone
    if "end_time" in given:
        cron.end_time = _iso(body.end_time)
    if body.enabled is not None:
        cron.enabled = body.enabled
    if body.on_run_completed is not None:  # shown as set; a thread's cron keeps its thread
        cron.on_run_completed = body.on_run_completed
    if body.metadata is not None:
        cron.metadata = {**cron.metadata, **body.metadata}
    changes = {k: v for k, v in given.items() if v is not None and k != "end_time"}
    configurable = (cron.payload.get("config") or {}).get("configurable") or {}
    cron.payload = {**cron.payload, **changes, "assistant_id": cron.assistant_id}
    config = dict(cron.payload.get("config") or {})
    config["configurable"] = {**(config.get("configurable") or {}), **configurable}
    cron.payload["config"] = config


async def delete(request: Request) -> Response:
    """``DELETE /runs/crons/{id}`` (404 ``Not Found`` for an unknown cron, as LangGraph's
    server answers)."""
    tenant = await tenant_of(request)
    parse(NoParams, request.query_params)
    if not await store_of(tenant).delete(request.path_params["cron_id"]):
        raise NotFound("Not Found")
    return Response(status_code=204)


def _matches(cron: Cron, wanted: CronCount, enabled: bool | None = None) -> bool:
    if wanted.assistant_id is not None and cron.assistant_id != wanted.assistant_id:
        return False
    if wanted.thread_id is not None and cron.thread_id != wanted.thread_id:
        return False
    if enabled is not None and cron.enabled != enabled:
        return False
    return all(cron.metadata.get(k) == v for k, v in (wanted.metadata or {}).items())


async def search(request: Request) -> Response:
    """``POST /runs/crons/search``: newest first unless ``sort_by`` says otherwise."""
    tenant = await tenant_of(request)
    parse(NoParams, request.query_params)
    body = parse(CronSearch, await body_of(request))
    store = store_of(tenant)
    found = [c for c in await store.all() if _matches(c, body, body.enabled)]
    next_dates = await store.next_ms([c.cron_id for c in found])
    shown = [c.json(n) for c, n in zip(found, next_dates, strict=True)]
    key = body.sort_by or "created_at"
    descending = (body.sort_order or ("desc" if body.sort_by is None else "asc")) == "desc"
    shown.sort(key=lambda c: (c[key] is not None, c[key] or ""), reverse=descending)
    page = shown[body.offset : body.offset + body.limit]
    if body.select:
        page = [{k: c[k] for k in FIELDS if k in body.select} for c in page]
    return JSONResponse(page)


async def count(request: Request) -> Response:
    """``POST /runs/crons/count``."""
    tenant = await tenant_of(request)
    parse(NoParams, request.query_params)
    body = parse(CronCount, await body_of(request))
    return JSONResponse(sum(_matches(c, body) for c in await store_of(tenant).all()))

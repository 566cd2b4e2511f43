"""The operator's view of the page (``GET /ui/ops``) and the JSON it reads: each service's
backlog and how many entries its group was handed (the page turns two readings into a
rate), what waits for a human across the deployment (answered with LangChain's
decisions: approve, edit, reject, respond), the failed tasks by the stage that ended
them with their reason, and the dead-letter stream with replay and drop.

Threads and runs (search, filters by status and metadata) the page reads from the
Agent Server API's own routes; everything here is the tenant's deployment as
``loopline status``, ``approvals``, ``decide`` and ``dlq`` show it, so the page and the
CLI tell the same story. Auth is the API's (``tenant_of``).
"""

from __future__ import annotations

import re

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from loopline import status
from loopline.api.gateway import body_of, tenant_of
from loopline.api.page import static_response
from loopline.api.tenant import NotFound
from loopline.api.wire import BadRequest

STREAM_ID = re.compile(r"\d{1,20}-\d{1,20}")


async def ops_page(request: Request) -> Response:
    """``GET /ui/ops``: the operator's view."""
    return static_response(request, "ops.html")


async def overview(request: Request) -> Response:
    """``GET /ui/api/ops/overview``: ``loopline status`` of the tenant's deployment."""
    tenant = await tenant_of(request)
    return JSONResponse(await status.collect(tenant.redis, tenant.names))


async def approvals(request: Request) -> Response:
    """``GET /ui/api/ops/approvals``: every interrupt that waits for a human, oldest
    first (``loopline approvals``)."""
    tenant = await tenant_of(request)
    waiting = await tenant.client.pending_approvals()
    return JSONResponse(
        [{**event.model_dump(mode="json"), "per_call": event.per_call} for event in waiting]
    )


async def decide(request: Request) -> Response:
    """``POST /ui/api/ops/approvals/{task_id}``: ``{"decisions": [...]}`` (LangChain's
    decisions; per call, each with its ``tool_call_id``) or ``{"answers": {id: value}}``
    for an interrupt of the task's own."""
    tenant = await tenant_of(request)
    task_id = request.path_params["task_id"]
    body = await body_of(request)
    if await tenant.client.status(task_id) is None:
        raise NotFound(f"Task {task_id!r} not found")
    try:
        if "answers" in body:
            answered = await tenant.client.answer(task_id, body["answers"])
        elif isinstance(body.get("decisions"), list | dict):
            answered = await tenant.client.decide(task_id, body["decisions"])
        else:
            raise BadRequest("send 'decisions' (LangChain's decisions) or 'answers'")
    except ValueError as exc:  # a call that does not wait, or none named where several do
        raise BadRequest(str(exc)) from exc
    return JSONResponse({"task_id": task_id, "answered": answered}, status_code=202)


async def failed(request: Request) -> Response:
    """``GET /ui/api/ops/failed?limit=N``: the newest failed tasks with their stage and
    reason."""
    tenant = await tenant_of(request)
    limit = _limit(request, status.FAILED_SHOWN)
    return JSONResponse(await status.failed_tasks(tenant.redis, tenant.names, limit))


async def dead_letters(request: Request) -> Response:
    """``GET /ui/api/ops/dead-letters?limit=N``: the dead-letter stream, oldest first."""
    tenant = await tenant_of(request)
    letters = await tenant.client.dead_letters(count=_limit(request, 100))
    return JSONResponse(
        [{"id": entry_id, **letter.model_dump(mode="json")} for entry_id, letter in letters]
    )


async def replay(request: Request) -> Response:
    """``POST /ui/api/ops/dead-letters/{entry_id}/replay``: publish the event again where
    it was read from; the dead letter goes."""
    tenant = await tenant_of(request)
    entry_id = _entry_id(request)
    try:
        new_id = await tenant.client.replay(entry_id)
    except KeyError as exc:
        raise NotFound(f"Dead letter {entry_id!r} not found") from exc
    return JSONResponse({"replayed": entry_id, "as": new_id})


async def drop(request: Request) -> Response:
    """``DELETE /ui/api/ops/dead-letters/{entry_id}``."""
    tenant = await tenant_of(request)
    entry_id = _entry_id(request)
    if not await tenant.client.drop(entry_id):
        raise NotFound(f"Dead letter {entry_id!r} not found")
    return JSONResponse({"dropped": entry_id})


def _entry_id(request: Request) -> str:
    entry_id = str(request.path_params["entry_id"])
    if not STREAM_ID.fullmatch(entry_id):
        raise BadRequest(f"{entry_id!r} is not a stream entry id (like 1733350000000-0)")
    return entry_id


def _limit(request: Request, default: int) -> int:
    raw = request.query_params.get("limit")
    if raw is None:
        return default
    if not raw.isdigit() or not 1 <= int(raw) <= 1000:
        raise BadRequest(f"limit must be a whole number from 1 to 1000, not {raw!r}")
    return int(raw)


ROUTES = [
    Route("/ui/ops", ops_page),
    Route("/ui/api/ops/overview", overview),
    Route("/ui/api/ops/approvals", approvals),
    Route("/ui/api/ops/approvals/{task_id}", decide, methods=["POST"]),
    Route("/ui/api/ops/failed", failed),
    Route("/ui/api/ops/dead-letters", dead_letters),
    Route("/ui/api/ops/dead-letters/{entry_id}/replay", replay, methods=["POST"]),
    Route("/ui/api/ops/dead-letters/{entry_id}", drop, methods=["DELETE"]),
]

"""The page to watch and steer runs (``GET /ui``): plain HTML and a little JavaScript,
shipped as package data (``loopline/api/static/``), that speaks the gateway's own API
from the browser: threads, runs streamed over SSE (read from ``fetch`` streams, so the
``x-api-key`` header goes with them), ``command.resume`` for a waiting approval.

What LangGraph's API does not carry (``values`` has the messages only) the page reads
from ``GET /ui/api/threads/{thread_id}/runs/{run_id}/activity``: the run's todo list as
the todos service accepted it and its context edits, from the task's log.

Auth is the API's: the data routes need the tenant's ``x-api-key`` (typed into the page,
kept in the tab's ``sessionStorage``); without keys configured every route, the page's
files included, answers local clients only. With keys the files themselves (no data in
them) are served to anyone: a browser cannot send a header when it opens a page.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from contracts.events import ContextEdited, TodosUpdated
from loopline.api.gateway import gateway_of, tenant_of
from loopline.api.runs import run_record
from loopline.api.tenant import Tenant

STATIC_FILES = {
    "page.html": "text/html; charset=utf-8",
    "page.js": "text/javascript; charset=utf-8",
    "page.css": "text/css; charset=utf-8",
    "ops.html": "text/html; charset=utf-8",
    "ops.js": "text/javascript; charset=utf-8",
    "shared.js": "text/javascript; charset=utf-8",
}
PAGES = frozenset({"page.html", "ops.html"})
"""Served at their own paths (``/ui``, ``/ui/ops``), not as assets."""
PAGE_HEADERS = {
    "Cache-Control": "no-cache",
    # the page runs its own script only and talks to this origin only
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; "
        "connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
}


@cache
def static_text(name: str) -> str:
    """One of the page's files, read once from the installed package."""
    return files("loopline.api").joinpath("static", name).read_text(encoding="utf-8")


def _check_local(request: Request) -> None:
    """Without API keys the gateway serves this machine only: its page too."""
    gateway = gateway_of(request)
    if not gateway.tenancy.open_locally:
        return
    host = request.client.host if request.client else None
    if gateway.prefix_for(None, host) is None:
        raise HTTPException(403, "this gateway has no API keys: it serves local clients only")


async def page(request: Request) -> Response:
    """``GET /ui``: the page (``?thread=ID`` opens a thread, ``?assistant=NAME`` picks
    the agent its runs use)."""
    return static_response(request, "page.html")


async def asset(request: Request) -> Response:
    """``GET /ui/page.js``, ``/ui/page.css``, ``/ui/shared.js``, ``/ui/ops.js``."""
    name = request.path_params["name"]
    if name not in STATIC_FILES or name in PAGES:
        raise HTTPException(404, f"no such file: {name}")
    return static_response(request, name)


def static_response(request: Request, name: str) -> Response:
    """One of the page's files, for a local client or any client of a gateway with keys."""
    _check_local(request)
    return Response(static_text(name), media_type=STATIC_FILES[name], headers=PAGE_HEADERS)


async def home(request: Request) -> Response:
    """``GET /``: the page."""
    return RedirectResponse("/ui", status_code=307)


async def activity(request: Request) -> Response:
    """``GET /ui/api/threads/{thread_id}/runs/{run_id}/activity``: the run's task's todo
    list (the last one accepted; ``null`` before any) and its context edits, in order."""
    tenant = await tenant_of(request)
    record = await run_record(
        tenant, request.path_params["thread_id"], request.path_params["run_id"]
    )
    return JSONResponse(await task_activity(tenant, record.task_id))


async def task_activity(tenant: Tenant, task_id: str) -> dict[str, Any]:
    """What the task's log says about its todos and context edits so far."""
    todos: list[dict[str, Any]] | None = None
    edits: list[dict[str, Any]] = []
    async for _, event in tenant.client.events(task_id, follow=False):
        if isinstance(event, TodosUpdated):
            todos = [todo.model_dump() for todo in event.todos]
        elif isinstance(event, ContextEdited):
            edits.append(
                event.model_dump(
                    include={
                        "step",
                        "strategy",
                        "tokens_before",
                        "tokens_after",
                        "cleared_tool_call_ids",
                        "cleared_inputs",
                    }
                )
            )
    return {"todos": todos, "edits": edits}


ROUTES = [
    Route("/", home),
    Route("/ui", page),
    Route("/ui/{name:str}", asset),
    Route("/ui/api/threads/{thread_id}/runs/{run_id}/activity", activity),
]

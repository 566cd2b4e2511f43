"""The gateway's Starlette app: LangGraph's Agent Server routes, health and readiness,
and LangGraph's status codes for errors (422 bad input, 404 unknown, 409 busy)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from importlib.metadata import PackageNotFoundError, version

import redis.asyncio as aioredis
from redis.exceptions import NoPermissionError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from loopline.api import (
    a2a,
    assistant_routes,
    background,
    cron_routes,
    mcp,
    operator,
    page,
    run_routes,
    store_routes,
    thread_protocol,
    thread_routes,
)
from loopline.api.gateway import Gateway, Stopping, gateway_of
from loopline.api.runs import Busy
from loopline.api.settings import Tenancy
from loopline.api.tenant import NotFound
from loopline.api.wire import BadRequest
from services.settings import Settings


async def ok(request: Request) -> Response:
    """Liveness: the process answers."""
    return JSONResponse({"ok": True})


async def ready(request: Request) -> Response:
    """Readiness: the bus answers (an orchestrator sends no traffic before)."""
    try:
        await gateway_of(request).default().redis.ping()
    except (aioredis.RedisError, OSError) as exc:
        return JSONResponse({"ok": False, "error": type(exc).__name__}, status_code=503)
    return JSONResponse({"ok": True})


async def info(request: Request) -> Response:
    try:
        found = version("loopline")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree
        found = "unknown"
    return JSONResponse({"version": found, "flags": {"assistants": True, "crons": True}})


def _detail(status: int, message: str) -> Response:
    return JSONResponse({"detail": message}, status_code=status)


async def _bad_request(request: Request, exc: Exception) -> Response:
    return _detail(422, str(exc))


async def _bad_namespace(request: Request, exc: Exception) -> Response:
    return _detail(400, str(exc))


async def _not_found(request: Request, exc: Exception) -> Response:
    return _detail(404, str(exc).strip("'\""))


async def _busy(request: Request, exc: Exception) -> Response:
    return _detail(409, str(exc))


async def _stopping(request: Request, exc: Exception) -> Response:
    return JSONResponse({"detail": str(exc)}, status_code=503, headers={"Retry-After": "1"})


async def _denied(request: Request, exc: Exception) -> Response:
    """The gateway's Redis user may not do this (``loopline acl --role api``: a producer's
    rights and the gateway's records; removing a thread is the operator's)."""
    return _detail(403, f"not allowed for the gateway's Redis user: {exc}")


async def _http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return _detail(exc.status_code, str(exc.detail))


ROUTES = [
    Route("/ok", ok),
    Route("/health", ok),
    Route("/ready", ready),
    Route("/info", info),
    Route("/assistants", assistant_routes.create, methods=["POST"]),
    Route("/assistants/search", assistant_routes.search, methods=["POST"]),
    Route("/assistants/count", assistant_routes.count, methods=["POST"]),
    Route("/assistants/{assistant_id}", assistant_routes.get),
    Route("/assistants/{assistant_id}", assistant_routes.update, methods=["PATCH"]),
    Route("/assistants/{assistant_id}", assistant_routes.delete, methods=["DELETE"]),
    Route("/assistants/{assistant_id}/versions", assistant_routes.versions, methods=["POST"]),
    Route("/assistants/{assistant_id}/latest", assistant_routes.set_latest, methods=["POST"]),
    Route("/assistants/{assistant_id}/schemas", assistant_routes.schemas),
    Route("/assistants/{assistant_id}/graph", assistant_routes.graph),
    Route("/assistants/{assistant_id}/subgraphs", assistant_routes.subgraphs),
    Route("/threads", thread_routes.create, methods=["POST"]),
    Route("/threads/search", thread_routes.search, methods=["POST"]),
    Route("/threads/count", thread_routes.count, methods=["POST"]),
    Route("/threads/prune", thread_routes.prune, methods=["POST"]),
    Route("/threads/{thread_id}", thread_routes.get),
    Route("/threads/{thread_id}", thread_routes.update, methods=["PATCH"]),
    Route("/threads/{thread_id}/copy", thread_routes.copy, methods=["POST"]),
    Route("/threads/{thread_id}", thread_routes.delete, methods=["DELETE"]),
    Route("/threads/{thread_id}/state", thread_routes.state),
    Route("/threads/{thread_id}/state", thread_routes.update_state, methods=["POST"]),
    Route("/threads/{thread_id}/state/checkpoint", thread_routes.state_at, methods=["POST"]),
    Route("/threads/{thread_id}/state/{checkpoint_id}", thread_routes.state_at),
    Route("/threads/{thread_id}/history", thread_routes.history, methods=["POST"]),
    Route("/threads/{thread_id}/commands", thread_protocol.commands, methods=["POST"]),
    Route("/threads/{thread_id}/stream/events", thread_protocol.events, methods=["POST"]),
    Route("/threads/{thread_id}/stream", thread_protocol.join_stream),
    Route("/runs/crons", cron_routes.create, methods=["POST"]),
    Route("/runs/crons/search", cron_routes.search, methods=["POST"]),
    Route("/runs/crons/count", cron_routes.count, methods=["POST"]),
    Route("/runs/crons/{cron_id}", cron_routes.get),
    Route("/runs/crons/{cron_id}", cron_routes.update, methods=["PATCH"]),
    Route("/runs/crons/{cron_id}", cron_routes.delete, methods=["DELETE"]),
    Route("/threads/{thread_id}/runs/crons", cron_routes.create_for_thread, methods=["POST"]),
    Route("/threads/{thread_id}/runs", run_routes.create, methods=["POST"]),
    Route("/threads/{thread_id}/runs", run_routes.listing),
    Route("/threads/{thread_id}/runs/stream", run_routes.stream, methods=["POST"]),
    Route("/threads/{thread_id}/runs/wait", run_routes.wait, methods=["POST"]),
    Route("/threads/{thread_id}/runs/{run_id}", run_routes.get),
    Route("/threads/{thread_id}/runs/{run_id}", run_routes.delete, methods=["DELETE"]),
    Route("/threads/{thread_id}/runs/{run_id}/join", run_routes.join),
    Route("/threads/{thread_id}/runs/{run_id}/stream", run_routes.join_stream),
    Route("/threads/{thread_id}/runs/{run_id}/cancel", run_routes.cancel, methods=["POST"]),
    Route("/runs", run_routes.create, methods=["POST"]),
    Route("/runs/batch", run_routes.batch, methods=["POST"]),
    Route("/runs/cancel", run_routes.cancel_many, methods=["POST"]),
    Route("/runs/stream", run_routes.stream, methods=["POST"]),
    Route("/runs/wait", run_routes.wait, methods=["POST"]),
    Route("/runs/{run_id}/join", run_routes.join),
    Route("/runs/{run_id}/stream", run_routes.join_stream),
    Route("/store/items", store_routes.put, methods=["PUT"]),
    Route("/store/items", store_routes.get),
    Route("/store/items", store_routes.delete, methods=["DELETE"]),
    Route("/store/items/search", store_routes.search, methods=["POST"]),
    Route("/store/namespaces", store_routes.namespaces, methods=["POST"]),
    Route("/mcp", mcp.endpoint, methods=["GET", "POST", "DELETE"]),
    Route("/a2a/{assistant_id}", a2a.endpoint, methods=["GET", "POST", "DELETE"]),
    Route("/a2a/{assistant_id}/.well-known/agent-card.json", a2a.card),
    Route("/a2a/{assistant_id}/.well-known/agent.json", a2a.card),
    Route("/.well-known/agent-card.json", a2a.card),
    *operator.ROUTES,  # the operator's view (GET /ui/ops), before the page's /ui/{name}
    *page.ROUTES,  # the page to watch and steer runs (GET /ui)
]


def create_app(
    url: str,
    tenancy: Tenancy,
    settings: Settings | None = None,
    *,
    cors_origins: Sequence[str] = (),
) -> Starlette:
    """The gateway for the bus at ``url``: ``tenancy`` says who may call and as which
    tenant (``settings.parse_keys``); ``cors_origins``: the web origins whose pages may
    call it from a browser."""
    gateway = Gateway(url, tenancy, settings or Settings())

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        gateway.started()
        async with background.running(gateway):  # crons and webhooks
            yield
        await gateway.close()

    middleware = [
        Middleware(
            CORSMiddleware,
            allow_origins=list(cors_origins),
            allow_methods=["*"],
            allow_headers=["*"],
            expose_headers=["Content-Location", "Location"],  # the SDKs read the run id
        )
    ]
    app = Starlette(
        routes=ROUTES,
        lifespan=lifespan,
        middleware=middleware if cors_origins else None,
        exception_handlers={
            BadRequest: _bad_request,
            store_routes.EmptyNamespace: _bad_namespace,
            NotFound: _not_found,
            Busy: _busy,
            Stopping: _stopping,
            NoPermissionError: _denied,
            HTTPException: _http,
        },
    )
    app.state.gateway = gateway
    return app

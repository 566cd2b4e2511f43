"""What every route shares: the gateway (its tenants, by API key), the request's
tenant, its JSON body, and the mapping of errors to LangGraph's status codes."""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import Awaitable
from typing import Any, TypeVar

from starlette.exceptions import HTTPException
from starlette.requests import Request

from loopline.api.settings import Tenancy
from loopline.api.tenant import Tenant
from loopline.api.wire import BadRequest
from services.settings import Settings


class Gateway:
    """The app's state: where the bus is, who may call, one ``Tenant`` per prefix."""

    def __init__(self, url: str, tenancy: Tenancy, settings: Settings) -> None:
        self.url = url
        self.tenancy = tenancy
        self.settings = settings
        self.tenants: dict[str, Tenant] = {}
        self.stopping = asyncio.Event()
        """Set when the process is asked to stop: open streams end and waits answer 503,
        so it exits within its grace period (the runs go on; a client reconnects)."""
        self._loop: asyncio.AbstractEventLoop | None = None

    def started(self) -> None:
        """In the app's event loop, as it starts (``stop_soon`` wakes it from there)."""
        self._loop = asyncio.get_running_loop()

    def stop_soon(self) -> None:
        """Begin stopping: safe from a signal handler (the event is set in the loop)."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.stopping.set)

    def tenant(self, prefix: str) -> Tenant:
        if prefix not in self.tenants:
            settings = self.settings.model_copy(update={"prefix": prefix})
            self.tenants[prefix] = Tenant(self.url, prefix, settings)
        return self.tenants[prefix]

    def default(self) -> Tenant:
        return self.tenant(self.tenancy.default_prefix)

    async def close(self) -> None:
        for tenant in self.tenants.values():
            await tenant.close()
        self.tenants.clear()

    def prefix_for(self, api_key: str | None, client_host: str | None) -> str | None:
        """The caller's tenant: its key compared in constant time with every key."""
        tenancy = self.tenancy
        if tenancy.open_locally or api_key is None:
            return tenancy.prefix_for(api_key, client_host)
        found = None
        for key, prefix in tenancy.keys.items():
            if hmac.compare_digest(key.encode(), api_key.encode()):
                found = prefix
        return found


class Stopping(Exception):
    """The gateway stops while a request waits (503: the run goes on, join it)."""


T = TypeVar("T")


async def unless_stopping(gateway: Gateway, awaitable: Awaitable[T]) -> T:
    """``awaitable``'s result, or ``Stopping`` as soon as the gateway begins to stop (a
    wait on a run that never moves must not hold the process)."""
    work = asyncio.ensure_future(awaitable)
    stop = asyncio.ensure_future(gateway.stopping.wait())
    try:
        await asyncio.wait({work, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
    if not work.done():
        work.cancel()
        raise Stopping("the gateway is stopping; the run goes on: join it again")
    return work.result()


def gateway_of(request: Request) -> Gateway:
    found: Gateway = request.app.state.gateway
    return found


async def tenant_of(request: Request) -> Tenant:
    """The tenant a request's ``x-api-key`` names (401 without a valid key; without
    keys configured, 403 for a client that is not on this machine)."""
    gateway = gateway_of(request)
    host = request.client.host if request.client else None
    prefix = gateway.prefix_for(request.headers.get("x-api-key"), host)
    if prefix is None:
        if gateway.tenancy.open_locally:
            raise HTTPException(403, "this gateway has no API keys: it serves local clients only")
        raise HTTPException(401, "a valid x-api-key header is required")
    return gateway.tenant(prefix)


async def body_of(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw:
        return {}
    try:
        found = json.loads(raw)
    except ValueError as exc:
        raise BadRequest(f"the body is not JSON: {exc}") from exc
    if not isinstance(found, dict):
        raise BadRequest("the body must be a JSON object")
    return found

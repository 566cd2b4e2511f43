"""``loopline serve api``: the gateway on uvicorn, at ``--host`` / ``--port`` or
``LOOPLINE_API_HOST`` / ``LOOPLINE_API_PORT`` (default ``127.0.0.1:2024``), for the
deployment at ``REDIS_URL``.

On SIGTERM (what Docker and Kubernetes send) or SIGINT it stops within its grace period:
open streams end (their runs go on; a client resumes them with ``Last-Event-ID``), waits
answer 503, and what is still running after ``STOP_GRACE_S`` is cancelled.
"""

from __future__ import annotations

from types import FrameType
from typing import TYPE_CHECKING, Any

import uvicorn

from loopline.api.settings import ApiSettings, BadKeys, Tenancy, is_loopback, parse_keys
from services.errors import ConfigurationError
from services.settings import Settings

if TYPE_CHECKING:
    from loopline.api.gateway import Gateway

STOP_GRACE_S = 3
"""How long requests may take to finish once the gateway stops (then they are
cancelled): under the 5 s an orchestrator's shortest grace period is set to in tests,
far under Kubernetes' 30 s default."""


def tenancy_of(api: ApiSettings, settings: Settings) -> Tenancy:
    """Who may call; a gateway without keys refuses to listen beyond this machine."""
    try:
        keys = parse_keys(api.keys)
    except BadKeys as exc:
        raise ConfigurationError(str(exc)) from exc
    if not keys and not is_loopback(api.host):
        raise ConfigurationError(
            f"LOOPLINE_API_HOST={api.host} reaches other machines, and no API keys are "
            "configured: set LOOPLINE_API_KEYS (KEY=PREFIX pairs) or listen on 127.0.0.1"
        )
    return Tenancy(keys=keys, default_prefix=settings.prefix)


def api_settings(host: str | None = None, port: int | None = None) -> ApiSettings:
    """The environment's settings, with the command line's host and port over them."""
    given: dict[str, Any] = {"host": host, "port": port}
    return ApiSettings(**{k: v for k, v in given.items() if v is not None})


def serve(url: str, settings: Settings, api: ApiSettings | None = None) -> None:
    from loopline.api.app import create_app

    api = api or ApiSettings()
    app = create_app(url, tenancy_of(api, settings), settings, cors_origins=api.origins)
    config = uvicorn.Config(
        app,
        host=api.host,
        port=api.port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=STOP_GRACE_S,
    )
    print(f"serving the HTTP API on http://{api.host}:{api.port}", flush=True)
    _Server(config, app.state.gateway).run()


class _Server(uvicorn.Server):
    """uvicorn's server that also tells the gateway it stops, so streams and waits end
    instead of holding the process (uvicorn alone waits for every open response)."""

    def __init__(self, config: uvicorn.Config, gateway: Gateway) -> None:
        super().__init__(config)
        self.gateway = gateway

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        self.gateway.stop_soon()

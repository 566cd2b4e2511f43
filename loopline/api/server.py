"""``loopline serve api``: the gateway on uvicorn, at ``LOOPLINE_API_HOST`` /
``LOOPLINE_API_PORT`` (default ``127.0.0.1:2024``), for the deployment at ``REDIS_URL``."""

from __future__ import annotations

from loopline.api.settings import ApiSettings, BadKeys, Tenancy, is_loopback, parse_keys
from services.errors import ConfigurationError
from services.settings import Settings


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


def serve(url: str, settings: Settings) -> None:
    import uvicorn

    from loopline.api.app import create_app

    api = ApiSettings()
    app = create_app(url, tenancy_of(api, settings), settings, cors_origins=api.origins)
    print(f"serving the HTTP API on http://{api.host}:{api.port}", flush=True)
    uvicorn.run(app, host=api.host, port=api.port, log_level="warning", access_log=False)

"""Commands that run services: ``up`` (every service in one process, on the embedded
server without ``REDIS_URL``) and ``serve NAME`` (one service of a deployment)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from contracts.streams import SERVICES
from loopline.cli.common import UsageError, check_redis, resolve_url, settings


def _serve(services: Sequence[str], *, allow_embedded: bool) -> int:

    from services.app import build_app
    from services.registry import factory
    from services.secrets import install_redacting_logs, redact_url

    install_redacting_logs("%(asctime)s %(levelname)s %(name)s %(message)s")
    current = settings()
    url, embedded = (current.redis_url, False) if current.redis_url else (None, True)
    if embedded:
        if not allow_embedded:
            raise UsageError(
                "serve needs REDIS_URL (services of one deployment share a Redis); "
                "`loopline up` runs every service on an embedded server"
            )
        from loopline.embedded import embedded_settings

        url, _ = resolve_url(current)
        current = embedded_settings(current)  # the embedded default trusts this process
        print(f"embedded server: REDIS_URL={redact_url(url)}", flush=True)
    assert url is not None
    asyncio.run(check_redis(url, current.redis_wait_s))
    app, _ = build_app(list(services), factory, url=url, settings=current)
    print(
        f"serving {', '.join(services)} on {redact_url(url)} (prefix {current.prefix!r})",
        flush=True,
    )
    from services import reflection
    from services.app import tune_gc

    tune_gc(current.gc_threshold)
    reflection.install()
    from services.eventloop import run

    run(_run_app(app))  # asyncio's own loop, its cross-thread wake-ups coalesced
    return 0


async def _run_app(app: object) -> None:
    """Run until SIGTERM/SIGINT; SIGUSR1 prints every asyncio task's stack to stderr (for
    an operator asking what a stuck process waits on)."""
    import signal

    def dump() -> None:
        for task in asyncio.all_tasks():
            print(f"task {task.get_name()}: {task.get_coro()}", file=sys.stderr)
            task.print_stack(limit=6, file=sys.stderr)

    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, dump)
    await app.run()  # type: ignore[attr-defined]


def cmd_up(args: argparse.Namespace) -> int:
    return _serve(SERVICES, allow_embedded=True)


def cmd_serve(args: argparse.Namespace) -> int:
    host, port = getattr(args, "host", None), getattr(args, "port", None)
    if args.name == "api":
        return _serve_api(host, port)
    if host is not None or port is not None:
        raise UsageError(f"--host and --port are the gateway's (serve api), not {args.name}'s")
    return _serve([args.name], allow_embedded=False)


def _serve_api(host: str | None, port: int | None) -> int:
    """The HTTP gateway (``loopline.api``) for the deployment at ``REDIS_URL``, on
    ``host``/``port`` when given, else ``LOOPLINE_API_HOST``/``LOOPLINE_API_PORT``."""
    from loopline.api.server import api_settings, serve
    from services.secrets import install_redacting_logs, redact_url

    install_redacting_logs("%(asctime)s %(levelname)s %(name)s %(message)s")
    current = settings()
    try:
        api = api_settings(host, port)
    except ValueError as exc:  # pydantic's ValidationError: a bad LOOPLINE_API_PORT
        raise UsageError(f"serve api: {exc}") from exc
    if not current.redis_url:
        raise UsageError(
            "serve api needs REDIS_URL (the deployment whose runs it serves); "
            "`loopline up` runs the services on an embedded server"
        )
    asyncio.run(check_redis(current.redis_url, current.redis_wait_s))
    print(f"gateway for {redact_url(current.redis_url)} (prefix {current.prefix!r})", flush=True)
    serve(current.redis_url, current, api)
    return 0

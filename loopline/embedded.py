"""The embedded default: a Valkey server started by this process and every service running
in a background thread, so ``loopline run`` and ``create_agent(...).invoke`` work on a
fresh machine with no Redis and nothing else to start. Each process gets its own server,
which goes when the process goes (``loopline.embedded_server``).
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import sys
import threading
from concurrent.futures import Future
from typing import NoReturn

from contracts.agent import ModelSpec
from contracts.streams import SERVICES
from loopline.embedded_server import EmbeddedValkey
from services.errors import ConfigurationError
from services.settings import Settings
from services.spec import endpoints, imports

log = logging.getLogger("loopline.embedded")

ABORT_WAIT_S = 3.0
"""How long an abort waits for the cancelled handlers to unwind."""

_lock = threading.Lock()
_server: EmbeddedValkey | None = None
_stack: ServiceThread | None = None


def embedded_url() -> str:
    """Start (once per process) the embedded Valkey server and return its URL. The server
    dies with this process however it dies (``loopline.embedded_server``)."""
    global _server
    with _lock:
        if _server is None:
            server = EmbeddedValkey().start()
            _server = server
            atexit.register(_stop_server)
            log.debug(
                "started the embedded Valkey server %s (pid %s, folder %s)",
                server.url,
                server.pid,
                server.directory,
            )
        return _server.url


def _stop_server() -> None:
    global _server
    if _stack is not None:
        _stack.stop()
    if _server is not None:
        _server.stop()
        _server = None


class ServiceThread:
    """All services on one broker, in a thread with its own event loop: callers may use
    ``asyncio.run`` or their own loops freely while the services keep running."""

    def __init__(self, url: str, settings: Settings, services: tuple[str, ...] = SERVICES):
        from services.app import build_app
        from services.failures import keep_originals
        from services.registry import factory

        keep_originals()  # the callers share this process: they raise the very exception
        self.app, self.runtime = build_app(services, factory, url=url, settings=settings)
        self._loop = asyncio.new_event_loop()
        self._started: Future[None] = Future()
        self._thread = threading.Thread(target=self._run, name="loopline-services", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self.app.start())
        except BaseException as exc:
            self._started.set_exception(exc)
            return
        self._started.set_result(None)
        self._loop.run_forever()

    def start(self) -> ServiceThread:
        self._thread.start()
        self._started.result(timeout=30)
        return self

    def abort(self) -> None:
        """Stop now, dropping the work in flight (Ctrl-C: the task goes with this
        process): every task of the services' loop is cancelled and awaited, so none
        fails later on an interpreter that is shutting down, and the services' logs go
        quiet (what they would report now is only this process leaving). On a loop too
        busy to unwind in time the thread is left to the exit (it is a daemon), rather
        than its tasks destroyed while pending."""
        if not self._thread.is_alive():
            return
        logging.getLogger("loopline").setLevel(logging.CRITICAL)

        async def cancel_everything() -> None:
            current = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not current]
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=ABORT_WAIT_S)

        done = asyncio.run_coroutine_threadsafe(cancel_everything(), self._loop)
        try:
            done.result(timeout=ABORT_WAIT_S + 1)
        except Exception:  # too busy to unwind: the process is leaving anyway
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=ABORT_WAIT_S)

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        done = asyncio.run_coroutine_threadsafe(self.app.stop(), self._loop)
        try:
            done.result(timeout=10)
        except Exception:  # stopping is best effort at exit
            log.debug("embedded services did not stop cleanly", exc_info=True)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)


def abort_services() -> None:
    """Stop this process's embedded services at once, dropping their work (see
    ``ServiceThread.abort``); nothing when none runs."""
    if _stack is not None:
        _stack.abort()


def exit_now(code: int) -> NoReturn:
    """Leave at once (Ctrl-C of the command line): the services aborted, the server
    stopped (its folder removed), the output flushed, then ``os._exit``. A tool still
    running in a worker thread would otherwise hold the exit until it returns, since the
    interpreter joins those threads on the way out."""
    abort_services()
    _stop_server()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def ensure_services(url: str, settings: Settings) -> ServiceThread:
    """Start (once per process) every service in-process against ``url``. An agent of
    another Redis or prefix than the running services' is refused: its tasks would wait
    for consumers that never come."""
    global _stack
    with _lock:
        if _stack is None:
            _stack = ServiceThread(url, embedded_settings(settings)).start()
        running = _stack.runtime
        if (running.url, running.settings.prefix) != (url, settings.prefix):
            raise ConfigurationError(
                f"this process's embedded services run on {running.url} with prefix "
                f"{running.settings.prefix!r}; an embedded agent on {url} with prefix "
                f"{settings.prefix!r} would wait for consumers that never come: give every "
                "embedded agent of a process the same redis_url and LOOPLINE_PREFIX"
            )
        return _stack


class NoModelEndpoint(ConfigurationError):
    """The embedded default cannot call the agent's model: ``str()`` is one line that
    says how to get an endpoint, with or without a key."""


def check_endpoint(model: ModelSpec) -> None:
    """On the embedded default this process is the model service: a model it cannot
    call fails here, before any task, rather than as the task's first step."""
    if endpoints.endpoint_configured(model):
        return
    raise NoModelEndpoint(
        f"no model endpoint configured for {model.name!r}: set OPENAI_API_KEY (and "
        "OPENAI_BASE_URL for another OpenAI-compatible server); without a key, run "
        "`python -m loopline.testing.scripted` and set "
        "OPENAI_BASE_URL=http://127.0.0.1:8000/v1 (README: Try it without a key), "
        "or run `loopline demo`"
    )


def trust_this_process() -> None:
    """On the embedded default this process names the code and runs it: any importable
    module and the scripted model are allowed, unless the environment says otherwise
    (LOOPLINE_ALLOWED_MODULES, LOOPLINE_ALLOW_FAKE_MODEL)."""
    imports.trust_all()
    endpoints.allow_fake_by_default()


def embedded_settings(settings: Settings) -> Settings:
    """The embedded default trusts its one producer, the process itself: inline agent
    specs run (unless LOOPLINE_ALLOW_INLINE_AGENTS says otherwise), and
    ``trust_this_process``."""
    trust_this_process()
    if "allow_inline_agents" in settings.model_fields_set:
        return settings
    return settings.model_copy(update={"allow_inline_agents": True})

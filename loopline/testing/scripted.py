"""A scripted, OpenAI-compatible chat-completions server.

Tests, benchmarks and ``loopline demo`` need a model endpoint that is deterministic, free,
offline and fast, yet speaks the real wire protocol so the production client stack
(``langchain_openai.ChatOpenAI`` -> ``openai`` -> ``httpx``) is exercised end to end instead
of being mocked away. Only the standard library (and the pure-data reply format of
``contracts.replies``) is used, so the server runs anywhere the package is importable,
including a bare container started by docker compose:
``python -m loopline.testing.scripted [--script FILE]``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, cast

from contracts.replies import Reply, ScriptedToolCall, replies_from_json
from loopline.testing import chat_wire as wire

__all__ = [
    "Reply",
    "ScriptedOpenAIServer",
    "ScriptedToolCall",
    "first_user_text",
    "load_script",
    "main",
    "replies_from_json",
    "responder_by_prompt",
]

DONE_REPLY = Reply(content="done")
"""What a conversation gets once its script has run out and no turn ends it."""


def load_script(path: str | Path) -> tuple[Reply, ...]:
    """Read a JSON script file (the format of :func:`contracts.replies.replies_from_json`)."""
    return replies_from_json(json.loads(Path(path).read_text(encoding="utf-8")))


class _HTTPServer(ThreadingHTTPServer):
    """Carries a back-reference to its owner and tracks live connections.

    Connections are tracked so ``stop()`` can sever keep-alive sockets; otherwise their
    handler threads would keep answering pooled client connections after the server was
    "stopped", which makes shutdown-related tests lie.
    """

    daemon_threads = True
    allow_reuse_address = True
    # socketserver's default backlog of 5 makes bursts of concurrent clients (benchmarks,
    # fan-out tests) fail with connection resets before a handler thread ever runs.
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], owner: ScriptedOpenAIServer) -> None:
        self.owner = owner
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients hanging up mid-reply (timeouts, cancelled tasks) are routine, not errors."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)

    def sever_connections(self) -> None:
        with self.connections_lock:
            conns = list(self.connections)
            self.connections.clear()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: clients reuse pooled connections
    # Headers and body go out as separate small writes; with Nagle on, the client's delayed
    # ACK stalls every reply by ~40 ms, which would dominate any benchmark.
    disable_nagle_algorithm = True
    server_version = "loopline-scripted/1"
    sys_version = ""

    @property
    def _srv(self) -> _HTTPServer:
        return cast(_HTTPServer, self.server)

    def setup(self) -> None:
        super().setup()
        with self._srv.connections_lock:
            self._srv.connections.add(self.connection)

    def finish(self) -> None:
        with self._srv.connections_lock:
            self._srv.connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        """Silenced: per-request lines would drown test and benchmark output."""

    # -- routing -------------------------------------------------------------------------

    def _route(self) -> str:
        path = self.path.split("?", 1)[0].rstrip("/")
        return path.removeprefix("/v1")

    def do_GET(self) -> None:
        route = self._route()
        if route == "/models":
            model = {
                "id": wire.DEFAULT_MODEL,
                "object": "model",
                "created": 0,
                "owned_by": "loopline",
            }
            self._send_json(HTTPStatus.OK, {"object": "list", "data": [model]})
        elif route == "/health":
            self._send_json(HTTPStatus.OK, {"status": "ok"})
        else:
            self._send_not_found()

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        self._srv.owner._record_authorization(self.headers.get("Authorization"))
        if self._route() != "/chat/completions":
            self._send_not_found()
            return
        try:
            body = wire.parse_request(raw)
        except wire.BadRequest as exc:
            self._send_error(HTTPStatus.BAD_REQUEST, str(exc), "invalid_request_error")
            return
        owner = self._srv.owner
        owner._record(body)
        try:
            reply, turn = owner._choose(body)
        except Exception as exc:  # a broken responder must surface as a server error
            self._send_error(
                HTTPStatus.INTERNAL_SERVER_ERROR, f"responder failed: {exc!r}", "server_error"
            )
            return
        if owner.latency > 0:
            time.sleep(owner.latency)
        completion_id = f"chatcmpl-{owner._next_id()}"
        model = wire.DEFAULT_MODEL
        if owner.model_name_echo:
            model = str(body.get("model") or wire.DEFAULT_MODEL)
        if body.get("stream"):
            opts = body.get("stream_options")
            include_usage = isinstance(opts, dict) and bool(opts.get("include_usage"))
            events = wire.stream_events(completion_id, model, reply, turn, body, include_usage)
            self._send_sse(events)
        else:
            self._send_json(HTTPStatus.OK, wire.completion(completion_id, model, reply, turn, body))

    # -- responses -----------------------------------------------------------------------

    def _send_json(self, status: HTTPStatus, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, status: HTTPStatus, message: str, kind: str) -> None:
        error = {"message": message, "type": kind, "param": None, "code": None}
        self._send_json(status, {"error": error})

    def _send_not_found(self) -> None:
        self._send_error(
            HTTPStatus.NOT_FOUND,
            f"Unknown path: {self.command} {self.path}",
            "invalid_request_error",
        )

    def _send_sse(self, events: Iterator[str]) -> None:
        """Chunked transfer so every SSE event really arrives as a separate network write."""
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        delay = self._srv.owner.chunk_delay
        for i, event in enumerate(events):
            if delay > 0 and i > 0:
                time.sleep(delay)  # a model generating: each piece a moment after the last
            data = event.encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class ScriptedOpenAIServer:
    """Serves scripted replies over the OpenAI chat-completions protocol.

    With ``turns`` the reply is picked by how many assistant messages the request already
    carries, not by a shared cursor, so any number of concurrent conversations following
    the same script each get the right turn. ``responder`` covers the cases where the reply
    must depend on the request content.
    """

    def __init__(
        self,
        turns: Sequence[Reply] | None = None,
        *,
        responder: Callable[[dict[str, Any]], Reply] | None = None,
        latency: float = 0.0,
        chunk_delay: float = 0.0,
        host: str = "127.0.0.1",
        port: int = 0,
        model_name_echo: bool = True,
    ) -> None:
        if turns is not None and responder is not None:
            raise ValueError("pass either turns or responder, not both")
        if latency < 0 or chunk_delay < 0:
            raise ValueError("latency and chunk_delay must be >= 0")
        self.turns: tuple[Reply, ...] | None = tuple(turns) if turns is not None else None
        self.responder = responder
        self.latency = latency
        self.chunk_delay = chunk_delay
        """Seconds between the streamed pieces of a reply (``stream: true``)."""
        self.host = host
        self.port = port
        self.model_name_echo = model_name_echo
        self.requests: list[dict[str, Any]] = []
        self.authorizations: list[str | None] = []
        """The ``Authorization`` header of every POST, in order (None: none was sent):
        which key reached this endpoint."""
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> ScriptedOpenAIServer:
        if self._httpd is not None:
            raise RuntimeError("server already started")
        httpd = _HTTPServer((self.host, self.port), self)
        self.port = int(httpd.server_address[1])
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"scripted-openai:{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, thread = self._httpd, self._thread
        if httpd is None:
            return
        self._httpd = None
        self._thread = None
        httpd.shutdown()
        httpd.server_close()
        httpd.sever_connections()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> ScriptedOpenAIServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """Base URL for ``ChatOpenAI(base_url=...)``.

        With ``port=0`` the real port is only known once started; it stays valid after
        ``stop()`` so callers can still report or assert on where the server was.
        """
        if self.port == 0:
            raise RuntimeError("server not started: port not assigned yet")
        host = self.host
        if host in ("0.0.0.0", ""):
            host = "127.0.0.1"
        elif host == "::":
            host = "::1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}/v1"

    # -- recorded traffic ----------------------------------------------------------------

    def chat_requests(self) -> list[dict[str, Any]]:
        """Snapshot copy, so callers can iterate while requests keep arriving."""
        with self._lock:
            return list(self.requests)

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.authorizations.clear()

    # -- internals used by the handler ---------------------------------------------------

    def _record_authorization(self, header: str | None) -> None:
        with self._lock:
            self.authorizations.append(header)

    def _record(self, body: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(body)

    def _next_id(self) -> int:
        with self._lock:
            return next(self._ids)

    def _choose(self, body: dict[str, Any]) -> tuple[Reply, int]:
        """Return the reply and the turn index used to derive tool-call ids."""
        messages = body.get("messages", [])
        turn = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
        if self.responder is not None:
            return self.responder(body), turn
        if self.turns is None:
            return Reply(content="ok"), turn
        if turn < len(self.turns):
            return self.turns[turn], turn
        # Script exhausted: end the conversation instead of looping tool calls forever.
        for reply in reversed(self.turns):
            if not reply.tool_calls:
                return reply, turn
        return DONE_REPLY, turn


def first_user_text(body: dict[str, Any]) -> str:
    """The text of the first user message of a chat-completions request."""
    for message in body.get("messages", []):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
            return str(content or "")
    return ""


def responder_by_prompt(
    scripts: dict[str, Sequence[Reply]],
) -> Callable[[dict[str, Any]], Reply]:
    """One server, many scripts: the first user message picks the script (by the key it
    starts with), the number of assistant messages picks the turn."""

    def respond(body: dict[str, Any]) -> Reply:
        text = first_user_text(body)
        for key, turns in scripts.items():
            if text.startswith(key):
                turn = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
                if turn < len(turns):
                    return turns[turn]
                return next((r for r in reversed(turns) if not r.tool_calls), DONE_REPLY)
        return Reply(content=f"no script for prompt {text[:40]!r}")

    return respond


SCRIPT_HELP = """\
a script is a JSON list of turns, every key optional:
  [{"content": "text of the reply",
    "tool_calls": [{"name": "add", "args": {"a": 20, "b": 22}, "id": "call_1"}],
    "prompt_tokens": 42, "completion_tokens": 7},
   ...]
A request that already holds n assistant messages gets turn n, so every conversation
replays the script from its start; past its end, the script's last plain answer
repeats. Without --script: the script of `loopline demo`.

point a client at it: OPENAI_BASE_URL=http://127.0.0.1:PORT/v1 (any key, or none)
"""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the server in the foreground until SIGINT/SIGTERM (for docker compose)."""
    parser = argparse.ArgumentParser(
        prog="python -m loopline.testing.scripted",
        description="Scripted OpenAI-compatible chat-completions server (streaming too).",
        epilog=SCRIPT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--script", type=Path, help="JSON list of turns; default: the demo's script"
    )
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each reply")
    parser.add_argument(
        "--chunk-delay",
        type=float,
        default=0.0,
        help="seconds between the pieces of a streamed reply (to watch it stream)",
    )
    args = parser.parse_args(None if argv is None else list(argv))

    if args.script is not None:
        turns = load_script(args.script)
    else:
        from loopline.demo import DEMO_TURNS

        turns = DEMO_TURNS
    stopping = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)

    server = ScriptedOpenAIServer(
        turns, latency=args.latency, chunk_delay=args.chunk_delay, host=args.host, port=args.port
    )
    with server:
        print(
            f"scripted OpenAI server listening on {args.host}:{server.port} "
            f"({len(turns)} turns); base_url={server.url}",
            flush=True,
        )
        while not stopping.is_set():
            stopping.wait(0.5)
    return 0


if __name__ == "__main__":
    sys.exit(main())

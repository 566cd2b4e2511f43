"""What any HTTP front door costs a ``langgraph_sdk`` client: a server that answers
``POST /runs/stream`` at once with one ``messages`` frame, on the gateway's stack
(Starlette on uvicorn), no bus behind it. ``python -m benchmarks.http_floor PORT``.
With ``--raw``, the same answer from a bare asyncio server (no HTTP framework, the
request read and the reply written in a few lines): what the client itself costs.

The streaming benchmark times the SDK to that frame: the floor under the gateway's
first-token overhead, which no gateway of this kind can go below.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

FRAMES = (
    b'event: metadata\ndata: {"run_id": "floor", "attempt": 1}\n\n',
    b'event: messages\ndata: [{"type": "AIMessageChunk", "content": "token "}, {}]\n\n',
    b"event: end\ndata: null\n\n",
)


async def _frames() -> AsyncIterator[bytes]:
    for frame in FRAMES:
        yield frame


async def stream(request: Request) -> Response:
    await request.body()
    return StreamingResponse(_frames(), media_type="text/event-stream")


async def ok(request: Request) -> Response:
    return Response("ok")


app = Starlette(
    routes=[Route("/runs/stream", stream, methods=["POST"]), Route("/ok", ok, methods=["GET"])]
)


async def _answer_raw(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """HTTP/1.1 with keep-alive, every request answered with the frames at once."""
    body = b"".join(FRAMES)
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n"
    try:
        while True:
            request = await reader.readuntil(b"\r\n\r\n")
            for line in request.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    await reader.readexactly(int(line.partition(b":")[2]))
            writer.write(head % len(body) + body)
    except (asyncio.IncompleteReadError, ConnectionError):  # the client went away
        writer.close()


async def _serve_raw(port: int) -> None:
    server = await asyncio.start_server(_answer_raw, "127.0.0.1", port)
    await server.serve_forever()


def main() -> None:
    port = int(sys.argv[1])
    if "--raw" in sys.argv[2:]:
        asyncio.run(_serve_raw(port))
    else:
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()

"""What any HTTP front door costs a ``langgraph_sdk`` client: a server that answers
``POST /runs/stream`` at once with one ``messages`` frame, on the gateway's stack
(Starlette on uvicorn), no bus behind it. ``python -m benchmarks.http_floor PORT``.

The streaming benchmark times the SDK to that frame: the floor under the gateway's
first-token overhead, which no gateway of this kind can go below.
"""

from __future__ import annotations

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


def main() -> None:
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")


if __name__ == "__main__":
    main()

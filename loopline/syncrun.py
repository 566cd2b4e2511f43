"""Running the async API for synchronous callers, also from inside a running event loop.

LangChain's ``invoke`` and ``stream`` are plain blocking calls: they work in a script,
in async code and in a Jupyter cell (where an event loop is already running in the
thread) alike. ``asyncio.run`` refuses to start inside a running loop, so there the
coroutine runs on an event loop of its own in a worker thread while the caller blocks,
as LangChain's sync call blocks.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """The coroutine's result, blocking: ``asyncio.run`` here, or in a worker thread
    when this thread already runs an event loop."""
    if not _loop_running():
        return asyncio.run(coro)
    with ThreadPoolExecutor(1, thread_name_prefix="loopline-sync") as pool:
        return pool.submit(asyncio.run, coro).result()


def iter_sync(source: AsyncIterator[T]) -> Iterator[T]:
    """An async iterator drained on a private event loop: in this thread, or in a worker
    thread when this thread already runs one."""
    loop = asyncio.new_event_loop()
    worker: threading.Thread | None = None
    if _loop_running():
        worker = threading.Thread(target=loop.run_forever, name="loopline-iter", daemon=True)
        worker.start()

    def step(awaitable: Coroutine[Any, Any, Any]) -> Any:
        if worker is None:
            return loop.run_until_complete(awaitable)
        return asyncio.run_coroutine_threadsafe(awaitable, loop).result()

    async def next_item() -> T:
        return await source.__anext__()

    try:
        while True:
            try:
                yield step(next_item())
            except StopAsyncIteration:
                return
    finally:
        step(loop.shutdown_asyncgens())
        if worker is not None:
            loop.call_soon_threadsafe(loop.stop)
            worker.join()
        loop.close()

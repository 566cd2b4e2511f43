"""The threads sync tools run on: never a hostage of a tool that hangs.

LangChain runs a sync tool in the event loop's default executor. A standard
``ThreadPoolExecutor`` has a fixed number of threads, and a thread whose tool hangs holds
one of them for good: enough hung calls and no tool runs any more; its threads are also
joined when the interpreter exits, so a process with a hung tool outlives SIGTERM. Here a
call that its caller gave up on (a timeout, its task ended) is *abandoned*: its thread
runs on, but a new thread takes new work at once, and every thread is a daemon, so a
process ends when its services have stopped. Past ``stuck_max`` abandoned threads the
process is unhealthy (``on_stuck``): its owner hands its work over and exits, for its
supervisor to start it afresh.

A tool that raises ``SystemExit``, ``KeyboardInterrupt`` or another ``BaseException``
fails its call with ``ToolAborted``, an ordinary exception, instead of ending the event
loop.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

log = logging.getLogger("loopline.tools")


class ToolAborted(Exception):
    """A tool raised a ``BaseException`` that is not an ``Exception`` (``SystemExit``,
    ``KeyboardInterrupt``, ``GeneratorExit``, ...): the call's error, not the process's."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"the tool raised {type(cause).__name__}: {cause}")


class _Call(Future[Any]):
    """A submitted call; cancelling it while it runs abandons it (see the module)."""

    def __init__(self, threads: ToolThreads) -> None:
        super().__init__()
        self._pool = threads
        self.abandoned = False

    def cancel(self) -> bool:
        if not super().cancel() and self.running() and not self.abandoned:
            self.abandoned = True
            self._pool.abandon()
        return self.cancelled()


class ToolThreads(ThreadPoolExecutor):
    """A thread for every call in flight: idle threads take new calls, and a new thread
    starts when none is idle (the consumer's concurrency bounds the calls in flight)."""

    def __init__(self, stuck_max: int, on_stuck: Callable[[int], None]) -> None:
        super().__init__(max_workers=1, thread_name_prefix="tool")  # no thread of its own
        self.stuck_max = stuck_max
        self.on_stuck = on_stuck
        self._work: queue.SimpleQueue[tuple[_Call, Callable[[], Any]] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._started = 0
        self.stuck = 0
        self._closed = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        call = _Call(self)
        with self._lock:
            if self._closed:
                raise RuntimeError("the tool threads are shut down")
            if self._idle == 0:
                self._started += 1
                threading.Thread(
                    target=self._worker, name=f"tool-{self._started}", daemon=True
                ).start()
            else:
                self._idle -= 1
        self._work.put((call, lambda: fn(*args, **kwargs)))
        return call

    def abandon(self) -> None:
        with self._lock:
            self.stuck += 1
            stuck = self.stuck
        if stuck > self.stuck_max:
            self.on_stuck(stuck)

    def _worker(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            call, run = item
            self._run(call, run)
            with self._lock:
                if call.abandoned:
                    self.stuck -= 1
                self._idle += 1

    @staticmethod
    def _run(call: _Call, run: Callable[[], Any]) -> None:
        if not call.set_running_or_notify_cancel():
            return
        try:
            result = run()
        except Exception as exc:
            call.set_exception(exc)
        except BaseException as exc:  # SystemExit and kin end the call, not the process
            call.set_exception(ToolAborted(exc))
        else:
            call.set_result(result)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop the idle threads; never wait for a call (a hung one would hold the exit)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, 0
        for _ in range(idle):
            self._work.put(None)

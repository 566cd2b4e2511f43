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
import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from services.lending import lend_this_thread

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
    """At most ``max_running`` threads run calls, as in the standard executor
    (``min(32, cpus + 4)``: more threads than that only contend for the GIL); calls past
    them wait in a queue. An abandoned call's thread leaves the count at once, so a new
    thread takes the queue's work; when its call ends at last, the thread rejoins if there
    is room, else it ends."""

    def __init__(
        self, stuck_max: int, on_stuck: Callable[[int], None], max_running: int | None = None
    ) -> None:
        super().__init__(max_workers=1, thread_name_prefix="tool")  # no thread of its own
        self.stuck_max = stuck_max
        self.on_stuck = on_stuck
        self.max_running = max_running or min(32, (os.cpu_count() or 1) + 4)
        self._work: queue.SimpleQueue[tuple[_Call, Callable[[], Any]] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._healthy = 0
        """Threads that are not abandoned: running a call or waiting for one."""
        self._idle = 0
        self.stuck = 0
        self._closed = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        call = _Call(self)
        with self._lock:
            if self._closed:
                raise RuntimeError("the tool threads are shut down")
            self._work.put((call, lambda: fn(*args, **kwargs)))
            self._start_if_needed()
        return call

    def _start_if_needed(self) -> None:
        """With the lock held: a new thread when queued calls outnumber the idle threads
        and there is room."""
        if self._work.qsize() > self._idle and self._healthy < self.max_running:
            self._healthy += 1
            threading.Thread(target=self._worker, name="tool", daemon=True).start()

    def abandon(self) -> None:
        with self._lock:
            self.stuck += 1
            self._healthy -= 1
            stuck = self.stuck
            self._start_if_needed()
        if stuck > self.stuck_max:
            self.on_stuck(stuck)

    def lend(self) -> None:
        """This thread's call waits on runs of the deployment (``services.lending``):
        it leaves the count, so a new thread may take queued calls meanwhile."""
        with self._lock:
            self._healthy -= 1
            self._start_if_needed()

    def reclaim(self) -> None:
        """The wait ended: the thread counts again (past ``max_running`` for a while:
        the first thread to finish its call then ends, ``_surplus``)."""
        with self._lock:
            self._healthy += 1

    def _surplus(self) -> bool:
        with self._lock:
            if self._healthy <= self.max_running:
                return False
            self._healthy -= 1
            return True

    def _worker(self) -> None:
        lend_this_thread(self)
        while True:
            with self._lock:
                self._idle += 1
            item = self._work.get()
            with self._lock:
                self._idle -= 1
            if item is None:
                return
            call, run = item
            self._run(call, run)
            if call.abandoned and not self._rejoin():
                return
            if not call.abandoned and self._surplus():
                return

    def _rejoin(self) -> bool:
        """An abandoned call ended: its thread counts again, if there is room."""
        with self._lock:
            self.stuck -= 1
            if self._healthy >= self.max_running:
                return False
            self._healthy += 1
            return True

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
        """Stop the threads once they are idle; never wait for a call (a hung one would
        hold the exit)."""
        with self._lock:
            self._closed = True
            threads = self._healthy
        for _ in range(threads):
            self._work.put(None)

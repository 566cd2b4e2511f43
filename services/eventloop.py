"""The event loop a service process runs on: asyncio's own, with one wake-up per batch of
completions from other threads instead of one each.

A sync tool runs in a worker thread (``services.tools.threads``); its result reaches the
event loop through ``call_soon_threadsafe``, which queues the callback and writes a byte
to the loop's self-pipe so that a sleeping ``select`` wakes. asyncio writes that byte for
every callback: under load, thousands of ``send`` system calls a second that each make
the next ``select`` return for one callback (a quarter of the tools service's samples).
One byte pending is enough: the loop runs every queued callback once it wakes. So the
byte is written only when none is pending, and the flag is cleared when the loop has
drained the self-pipe, *after* the read: a thread that found it set meanwhile wrote
nothing, but its callback is in the ready queue (queued before the check), so the loop's
next ``select`` does not sleep. (Cleared before the read, as it first was, the drain
could read the byte of a callback queued after the clear: the flag stayed set with the
pipe empty, and from then on no thread's callback woke the loop; it ran them only when
other I/O woke it. ``tests/test_process_speedups.py`` makes that interleaving happen.)

uvloop coalesces the same way, but a SIGTERM while a sync tool ran in a thread sometimes
left the tool's result undelivered until the graceful timeout:
``tests/test_delivery.py::test_sigterm_lets_an_in_flight_tool_finish`` failed 1 in 3.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class CoalescingEventLoop(asyncio.SelectorEventLoop):
    """asyncio's selector loop whose cross-thread wake-ups coalesce (see the module)."""

    _wake_pending = False

    def _write_to_self(self) -> None:
        if self._wake_pending:
            return  # a byte is on its way: the loop wakes and runs this callback too
        self._wake_pending = True
        super()._write_to_self()  # type: ignore[misc]

    def _read_from_self(self) -> None:
        super()._read_from_self()  # type: ignore[misc]
        # Cleared once the pipe is drained, never before: a thread that saw the flag set
        # until now wrote nothing, and its callback is in the ready queue already (queued
        # before the check), which makes the loop's next select return at once.
        self._wake_pending = False


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on a ``CoalescingEventLoop``."""
    with asyncio.Runner(loop_factory=CoalescingEventLoop) as runner:
        return runner.run(main)

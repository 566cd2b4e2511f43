"""The event loop a service process runs on: asyncio's own, with one wake-up per batch of
completions from other threads instead of one each.

A sync tool runs in a worker thread (``services.tools.threads``); its result reaches the
event loop through ``call_soon_threadsafe``, which queues the callback and writes a byte
to the loop's self-pipe so that a sleeping ``select`` wakes. asyncio writes that byte for
every callback: under load, thousands of ``send`` system calls a second that each make
the next ``select`` return for one callback (a quarter of the tools service's samples).
One byte pending is enough: the loop runs every queued callback once it wakes. So the
byte is written only when none is pending, and the flag is cleared when the loop reads
the self-pipe, *before* it runs the callbacks queued so far, so a callback queued after
that read writes again. (uvloop coalesces the same way, but a SIGTERM while a sync tool
ran in a thread sometimes left the tool's result undelivered until the graceful timeout:
``tests/test_delivery.py::test_sigterm_lets_an_in_flight_tool_finish`` failed 1 in 3.)
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
        # cleared before the read: a callback queued from here on writes its own byte,
        # and one queued before is already in the ready queue the loop runs next
        self._wake_pending = False
        super()._read_from_self()  # type: ignore[misc]


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on a ``CoalescingEventLoop``."""
    with asyncio.Runner(loop_factory=CoalescingEventLoop) as runner:
        return runner.run(main)

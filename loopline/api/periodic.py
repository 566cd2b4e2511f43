"""The loop of the gateway's background work (sweeps, senders, recorders): one round of
work, then a wait, until the gateway stops. A round that fails is logged and the next
one comes as usual: a bad entry or a lost connection never stops the loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable


async def until_stopped(
    stopping: asyncio.Event,
    work: Callable[[], Awaitable[object]],
    every_s: float,
    log: logging.Logger,
    what: str,
) -> None:
    """``work()`` every ``every_s`` seconds until ``stopping`` is set (the wait ends at
    once then); a failure is logged as ``what``."""
    while not stopping.is_set():
        try:
            await work()
        except Exception:
            log.exception(what)
        with contextlib.suppress(TimeoutError):  # the next round, or the stop
            await asyncio.wait_for(stopping.wait(), every_s)

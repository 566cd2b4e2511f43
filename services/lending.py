"""Capacity lent back while a call waits on other work of the deployment.

A tool that runs an agent (a sub-agent, deepagents' ``task`` tool) holds a slot of the
tools service's consumer, and a sync tool a tool thread too, while the sub-agent's run
goes through the same services. With every slot (or thread) held by a parent waiting for
its child, the children's own tool calls would never be read: the deployment would stall.
So the waiting call lends its capacity back for as long as it waits (``waiting_on_runs``),
as a fork-join pool compensates for a blocked worker: the consumer reads one more entry,
the thread pool starts one more thread, and both count it back when the wait ends.

Who holds capacity registers a ``Lender`` for the code it runs: the consumer around each
entry's handler (a context variable, which the handler's tasks and, through
``contextvars.copy_context``, its tool threads inherit), the tool thread pool for its
threads (``lend_this_thread``). Outside a service (a user's own process) nothing is lent.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Protocol


class Lender(Protocol):
    """Capacity that a waiting call gives back (``lend``) and takes again (``reclaim``);
    both may be called from any thread."""

    def lend(self) -> None: ...

    def reclaim(self) -> None: ...


_LENDERS: ContextVar[tuple[Lender, ...]] = ContextVar("loopline_lenders", default=())
_THREAD = threading.local()


@contextlib.contextmanager
def lending(lender: Lender) -> Iterator[None]:
    """Code run inside holds ``lender``'s capacity (a consumer's slot)."""
    token = _LENDERS.set((*_LENDERS.get(), lender))
    try:
        yield
    finally:
        _LENDERS.reset(token)


def lend_this_thread(lender: Lender | None) -> None:
    """This thread holds ``lender``'s capacity (a tool thread), or none any more."""
    _THREAD.lender = lender


@contextlib.contextmanager
def waiting_on_runs() -> Iterator[None]:
    """The code inside waits for runs of the deployment: what its caller holds is lent
    back meanwhile."""
    lenders = [*_LENDERS.get()]
    thread_lender: Lender | None = getattr(_THREAD, "lender", None)
    if thread_lender is not None:
        lenders.append(thread_lender)
    for lender in lenders:
        lender.lend()
    try:
        yield
    finally:
        for lender in reversed(lenders):
            lender.reclaim()

"""Tools the benchmarks name by import path (``benchmarks.tools:NAME``), so the tools
service processes import them as a deployment would.

``noop`` and ``blob`` are declared idempotent, as they are: running them again is
harmless, so the tools service takes no lease before running them. ``noop_once`` is the
same no-op left undeclared, for the figure of what a lease costs (one round trip).
"""

from __future__ import annotations

from loopline import idempotent


@idempotent
def noop() -> str:
    """Do nothing and say so."""
    return "ok"


@idempotent
def blob(n: int) -> str:
    """Return n bytes of text (a large tool output)."""
    return "x" * n


def noop_once() -> str:
    """Do nothing and say so."""
    return "ok"


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b

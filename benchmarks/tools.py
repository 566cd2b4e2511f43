"""Tools the benchmarks name by import path (``benchmarks.tools:NAME``), so the tools
service processes import them as a deployment would."""

from __future__ import annotations


def noop() -> str:
    """Do nothing and say so."""
    return "ok"


def blob(n: int) -> str:
    """Return n bytes of text (a large tool output)."""
    return "x" * n

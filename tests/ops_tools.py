"""Tools the operations tests name by import path (``tests.ops_tools:NAME``)."""

from __future__ import annotations

import time
from pathlib import Path


def wait_for_file(path: str, timeout: float = 120.0) -> str:
    """Hold the tool call until ``path`` exists (a gate the test opens), then answer."""
    deadline = time.monotonic() + timeout
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gate {path} was never opened")
        time.sleep(0.05)
    return "gate opened"

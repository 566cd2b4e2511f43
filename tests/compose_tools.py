"""Tools for the compose test (``tests/test_compose.py``), run by the tools containers and
named by import path (``tests.compose_tools:NAME``) as a user's deployment names its own."""

from __future__ import annotations

import socket
import time


def where(x: int) -> str:
    """Name the host that ran this call: in a container, its short container id."""
    # A short stay, so that a replica that took this call is busy for a moment and the
    # next call goes to another; the test proves the replicas share the work.
    time.sleep(0.05)
    return socket.gethostname()

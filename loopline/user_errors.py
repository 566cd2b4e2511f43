"""Errors a user of the Python API can fix, shown as one line when nothing catches them.

A script that calls ``create_agent(...).invoke(...)`` without a model endpoint, or with a
tool path that does not import, should end saying what to change, as the command line
does, not in a traceback through loopline's internals. ``install`` (run when ``loopline``
is imported) wraps ``sys.excepthook``: an uncaught ``ConfigurationError`` prints
``loopline: error: MESSAGE`` on one line; every other exception, and every exception
while ``LOOPLINE_TRACEBACK=1``, goes to the hook that was there before. Code that catches
the error sees it unchanged.
"""

from __future__ import annotations

import os
import sys
from types import TracebackType

from services.errors import ConfigurationError

TRACEBACK_ENV = "LOOPLINE_TRACEBACK"


def one_line(exc: BaseException) -> str:
    """The message of a user error as one line, with no secret in it."""
    from services.secrets import redact

    return "loopline: error: " + redact(" ".join(str(exc).split()))


def install() -> None:
    """Wrap the current ``sys.excepthook`` (once per process)."""
    previous = sys.excepthook
    if getattr(previous, "_loopline", False):
        return

    def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        if isinstance(exc, ConfigurationError) and os.environ.get(TRACEBACK_ENV) != "1":
            print(one_line(exc), file=sys.stderr)
            return
        previous(kind, exc, tb)

    hook._loopline = True  # type: ignore[attr-defined]
    sys.excepthook = hook

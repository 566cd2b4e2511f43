"""The two test tiers, and the fast tier's promise kept.

A test marked ``fast`` (``pytest.mark.fast``, or a module's ``pytestmark``) calls the
handlers, the transitions and the runtime in this process, on the session's Redis: no
service process, no CLI subprocess, no compose. Everything else is the system tier.
``python -m pytest -m fast`` runs the fast tier alone.

The promise is enforced, so the tier cannot drift: while a fast test sets up, runs or
tears down, starting any OS process (``subprocess``, ``asyncio``'s subprocesses, which
go through ``subprocess.Popen``, ``os.fork``, ``os.posix_spawn``, ``os.system``) raises
``SubprocessInFastTest``, and the test fails even if the code under test swallowed it.
The session's own Redis (an embedded server when ``REDIS_URL`` is not set) is started
under ``subprocess_allowed()``: every tier shares it.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import platform
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

FAST = "fast"
"""The marker (registered in pyproject.toml's pytest markers)."""


class SubprocessInFastTest(RuntimeError):
    """A fast test started an OS process."""


class SubprocessGuard:
    """Refuses new OS processes while armed (a fast test's setup, call or teardown)."""

    def __init__(self) -> None:
        self.armed = False
        self.allowed = 0
        self.violations: list[str] = []

    def check(self, what: str) -> None:
        if self.armed and not self.allowed:
            self.violations.append(what)
            raise SubprocessInFastTest(
                f"a test marked {FAST!r} started a process ({what}): keep it in-process, "
                "or move it to the system tier (drop the marker)"
            )

    @contextlib.contextmanager
    def arm(self) -> Iterator[list[str]]:
        """Armed for one phase of a fast test; yields the refusals, as they happen."""
        self.armed, self.violations = True, []
        try:
            with _patched(self):
                yield self.violations
        finally:
            self.armed = False

    @contextlib.contextmanager
    def allow(self) -> Iterator[None]:
        """What every tier shares (the session's Redis) may start its process."""
        self.allowed += 1
        try:
            yield
        finally:
            self.allowed -= 1


GUARD = SubprocessGuard()


def subprocess_allowed() -> contextlib.AbstractContextManager[None]:
    return GUARD.allow()


def warm_up() -> None:
    """Run, before any test, the probes libraries make once per process by starting one,
    so a fast test never starts them: ``platform.platform()`` runs ``uname -p`` (the
    OpenAI client puts it in its headers) and caches the answer; importing ``trio`` (the
    HTTP client's transport does, lazily) runs ``ldconfig -p``."""
    with subprocess_allowed():
        platform.platform()
        with contextlib.suppress(ImportError):
            importlib.import_module("trio")


def _refusing(guard: SubprocessGuard, what: str, original: Callable[..., Any]) -> Any:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        guard.check(what)
        return original(*args, **kwargs)

    return refuse


@contextlib.contextmanager
def _patched(guard: SubprocessGuard) -> Iterator[None]:
    targets: list[tuple[Any, str]] = [
        (subprocess.Popen, "__init__"),
        (asyncio, "create_subprocess_exec"),
        (asyncio, "create_subprocess_shell"),
        (os, "fork"),
        (os, "system"),
        (os, "posix_spawn"),
        (os, "posix_spawnp"),
    ]
    with contextlib.ExitStack() as undo:
        for owner, name in targets:
            original = getattr(owner, name, None)
            if original is None:
                continue
            label = f"{getattr(owner, '__name__', owner)}.{name}"
            setattr(owner, name, _refusing(guard, label, original))
            undo.callback(setattr, owner, name, original)
        yield

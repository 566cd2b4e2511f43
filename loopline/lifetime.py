"""Child processes and temporary paths that go when this process goes, however it goes.

``atexit`` runs on a clean exit only. SIGKILL, the kernel's OOM killer, a test runner's
timeout or a container runtime that gives up waiting run nothing, and a server started as
a child lives on with parent 1, holding its port and its data, until someone kills it by
hand. So every child loopline starts (the embedded Valkey server; the scripted model
servers, service processes and Redis servers of ``loopline.testing`` and the benchmarks)
is started by :func:`spawn`:

- on Linux the child asks the kernel for SIGKILL when its parent dies
  (``PR_SET_PDEATHSIG``, set between fork and exec), then checks that the process that
  forked it is still its parent: a parent that died before the call would never signal;
- a watchdog process (``loopline/watchdog.py``, one per process, started on first use)
  holds the read end of a pipe whose only write end is this process's. When the pipe
  closes this process is gone: the watchdog kills the children still listed (where
  PDEATHSIG is not available, that is what stops them), waits until they are gone and
  removes the temporary files and folders registered with :func:`remove_when_gone`.

PDEATHSIG fires when the *thread* that forked the child ends, not the process. So every
child is forked from the main thread, or from one spawner thread that lives as long as the
process: a server started from a short-lived worker thread must not die with that thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "BoundProcess",
    "forget",
    "remove_now",
    "remove_when_gone",
    "spawn",
    "temporary_directory",
]

T = TypeVar("T")

_PR_SET_PDEATHSIG = 1
_WATCHDOG_SCRIPT = Path(__file__).with_name("watchdog.py")


def _find_prctl() -> Any:
    """libc's ``prctl``, resolved before any fork (the child only calls it), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


_PRCTL = _find_prctl()


def _die_with(parent: int) -> Callable[[], None] | None:
    """What the child runs before exec: SIGKILL when ``parent`` dies, checked against the
    race where it died already."""
    prctl = _PRCTL
    if prctl is None:
        return None

    def in_child() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # orphaned before the call: no signal would ever come
            os.kill(os.getpid(), signal.SIGKILL)

    return in_child


class _Watchdog:
    """This process's side of the watchdog: what it was told, and the pipe it holds."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner = 0  # the pid that started the watchdog: a forked child needs its own
        self._pipe: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._pids: set[int] = set()
        self._paths: set[str] = set()

    def ensure(self) -> None:
        with self._lock:
            self._own()
            self._send(None)

    def pid(self, pid: int, *, listed: bool) -> None:
        with self._lock:
            self._own()
            (self._pids.add if listed else self._pids.discard)(pid)
            self._send(b"%spid %d\n" % (b"+" if listed else b"-", pid))

    def path(self, path: str, *, listed: bool) -> None:
        if "\n" in path:
            raise ValueError(f"a path with a line break cannot be registered: {path!r}")
        with self._lock:
            self._own()
            (self._paths.add if listed else self._paths.discard)(path)
            self._send((b"+path " if listed else b"-path ") + os.fsencode(path) + b"\n")

    def _own(self) -> None:
        """In a forked child, what it inherited is its parent's watchdog: drop it."""
        if self._owner and self._owner != os.getpid():
            if self._pipe is not None:
                with contextlib.suppress(OSError):
                    os.close(self._pipe)
            self._owner, self._pipe, self._process = 0, None, None
            self._pids.clear()
            self._paths.clear()

    def _send(self, line: bytes | None) -> None:
        if self._pipe is None:
            self._start()  # tells the new watchdog everything, this line included
            return
        if line is None:
            return
        try:
            os.write(self._pipe, line)
        except BrokenPipeError:  # someone killed the watchdog: start another
            os.close(self._pipe)
            self._start()

    def _start(self) -> None:
        read, write = os.pipe()  # not inheritable: no other child keeps the pipe open
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-S", str(_WATCHDOG_SCRIPT)],
                stdin=read,
                stdout=subprocess.DEVNULL,  # never hold a pipe its owner's caller reads
                stderr=subprocess.DEVNULL,
                cwd="/",
                start_new_session=True,
            )
        finally:
            os.close(read)
        self._pipe, self._owner = write, os.getpid()
        lines = [b"+pid %d\n" % pid for pid in self._pids]
        lines += [b"+path " + os.fsencode(path) + b"\n" for path in self._paths]
        if lines:
            os.write(write, b"".join(lines))


_watchdog = _Watchdog()


class _Spawner:
    """One thread, living as long as the process, that forks the children asked for off
    the main thread (see the module's docstring: PDEATHSIG follows the forking thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner = 0
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()

    def run(self, job: Callable[[], T]) -> T:
        if threading.current_thread() is threading.main_thread():
            return job()
        with self._lock:
            if self._owner != os.getpid():  # not started yet, or lost in a fork
                self._jobs = queue.SimpleQueue()
                threading.Thread(target=self._serve, name="loopline-spawner", daemon=True).start()
                self._owner = os.getpid()
        done: Future[T] = Future()
        self._jobs.put((job, done))
        return done.result()

    def _serve(self) -> None:
        jobs = self._jobs
        while True:
            job, done = jobs.get()
            try:
                done.set_result(job())
            except BaseException as exc:
                done.set_exception(exc)


_spawner = _Spawner()


class BoundProcess(subprocess.Popen[bytes]):
    """A child started by :func:`spawn`. Once this process has reaped it (``wait``, or a
    ``poll`` that sees it ended), the watchdog forgets it, so a pid the system hands out
    again is never signalled."""

    _forgotten = False

    def poll(self) -> int | None:
        code = super().poll()
        if code is not None:
            self._reaped()
        return code

    def wait(self, timeout: float | None = None) -> int:
        code = super().wait(timeout)
        self._reaped()
        return code

    def _reaped(self) -> None:
        if not self._forgotten:
            self._forgotten = True
            _watchdog.pid(self.pid, listed=False)


def spawn(args: Sequence[str | os.PathLike[str]], **popen: Any) -> BoundProcess:
    """``subprocess.Popen(args, **popen)``, the child bound to this process's life."""
    _watchdog.ensure()  # before the child exists: it never runs unknown to the watchdog
    in_child = _die_with(os.getpid())
    process = _spawner.run(lambda: BoundProcess(args, preexec_fn=in_child, **popen))
    _watchdog.pid(process.pid, listed=True)
    return process


def remove_when_gone(path: str | os.PathLike[str]) -> Path:
    """Remove this temporary file or folder once this process (and what it spawned) is
    gone, if it has not removed it itself (:func:`remove_now`)."""
    resolved = Path(path).resolve()
    _watchdog.path(str(resolved), listed=True)
    return resolved


def forget(path: str | os.PathLike[str]) -> None:
    """This path is no longer the watchdog's to remove."""
    _watchdog.path(str(Path(path).resolve()), listed=False)


def remove_now(path: str | os.PathLike[str]) -> None:
    """Remove a path registered with :func:`remove_when_gone` and forget it."""
    target = Path(path)
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target, ignore_errors=True)
    else:
        target.unlink(missing_ok=True)
    forget(target)


def temporary_directory(prefix: str) -> Path:
    """A new temporary folder that goes when this process goes, however it goes."""
    return remove_when_gone(tempfile.mkdtemp(prefix=prefix))

"""The watchdog of one loopline process: run as ``python -I -S watchdog.py`` by
``loopline.lifetime``, never imported by it (standard library only, so it starts in a few
milliseconds and runs wherever the interpreter does).

Its standard input is the read end of a pipe whose only write end belongs to the process
that started it (the owner). The owner writes one line per change::

    +pid 1234      a child to kill and wait for when the owner is gone
    -pid 1234      that child ended and was reaped by the owner: forget it
    +path /tmp/x   a file or folder to remove once the owner and its children are gone
    -path /tmp/x   the owner removed it itself: forget it

End of file means the owner is gone, however it went (a clean exit, SIGKILL, the OOM
killer) since the kernel closes a dead process's descriptors. The watchdog then kills the
children still listed (on Linux they already got SIGKILL from ``PR_SET_PDEATHSIG``; on
other systems this is what stops them), waits until they are gone (a server must not
write into a folder being removed), removes the paths and exits.

It runs in a session of its own and ignores SIGINT and SIGHUP, so a Ctrl-C in the
owner's terminal or a kill of the owner's process group does not take it down before it
has cleaned up.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import sys
import time

WAIT_S = 1.5
"""How long to wait for the children to be gone before removing the paths anyway."""


class Children:
    """The owner's listed children, each by a pidfd where the system has them: a pidfd
    names one process for good, so a reused pid is never signalled."""

    def __init__(self) -> None:
        self.listed: dict[int, int | None] = {}

    def add(self, pid: int) -> None:
        handle: int | None = None
        try:
            handle = os.pidfd_open(pid)
        except ProcessLookupError:  # ended and reaped already: the pid may be another's now
            return
        except (AttributeError, OSError):  # no pidfds here: signal by pid
            handle = None
        self.listed[pid] = handle

    def discard(self, pid: int) -> None:
        handle = self.listed.pop(pid, None)
        if handle is not None:
            os.close(handle)

    def kill(self) -> None:
        for pid, handle in self.listed.items():
            with contextlib.suppress(OSError):  # gone already
                if handle is not None:
                    signal.pidfd_send_signal(handle, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGKILL)

    def wait_gone(self, deadline: float) -> None:
        for pid, handle in self.listed.items():
            while time.monotonic() < deadline and self._alive(pid, handle):
                if handle is not None:
                    poller = select.poll()
                    poller.register(handle, select.POLLIN)
                    poller.poll(max(0.0, deadline - time.monotonic()) * 1000)
                else:
                    time.sleep(0.01)

    @staticmethod
    def _alive(pid: int, handle: int | None) -> bool:
        if handle is not None:  # readable once the process has ended
            return not select.select([handle], [], [], 0)[0]
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # the pid belongs to another user's process now
            return False
        return True


def remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def read_until_owner_gone(children: Children, paths: dict[str, None]) -> None:
    for raw in sys.stdin.buffer:
        verb, _, arg = raw.rstrip(b"\n").partition(b" ")
        if verb == b"+pid":
            children.add(int(arg))
        elif verb == b"-pid":
            children.discard(int(arg))
        elif verb == b"+path":
            paths[os.fsdecode(arg)] = None
        elif verb == b"-path":
            paths.pop(os.fsdecode(arg), None)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    children = Children()
    paths: dict[str, None] = {}
    read_until_owner_gone(children, paths)
    children.kill()
    children.wait_gone(time.monotonic() + WAIT_S)
    for path in paths:
        remove(path)


if __name__ == "__main__":
    main()

"""The fast tier's guard (``tests.tiers``): while armed, every way of starting an OS
process is refused, and recorded even when the caller swallows the refusal."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess

import pytest

from tests.tiers import SubprocessGuard, SubprocessInFastTest

pytestmark = pytest.mark.fast


def test_every_way_of_starting_a_process_is_refused_and_recorded() -> None:
    guard = SubprocessGuard()
    before = (subprocess.Popen.__init__, os.fork, asyncio.create_subprocess_exec)
    with guard.arm() as refused:
        with pytest.raises(SubprocessInFastTest, match="marked 'fast' started a process"):
            subprocess.run(["true"], check=True)
        with pytest.raises(SubprocessInFastTest):
            asyncio.run(asyncio.create_subprocess_exec("true"))  # type: ignore[arg-type]
        with pytest.raises(SubprocessInFastTest):
            os.fork()
        with pytest.raises(SubprocessInFastTest):
            os.system("true")
        with contextlib.suppress(Exception):  # code under test that hides the refusal
            subprocess.check_output(["true"])
    assert refused == [
        "Popen.__init__",
        "asyncio.create_subprocess_exec",
        "os.fork",
        "os.system",
        "Popen.__init__",
    ]
    # disarmed, everything is as it was
    assert (subprocess.Popen.__init__, os.fork, asyncio.create_subprocess_exec) == before


def test_what_both_tiers_share_may_start_its_process_only_when_allowed() -> None:
    guard = SubprocessGuard()
    with guard.allow():
        guard.check("the session's Redis")  # not armed, and allowed: nothing happens
    guard.armed, guard.violations = True, []
    with guard.allow():
        guard.check("the session's Redis")
    with pytest.raises(SubprocessInFastTest):
        guard.check("a service process")
    assert guard.violations == ["a service process"]

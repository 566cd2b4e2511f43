"""How long a tool call may run: its timeout, and the end of its task.

Every call runs inside ``CallLimits.limit``: an ``asyncio.timeout`` of the call's
``tool_timeout_s`` (per tool in the agent spec, else the agent's, else
``LOOPLINE_TOOL_TIMEOUT_S``). Calls running longer than a second are checked, once a
second for all of them in one round trip, against their task: a call whose task ended
(cancelled, past its deadline, failed) is stopped at once, since nobody will read its
result. A stopped async tool is cancelled; a sync tool's thread is abandoned
(``services.tools.threads``). Either way its consumer slot is free for new work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from contracts.agent import AgentSpec
from services.runtime import Runtime

log = logging.getLogger("loopline.tools")

CHECK_EVERY_S = 1.0
"""How often running calls are checked against their task (and how old a call must be
before it is): fast calls never cost a check."""


class TaskEnded(Exception):
    """The call's task ended while the call ran: its result is not wanted."""


def timeout_of(spec: AgentSpec, tool_name: str, default_s: float) -> float:
    found = spec.tool_timeouts.get(tool_name, spec.tool_timeout_s)
    return float(found) if found is not None else default_s


@dataclass(eq=False)
class _Running:
    task_id: str
    started: float
    scope: asyncio.Timeout | None = None
    task_ended: bool = field(default=False)


class CallLimits:
    """The tool calls running in this process, and the job that stops unwanted ones."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self._running: set[_Running] = set()
        self._job: asyncio.Task[None] | None = None

    @contextlib.asynccontextmanager
    async def limit(self, task_id: str, timeout_s: float) -> AsyncIterator[None]:
        """Run the body within ``timeout_s``; raises ``TimeoutError`` past it and
        ``TaskEnded`` when the task ends first."""
        running = _Running(task_id, time.monotonic())
        self._running.add(running)
        try:
            async with asyncio.timeout(timeout_s) as scope:
                running.scope = scope
                yield
        except TimeoutError:
            if running.scope is None or not running.scope.expired():
                raise  # the tool's own TimeoutError
            if running.task_ended:
                raise TaskEnded(f"task {task_id} ended while the call ran") from None
            raise TimeoutError(f"the call did not finish within {timeout_s:g} s") from None
        finally:
            self._running.discard(running)

    def start(self) -> None:
        self._job = asyncio.create_task(self._watch(), name="tool-call-limits")

    async def stop(self) -> None:
        if self._job is not None:
            self._job.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._job

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(CHECK_EVERY_S)
            try:
                await self.stop_unwanted()
            except asyncio.CancelledError:
                raise
            except Exception:  # Redis restarting: check again shortly
                log.warning("checking running tool calls failed", exc_info=True)

    async def stop_unwanted(self) -> int:
        """Stop the calls (older than a check interval) whose task is no longer running."""
        due = time.monotonic() - CHECK_EVERY_S
        old = [r for r in self._running if r.started <= due and r.scope is not None]
        if not old:
            return 0
        task_ids = sorted({r.task_id for r in old})
        async with self.rt.redis.pipeline(transaction=False) as pipe:
            for task_id in task_ids:
                pipe.hget(self.rt.names.task_state(task_id), "status")
            statuses: list[Any] = await pipe.execute()
        ended = {t for t, s in zip(task_ids, statuses, strict=True) if s != b"running"}
        stopped = 0
        loop_now = asyncio.get_running_loop().time()
        for running in old:
            if running.task_id in ended and running.scope is not None:
                running.task_ended = True
                running.scope.reschedule(loop_now)
                stopped += 1
        return stopped

"""The callback handlers of runs started in this process, for the tools run in it.

LangChain's ``config["callbacks"]`` are objects of the caller's process: they cannot
travel on the bus. LangGraph runs an agent's tools, and a sub-agent a tool invokes (its
subgraph), under the caller's callback manager, so a handler sees the sub-agent's runs
beside the parent's. Here the caller's agent holds its run's callbacks under the run's
task id while the run goes on (``holding``); a tool call of that task, run by the tools
service of the same process (the embedded default), gets them in its config
(``with_callbacks``), and an agent the tool invokes takes them as LangGraph's
``ensure_config`` takes the ambient config's. A deployed tools service (another
process) holds none: there, the caller's handlers see only the runs of its own process.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

_HELD: dict[str, Any] = {}
"""Task id -> the callbacks (a ``BaseCallbackManager`` or a list of handlers) its tools
run under. A plain dict: set and read from any thread, each key by one run."""


@contextlib.contextmanager
def holding(task_id: str, callbacks: Any) -> Iterator[None]:
    """The tools of task ``task_id`` run under ``callbacks`` while inside (none given:
    nothing is held)."""
    if callbacks is None:
        yield
        return
    _HELD[task_id] = callbacks
    try:
        yield
    finally:
        _HELD.pop(task_id, None)


def held_for(task_id: str) -> Any:
    """The callbacks the caller of task ``task_id`` holds in this process, or None."""
    return _HELD.get(task_id) if task_id else None


def with_callbacks(run_config: Mapping[str, Any], task_id: str) -> Mapping[str, Any]:
    """``run_config`` (a node's config of task ``task_id``) with the callbacks its caller
    holds in this process, if any."""
    callbacks = _HELD.get(task_id)
    if callbacks is None:
        return run_config
    return {**run_config, "callbacks": callbacks}

"""Human in the loop on the bus: LangChain's own ``HumanInTheLoopMiddleware`` runs in the
loop, and its ``interrupt()`` is answered here instead of by a LangGraph checkpointer.

The first time, ``interrupt`` raises ``Interrupted`` with the HITLRequest: the loop stores
the model's reply and waits (no stream entry pending, no compute held, any service may
restart). When decisions arrive, the same after_model hooks run again with ``interrupt``
returning them, so approvals, edits, rejections and responses act exactly as in LangChain
(an edited call runs with the edited arguments and the model is told, through the
middleware's own ``wrap_tool_call`` in the tools consumer).
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_decisions: contextvars.ContextVar[list[dict[str, Any]] | None] = contextvars.ContextVar(
    "loopline_hitl_decisions", default=None
)
_in_loop: contextvars.ContextVar[bool] = contextvars.ContextVar("loopline_in_loop", default=False)
_original: Any = None


class Interrupted(Exception):
    """A hook asked for a human decision."""

    def __init__(self, value: Any) -> None:
        super().__init__("waiting for a human decision")
        self.value = value


def _interrupt(value: Any, *args: Any, **kwargs: Any) -> Any:
    if not _in_loop.get():  # a LangChain agent in the same process: LangGraph's own
        return _original(value, *args, **kwargs)
    decisions = _decisions.get()
    if decisions is None:
        raise Interrupted(value)
    return {"decisions": decisions}


def install() -> None:
    """Route LangChain's HITL ``interrupt`` calls to loopline (idempotent)."""
    global _original
    from langchain.agents.middleware import human_in_the_loop

    current = human_in_the_loop.interrupt  # type: ignore[attr-defined]
    if current is _interrupt:
        return
    _original = current
    setattr(human_in_the_loop, "interrupt", _interrupt)  # noqa: B010 (patching a module global)


@contextmanager
def answering(decisions: list[dict[str, Any]] | None) -> Iterator[None]:
    token = _decisions.set(decisions)
    active = _in_loop.set(True)
    try:
        yield
    finally:
        _in_loop.reset(active)
        _decisions.reset(token)


def as_jsonable(value: Any) -> dict[str, Any]:
    """The HITLRequest as plain JSON (it is a TypedDict of lists and strings)."""
    import json

    return dict(json.loads(json.dumps(value, default=str)))

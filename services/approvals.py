"""Human in the loop on the bus: LangChain's own ``HumanInTheLoopMiddleware`` runs in the
loop, and its ``interrupt()`` is answered here instead of by a LangGraph checkpointer.

The first time, ``interrupt`` raises ``Interrupted`` with the HITLRequest: the loop stores
the model's reply and waits (no stream entry pending, no compute held, any service may
restart). When decisions arrive, the same after_model hooks run again with ``interrupt``
returning them, so approvals, edits, rejections and responses act exactly as in LangChain
(an edited call runs with the edited arguments and the model is told, through the
middleware's own ``wrap_tool_call`` in the tools consumer).

With ``interrupt_mode="per_call"`` LangChain interrupts inside ``wrap_tool_call``, so in
the tools consumer (``answering_call``): the first time ``interrupt`` raises
``Interrupted`` with the ToolApprovalRequest and the call is parked; on resume it returns
the human's decision, checked against the interrupt's ``response_schema`` as LangGraph
checks a resume value (``DecisionRefused`` when it does not fit).
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from langgraph.errors import GraphBubbleUp

_decisions: contextvars.ContextVar[list[dict[str, Any]] | None] = contextvars.ContextVar(
    "loopline_hitl_decisions", default=None
)
_in_loop: contextvars.ContextVar[bool] = contextvars.ContextVar("loopline_in_loop", default=False)
_NO_CALL: Any = object()
# Set only while the tools consumer runs one call's wrap_tool_call chain: None = not
# decided yet (interrupt parks the call), else the decision interrupt() returns.
_call_decision: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "loopline_hitl_call_decision", default=_NO_CALL
)
_original: Any = None
_original_runtime: Any = None


# LangChain's retry / fallback middleware re-raise GraphBubbleUp untouched (that is how
# LangGraph's own interrupt passes through them); loopline's interrupts must too.
class Interrupted(GraphBubbleUp):
    """A hook asked for a human decision."""

    def __init__(self, value: Any, response_schema: dict[str, Any] | None = None) -> None:
        super().__init__("waiting for a human decision")
        self.value = value
        self.response_schema = response_schema


class DecisionRefused(GraphBubbleUp):
    """A per-call decision that does not fit the call's ``response_schema``: as with
    LangGraph's invalid resume, nothing is applied and the call can be answered again."""


def _schema_json(schema: Any) -> dict[str, Any] | None:
    """The response schema as JSON Schema, as LangGraph surfaces it to clients."""
    if schema is None or isinstance(schema, dict):
        return schema
    from pydantic import TypeAdapter

    try:
        return dict(as_jsonable(TypeAdapter(schema).json_schema()))
    except Exception:  # a schema pydantic cannot render: the request still goes out
        return None


def _checked(schema: Any, decision: Any) -> Any:
    """What LangGraph's interrupt returns on resume: the answer validated against a typed
    ``response_schema`` (a JSON Schema dict is shown to clients but not enforced)."""
    if schema is None or isinstance(schema, dict):
        return decision
    from pydantic import TypeAdapter, ValidationError

    try:
        return TypeAdapter(schema).validate_python(decision)
    except ValidationError as exc:
        raise DecisionRefused(str(exc)) from exc


def _interrupt(value: Any, *args: Any, **kwargs: Any) -> Any:
    decision = _call_decision.get()
    if decision is not _NO_CALL:  # a per-call interrupt in the tools consumer
        schema = kwargs.get("response_schema", args[0] if args else None)
        if decision is None:
            raise Interrupted(value, _schema_json(schema))
        return _checked(schema, decision)
    if not _in_loop.get():  # a LangChain agent in the same process: LangGraph's own
        return _original(value, *args, **kwargs)
    decisions = _decisions.get()
    if decisions is None:
        raise Interrupted(value)
    return {"decisions": decisions}


def _get_runtime(*args: Any, **kwargs: Any) -> Any:
    """Per-call mode builds the request with LangGraph's ``get_runtime()``, which needs a
    graph run; in the tools consumer it gets the runtime loopline gives hooks."""
    if _call_decision.get() is _NO_CALL:
        return _original_runtime(*args, **kwargs)
    from services.hooks import lg_runtime

    return lg_runtime()


def install() -> None:
    """Route LangChain's HITL ``interrupt`` calls to loopline (idempotent)."""
    global _original, _original_runtime
    from langchain.agents.middleware import human_in_the_loop

    current = human_in_the_loop.interrupt  # type: ignore[attr-defined]
    if current is _interrupt:
        return
    _original = current
    _original_runtime = human_in_the_loop.get_runtime  # type: ignore[attr-defined]
    setattr(human_in_the_loop, "interrupt", _interrupt)  # noqa: B010 (patching a module global)
    setattr(human_in_the_loop, "get_runtime", _get_runtime)  # noqa: B010


@contextmanager
def answering(decisions: list[dict[str, Any]] | None) -> Iterator[None]:
    token = _decisions.set(decisions)
    active = _in_loop.set(True)
    try:
        yield
    finally:
        _in_loop.reset(active)
        _decisions.reset(token)


@contextmanager
def answering_call(decision: dict[str, Any] | None) -> Iterator[None]:
    """Run one tool call's wrap_tool_call chain: a per-call interrupt parks it (no
    decision yet) or gets ``decision``."""
    token = _call_decision.set(decision)
    try:
        yield
    finally:
        _call_decision.reset(token)


def as_jsonable(value: Any) -> dict[str, Any]:
    """The HITLRequest as plain JSON (it is a TypedDict of lists and strings)."""
    import json

    return dict(json.loads(json.dumps(value, default=str)))

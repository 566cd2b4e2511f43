"""A failed run's error as LangGraph's server reports it: ``{"error": <the exception's
class name>, "message": ...}``, in a stream's ``error`` event, in ``/wait`` and
``/join`` (``__error__``), on the thread (``error``) and in the protocol's ``failed``
lifecycle.

LangGraph's server (``langgraph_api.serde``) shows the message only for exceptions it
deems safe to show, Python's common built-in errors and LangGraph's own; any other
exception (a provider's ``OpenAIAPIError``, a tool's own class) keeps its class name and
has its message replaced, so a stack's internals (URLs, keys in an error text) never reach
a client. The gateway follows the same rule. A task that failed without an exception of
the agent's code (a deadline, a refused event, lost state) has no class to name: it keeps
loopline's ``TaskFailed`` with its reason.
"""

from __future__ import annotations

from langgraph.errors import (
    EmptyInputError,
    GraphBubbleUp,
    InvalidUpdateError,
    TaskNotFound,
)

from contracts.events import DecisionsRefused, ExceptionInfo, TaskFailed
from loopline.errors import exception_class

HIDDEN_MESSAGE = "An internal error occurred"
"""What LangGraph's server shows for the message of an exception not in ``SHOWN``."""

SHOWN: tuple[type[BaseException], ...] = (
    ValueError,
    TypeError,
    KeyError,
    AttributeError,
    RuntimeError,
    RecursionError,
    TimeoutError,
    InvalidUpdateError,
    GraphBubbleUp,
    EmptyInputError,
    TaskNotFound,
)
"""The exceptions (and their subclasses) whose message LangGraph's server shows."""

NO_EXCEPTION = "TaskFailed"
"""The name of a failure that was not an exception of the agent's code."""


def run_error(event: TaskFailed | DecisionsRefused) -> dict[str, str]:
    """The error of a run that ended with ``event``."""
    info = event.exception
    if info is None:
        if isinstance(event, DecisionsRefused):  # LangGraph's resume raises a ValueError
            return {"error": "ValueError", "message": event.reason}
        return {"error": NO_EXCEPTION, "message": event.reason}
    return {"error": info.name, "message": info.message if shown(info) else HIDDEN_MESSAGE}


def shown(info: ExceptionInfo) -> bool:
    """LangGraph's server would show this exception's message. A class the gateway cannot
    find (a tool's module it does not import) is not one of the shown ones: those are
    all built in or LangGraph's."""
    cls = exception_class(info.type)
    return cls is not None and issubclass(cls, SHOWN)

"""The exception a failed task raises from ``invoke``: the original's class and message
where that class can be found here, else ``TaskFailedError``.

LangChain's ``create_agent`` lets a tool's or the model's exception propagate out of
``invoke``; loopline's services report it in ``TaskFailed.exception`` (class path and
message) and the client raises it again. What arrives on the bus only *names* a class,
so the name chooses no code:

- the class is looked up among Python's built-in exceptions, in modules this process has
  already imported, or in modules inside its allow-list (``LOOPLINE_ALLOWED_MODULES``,
  ``services.spec.imports``), and only through the module's and classes' own
  dictionaries (no module ``__getattr__``, no descriptor runs);
- it is taken only when it is an ``Exception`` subclass (never ``SystemExit`` or
  ``KeyboardInterrupt``);
- the only call is the class with the message; when its constructor wants more (an
  ``openai.InternalServerError`` wants the HTTP response), the instance is made by
  ``BaseException.__new__`` with the message as its one argument, running none of the
  class's code. Such an instance has the type and message but not the attributes its
  constructor would set.

Anything else raises ``TaskFailedError``, whose ``error_type`` keeps the class's name.

Where the service that failed the task runs in the client's process (the embedded
default), nothing is rebuilt: ``invoke`` raises the very exception the tool, the model
or the hook raised (``services.failures.original``), its attributes and class intact
(one defined inside a function included), as LangChain's does.
"""

from __future__ import annotations

import builtins
import importlib
import sys
from typing import Any

from pydantic import ValidationError

from contracts.events import (
    DecisionsRefused,
    ExceptionInfo,
    TaskFailed,
    ToolInterrupted,
    ValidationDetails,
)
from services.failures import original
from services.spec import imports


class TaskFailedError(RuntimeError):
    """The task ended without an answer; ``event`` says why. ``error_type``: the name of
    the exception's class when the task failed with one that could not be raised here."""

    def __init__(self, event: TaskFailed) -> None:
        super().__init__(event.reason)
        self.event = event
        self.error_type = event.exception.name if event.exception is not None else None


def failure_of(event: TaskFailed) -> Exception:
    """What ``invoke`` raises for ``event``: the original exception where possible."""
    info = event.exception
    if info is None:
        return TaskFailedError(event)
    same = original(event.task_id, info)
    if isinstance(same, Exception):  # the services run in this process: the very one
        return same
    cls = exception_class(info.type)
    rebuilt = _instance(cls, info) if cls is not None else None
    if rebuilt is None:
        return TaskFailedError(event)
    rebuilt.add_note(f"loopline: task {event.task_id} failed at step {event.step}")
    return rebuilt


def refusal_of(event: DecisionsRefused) -> Exception:
    """What a resume whose answers were refused raises: the node's exception where it
    can be rebuilt (LangGraph raises it from the resume), else a ValueError."""
    info = event.exception
    cls = exception_class(info.type) if info is not None else None
    rebuilt = _instance(cls, info) if cls is not None and info is not None else None
    if rebuilt is None:
        rebuilt = ValueError(event.reason)
    rebuilt.add_note(f"loopline: task {event.task_id} still waits at step {event.step}")
    return rebuilt


def decision_refusal_of(event: ToolInterrupted) -> Exception:
    """What a resume raises whose decision a waiting call refused: the exception the
    call's ``interrupt()`` raised (LangGraph's ``ValidationError`` against the
    interrupt's ``response_schema``) where it can be rebuilt, else a ValueError."""
    info = event.exception
    cls = exception_class(info.type) if info is not None else None
    rebuilt = _instance(cls, info) if cls is not None and info is not None else None
    if rebuilt is None:
        rebuilt = ValueError(f"decision for call {event.call.id} refused: {event.error}")
    rebuilt.add_note(f"loopline: task {event.task_id} still waits at step {event.step}")
    return rebuilt


def exception_class(path: str) -> type[Exception] | None:
    """The ``Exception`` class ``module:QualName`` names, found as the module docstring
    says, or None."""
    module_name, _, qualname = path.partition(":")
    if not module_name or not qualname:
        return None
    if module_name == "builtins":
        found: Any = vars(builtins).get(qualname)
    else:
        module = _module(module_name)
        if module is None:
            return None
        found = module
        for part in qualname.split("."):
            found = vars(found).get(part) if hasattr(found, "__dict__") else None
    if isinstance(found, type) and issubclass(found, Exception):
        return found
    return None


def _module(name: str) -> Any:
    """The module, if already imported here or inside the allow-list (imported then)."""
    found = sys.modules.get(name)
    if found is not None:
        return found
    if not imports.is_allowed(name):
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _instance(cls: type[Exception], info: ExceptionInfo) -> Exception | None:
    """``cls(message)``; when that does not take (or reads differently), the instance
    without its constructor. A pydantic ``ValidationError`` is built from its details."""
    if issubclass(cls, ValidationError) and info.validation is not None:
        return _validation_error(info.validation)
    try:
        made = cls(info.message)
        if made.args == (info.message,):
            return made
    except Exception:  # a constructor that wants more than the message
        pass
    try:
        bare = BaseException.__new__(cls, info.message)
    except TypeError:  # a class whose instances need their own __new__ (an OSError's)
        return None
    bare.args = (info.message,)
    return bare


_LINE_ERROR_KEYS = ("type", "loc", "input", "ctx")
"""What ``ValidationError.from_exception_data`` takes of each line error."""


def _validation_error(details: ValidationDetails) -> Exception | None:
    """The ``ValidationError`` again, its text as the original's; None when pydantic
    does not take the errors (a custom error type, say)."""
    line_errors: Any = [
        {k: v for k, v in error.items() if k in _LINE_ERROR_KEYS}
        | {"loc": tuple(error.get("loc") or ())}
        for error in details.errors
    ]
    try:
        return ValidationError.from_exception_data(details.title, line_errors)
    except (TypeError, ValueError, KeyError):
        return None

"""The exception ``invoke`` raises for a failed task, rebuilt from ``TaskFailed.exception``:
the original class and message where the class can be found, by the rules that keep a
producer from choosing code to run (``loopline.errors``); else ``TaskFailedError``."""

from __future__ import annotations

import sys

import pytest

from contracts.events import ExceptionInfo, TaskFailed
from loopline.errors import TaskFailedError, failure_of
from services.failures import exception_info
from tests.tooling import QuotaExceeded

pytestmark = pytest.mark.fast


def failed(exc_type: str, message: str) -> TaskFailed:
    info = ExceptionInfo(type=exc_type, message=message)
    return TaskFailed(task_id="t1", step=2, reason=f"boom: {message}", exception=info)


def roundtrip(exc: Exception) -> Exception:
    event = TaskFailed(task_id="t1", step=1, reason="x", exception=exception_info(exc))
    return failure_of(TaskFailed.model_validate_json(event.model_dump_json()))


@pytest.mark.parametrize(
    "original", [ValueError("bad x=1"), KeyError("k"), RuntimeError("a", "b"), TimeoutError()]
)
def test_builtin_exceptions_come_back_with_their_class_and_message(original: Exception) -> None:
    rebuilt = roundtrip(original)
    assert type(rebuilt) is type(original)
    assert str(rebuilt) == str(original)
    assert "loopline: task t1 failed at step 1" in rebuilt.__notes__


def test_a_class_whose_constructor_wants_more_is_made_without_running_it() -> None:
    rebuilt = roundtrip(QuotaExceeded(3, 10))
    assert type(rebuilt) is QuotaExceeded
    assert str(rebuilt) == "quota exceeded: 3 of 10"
    assert not hasattr(rebuilt, "used")  # its constructor never ran


@pytest.mark.parametrize(
    "named",
    [
        "os:system",  # a function, not a class: never called
        "builtins:eval",
        "builtins:SystemExit",  # not an Exception: would end the client's program
        "builtins:KeyboardInterrupt",
        "builtins:object",
        "subprocess:Popen",
        "tests.tooling:explode",
        "builtins",
        ":ValueError",
    ],
)
def test_anything_but_an_exception_class_gives_task_failed_error(named: str) -> None:
    raised = failure_of(failed(named, "rm -rf /"))
    assert type(raised) is TaskFailedError
    assert str(raised) == "boom: rm -rf /"


def test_a_module_outside_the_allow_list_is_never_imported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOOPLINE_ALLOWED_MODULES", "tests")
    monkeypatch.delitem(sys.modules, "this", raising=False)
    raised = failure_of(failed("this:ZenError", "beautiful is better"))
    assert "this" not in sys.modules  # importing it would have run its code
    assert isinstance(raised, TaskFailedError)
    assert raised.error_type == "ZenError"


def test_an_allowed_module_is_imported_for_its_class(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPLINE_ALLOWED_MODULES", "email")
    monkeypatch.delitem(sys.modules, "email.errors", raising=False)
    raised = failure_of(failed("email.errors:HeaderParseError", "bad header"))
    assert type(raised).__name__ == "HeaderParseError" and str(raised) == "bad header"


def test_a_failure_without_an_exception_is_task_failed_error() -> None:
    event = TaskFailed(task_id="t1", step=0, reason="deadline exceeded")
    raised = failure_of(event)
    assert isinstance(raised, TaskFailedError) and raised.event is event
    assert raised.error_type is None

"""A failure of the agent's own code (a tool, the model call, a middleware hook) as data
for the bus: the text a person reads and the exception's class and message
(``contracts.events.ExceptionInfo``), so a client raises the same exception again, as
LangChain's ``invoke`` lets the original propagate. Secrets are hidden in both (a
provider's error may echo the key it was given)."""

from __future__ import annotations

import json
from collections import OrderedDict

from pydantic import ValidationError

from contracts.events import ExceptionInfo, ValidationDetails
from services.secrets import scrub

MAX_VALIDATION_BYTES = 64 * 1024
"""A ``ValidationError``'s line errors travel up to this size (they hold the input that
failed); a bigger one is raised again as its text only."""


KEPT_ORIGINALS = 256
"""How many tasks' original exceptions a process keeps for a client in it."""

_originals: OrderedDict[str, tuple[ExceptionInfo, BaseException]] = OrderedDict()
_keeping = False


def keep_originals() -> None:
    """Keep failed tasks' exceptions for clients in this process (``original``): the
    embedded services call it; a service process, whose clients are elsewhere, holds
    no exception (nor the objects its traceback reaches)."""
    global _keeping
    _keeping = True


def exception_info(exc: BaseException, task_id: str | None = None) -> ExceptionInfo:
    """Where ``exc``'s class lives and its message, without a secret of this process.
    With ``task_id`` (and ``keep_originals``), the exception itself is kept for a
    client in this process (``original``): embedded, ``invoke`` raises the very
    exception, as LangChain's."""
    cls = type(exc)
    args = exc.args
    message = args[0] if len(args) == 1 and isinstance(args[0], str) else str(exc)
    info = ExceptionInfo(
        type=f"{cls.__module__}:{cls.__qualname__}",
        message=scrub(message),
        validation=validation_details(exc) if isinstance(exc, ValidationError) else None,
    )
    if task_id is not None and _keeping:
        _originals[task_id] = (info, exc)
        _originals.move_to_end(task_id)
        while len(_originals) > KEPT_ORIGINALS:
            _originals.popitem(last=False)
    return info


def original(task_id: str, info: ExceptionInfo) -> BaseException | None:
    """The exception a service in this process failed ``task_id`` with, when ``info``
    describes it (the task's failure, not an earlier one of the same task id); taken
    once. Nothing crosses the bus: a client elsewhere rebuilds the exception from
    ``info`` (``loopline.errors``)."""
    kept = _originals.get(task_id)
    if kept is None or kept[0] != info:
        return None
    del _originals[task_id]
    return kept[1]


def validation_details(exc: ValidationError) -> ValidationDetails | None:
    """The error's title and line errors as JSON, secrets hidden (its ``json()``
    stringifies what JSON cannot hold); None when too big or when hiding a secret broke
    the JSON."""
    text = scrub(exc.json(include_url=False))
    if len(text) > MAX_VALIDATION_BYTES:
        return None
    try:
        errors = json.loads(text)
    except ValueError:
        return None
    return ValidationDetails(title=scrub(exc.title), errors=errors)


def own_exception_info(exc: BaseException) -> ExceptionInfo:
    """``exception_info`` for an exception whose text loopline wrote itself (a step
    limit's): nothing of the process's is in it, so nothing to scrub (scrubbing costs
    more than the rest of a step's bookkeeping, and this one is built on every step)."""
    cls = type(exc)
    return ExceptionInfo(type=f"{cls.__module__}:{cls.__qualname__}", message=str(exc))


def failure_text(exc: BaseException) -> str:
    """``ValueError: bad x=1``: how the failure reads in a task's reason."""
    return scrub(f"{type(exc).__name__}: {exc}")

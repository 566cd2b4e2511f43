"""Errors of the services, and what each means for a stream entry.

    LooplineError
    ├── PermanentError       the entry can never succeed: dead-letter it, ack, go on
    │   ├── BadEvent         malformed or unknown event (validation failed)
    │   ├── UnknownAgent     the event names an agent spec that is not stored
    │   ├── UnknownTask      the event names a task that does not exist
    │   ├── Refused          an event no state asked for (forged, replayed): the task
    │   │                    it names goes on untouched
    │   └── PayloadTooLarge  an event over LOOPLINE_MAX_EVENT_BYTES
    └── ConfigurationError   the user must change something (endpoint, tool path, file)

Any other exception is treated as retryable: the entry stays pending for redelivery.
"""

from __future__ import annotations


class LooplineError(Exception):
    pass


class PermanentError(LooplineError):
    pass


class BadEvent(PermanentError):
    pass


class AnswerRefused(BadEvent):
    """Answers to an interrupt that the node which asked refused (``cause``): the event
    is dead-lettered, and the task's log says so (``DecisionsRefused``)."""

    def __init__(self, step: int, cause: BaseException) -> None:
        super().__init__(f"decisions rejected: {cause}")
        self.step = step
        self.cause = cause


class UnknownAgent(PermanentError):
    pass


class UnknownTask(PermanentError):
    pass


class Refused(PermanentError):
    """An event that no task state asked for: a ``ToolRequested`` for a call no state
    issued, a second ``TaskSubmitted`` for a task id that exists. It is dead-lettered with
    the reason, and unlike other permanent errors it never ends the task it names (the
    task did nothing wrong; whoever published the event did)."""


class PayloadTooLarge(PermanentError):
    pass


class ConfigurationError(LooplineError):
    pass

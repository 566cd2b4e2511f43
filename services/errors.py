"""Errors of the services, and what each means for a stream entry.

    LooplineError
    ├── PermanentError       the entry can never succeed: dead-letter it, ack, go on
    │   ├── BadEvent         malformed or unknown event (validation failed)
    │   ├── UnknownAgent     the event names an agent spec that is not stored
    │   ├── UnknownTask      the event names a task that does not exist
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


class UnknownAgent(PermanentError):
    pass


class UnknownTask(PermanentError):
    pass


class PayloadTooLarge(PermanentError):
    pass


class ConfigurationError(LooplineError):
    pass

"""One entry runner for every stream entry a service handles, whether its consumer read it
or its reclaimer took it over from a consumer that died.

Running an entry: parse it, run the handler with the entry as the current one (what the
handler publishes and writes is queued on it, ``services.entry``), then settle its fate,
decided in one place from how the handler ended (``fate_of``), as FastStream's
acknowledgement middleware does:

- ``ACK``: the handler returned. Its publishes and writes are committed with the XACK in
  one script (``Runtime.commit``), unless a fused transition committed it already.
- ``RETRY``: any other exception. The entry stays pending with its error recorded
  (committed with what the handler queued, which is idempotent for redelivery); the
  reclaimer delivers it again once it has been idle ``claim_idle_ms``.
- ``DEAD_LETTER``: a ``PermanentError`` or a validation error (an oversized, malformed
  or unknown event). A ``DeadLettered`` event with the reason is committed with the ack.

An entry delivered more than ``max_deliveries`` times is dead-lettered with its last error
without running the handler again. A delivery counts only once its outcome is recorded:
when Redis refuses the writes (out of memory at ``maxmemory`` with ``noeviction``, or out
of reach), the delivery is taken back (``XCLAIM ... RETRYCOUNT``, a command Redis runs
even when out of memory) and the entry is retried until its outcome can be recorded, so a
Redis that ran out of memory never dead-letters an event with "last error: unknown".

A redelivered entry's commit also clears the error its last delivery recorded. While an
entry runs longer than a third of the claim idle time, the stream's ``Heartbeat`` keeps
the reclaimers of other processes off it.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import hashlib
import json
import logging
import re
import time
from typing import Any

import redis.asyncio as aioredis
from pydantic import ValidationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError
from redis.exceptions import TimeoutError as RedisTimeoutError

from contracts.events import DeadLettered, dump_event, parse_event
from contracts.streams import DATA_FIELD, GROUPS
from services import telemetry
from services.entry import CURRENT, PendingCommit
from services.errors import PermanentError, Refused
from services.runtime import Handler, Runtime
from services.secrets import scrub

log = logging.getLogger("loopline")


class Fate(enum.Enum):
    """What becomes of a stream entry once its handler ended."""

    ACK = "ack"
    RETRY = "retry"
    DEAD_LETTER = "dead-letter"


def fate_of(failure: BaseException | None) -> Fate:
    """The one map from how a handler ended to its entry's fate (``services.errors``
    draws the tree): permanent failures can never succeed, anything else may next time."""
    if failure is None:
        return Fate.ACK
    if isinstance(failure, PermanentError | ValidationError):
        return Fate.DEAD_LETTER
    return Fate.RETRY


def out_of_memory(failure: BaseException) -> bool:
    """Redis refused a write for want of memory (``maxmemory`` with ``noeviction``), here
    or at the root of the failure: nothing is wrong with the entry."""
    seen: BaseException | None = failure
    for _ in range(5):  # a handler may have wrapped the Redis error
        if seen is None:
            return False
        if isinstance(seen, OutOfMemoryError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def unrecordable(failure: BaseException) -> bool:
    """Redis could not take a write at all (out of memory, out of reach): what failed to
    be written says nothing about the entry, so its delivery must not count."""
    return out_of_memory(failure) or isinstance(failure, RedisConnectionError | RedisTimeoutError)


NONE_RECORDED = (
    "none recorded (each delivery ended without an outcome: the process handling it "
    "stopped while it ran)"
)
"""The last error of an entry given up on when no delivery recorded one."""


def describe(failure: BaseException) -> str:
    """A failure as its dead letter, its recorded error and its task's reason name it:
    with no secret of this process in it."""
    return scrub(f"{type(failure).__name__}: {failure}")


def entry_payload(fields: Any) -> Any:
    """The event a stream entry holds: the ``__data__`` field, else all fields."""
    if isinstance(fields, dict):
        data = fields.get(DATA_FIELD.encode(), fields.get(DATA_FIELD))
        if data is not None:
            return data
        return {_text(k): _text(v) for k, v in fields.items()}
    return fields


def decode_event(payload: Any, max_bytes: int) -> Any:
    """Parse a payload into an event or raise a PermanentError / ValidationError."""
    if isinstance(payload, bytes | str) and len(payload) > max_bytes:
        raise PermanentError(
            f"event of {len(payload)} bytes exceeds the limit of {max_bytes} bytes "
            "(LOOPLINE_MAX_EVENT_BYTES)"
        )
    if isinstance(payload, dict | bytes | str):
        try:
            return parse_event(payload)
        except ValidationError:
            raise
        except ValueError as exc:
            raise PermanentError(f"not a JSON event: {exc}") from exc
    raise PermanentError(f"not a JSON object: {type(payload).__name__}")


def dead_letter_data(
    stream: str,
    entry_id: str,
    payload: Any,
    error: str,
    deliveries: int = 1,
    *,
    max_bytes: int,
) -> bytes:
    """The DeadLettered event for an entry, encoded: at most ``max_bytes`` of its payload
    (an oversized entry would otherwise cost its size twice), with the whole payload's
    size and hash, so a dead letter stays bounded and still says what it held."""
    if isinstance(payload, bytes):
        raw = payload
    else:
        raw = (payload if isinstance(payload, str) else repr(payload)).encode()
    kept = raw[:max_bytes].decode("utf-8", "ignore")  # never half a character
    found = task_of(raw if len(raw) <= max_bytes else kept)
    event = DeadLettered(
        task_id=found[0] if found else "",
        stream=stream,
        entry_id=entry_id,
        payload=kept,
        error=error,
        deliveries=deliveries,
        payload_bytes=len(raw),
        payload_sha256=hashlib.sha256(raw).hexdigest(),
        truncated=len(raw) > max_bytes,
    )
    return dump_event(event)


_FIELDS = {name: re.compile(rf'"{name}"\s*:\s*"([^"\\]+)"') for name in ("task_id", "type")}


def _named_fields(text: str) -> list[tuple[str, re.Match[str] | None]]:
    return [(name, pattern.search(text)) for name, pattern in _FIELDS.items()]


def task_of(payload: Any) -> tuple[str, str] | None:
    """The task id and event type of a payload, even one that does not validate as its
    event (a wrong field, say): None when it names no task."""
    try:
        data = json.loads(payload) if isinstance(payload, bytes | str) else payload
    except ValueError:  # not JSON, or cut short: look for the fields themselves
        text = payload.decode("utf-8", "ignore") if isinstance(payload, bytes) else payload
        data = {name: m[1] for name, m in _named_fields(str(text)) if m is not None}
    if not isinstance(data, dict):
        return None
    task_id, kind = data.get("task_id"), data.get("type")
    if not isinstance(task_id, str) or not task_id or not isinstance(kind, str):
        return None
    return task_id, kind


class Heartbeat:
    """Keeps the entries this process runs on one stream claimed, however long a tool or
    model call lasts: an entry claimed a third of the claim idle time ago or longer is
    claimed again (one XCLAIM for all such entries of the stream, checked every sixth of
    the claim idle time), so its idle time stays under half the claim idle time and only
    the entries of dead or stuck consumers ever look idle to a reclaimer. Costs nothing
    for shorter handlers."""

    def __init__(
        self, redis: aioredis.Redis, stream: str, group: str, consumer: str, every_s: float
    ) -> None:
        self.redis = redis
        self.stream = stream
        self.group = group
        self.consumer = consumer
        self.every_s = every_s
        self.claimed: dict[str, float] = {}
        """Entry id -> when this consumer last claimed it (``time.monotonic``): read it,
        took it over, or renewed its claim."""
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._beat(), name=f"heartbeat {self.stream}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task], timeout=5)

    async def _beat(self) -> None:
        claimed = self.claimed
        while True:
            await asyncio.sleep(self.every_s / 2)
            now = time.monotonic()
            due = now - self.every_s
            ids: list[Any] = [entry_id for entry_id, at in claimed.items() if at <= due]
            if not ids:
                continue
            with contextlib.suppress(aioredis.RedisError):  # due again at the next check
                await self.redis.xclaim(self.stream, self.group, self.consumer, 0, ids, justid=True)
                for entry_id in ids:
                    if entry_id in claimed:  # not finished meanwhile
                        claimed[entry_id] = now


class EntryRunner:
    """Runs one service's handler of one stream on its entries and settles their fates."""

    def __init__(
        self, runtime: Runtime, service: str, stream: str, handler: Handler, consumer: str
    ) -> None:
        self.rt = runtime
        self.service = service
        self.stream = stream
        self.group = GROUPS[service]
        self.consumer = consumer
        self.handler = handler
        self._commit = runtime.committer.commit  # Runtime.commit, one call fewer per entry
        settings = runtime.settings
        self.max_bytes = settings.max_event_bytes
        self.max_deliveries = settings.max_deliveries
        self.heartbeat = Heartbeat(
            runtime.redis, stream, self.group, consumer, settings.claim_idle_ms / 3000
        )

    def start(self) -> None:
        self.heartbeat.start()

    async def stop(self) -> None:
        await self.heartbeat.stop()

    async def run(
        self,
        raw_id: bytes | str,
        fields: Any,
        deliveries: int = 1,
        claimed_at: float | None = None,
    ) -> None:
        """Run the entry (delivered ``deliveries`` times, this one included; claimed by
        this consumer at ``claimed_at``, ``time.monotonic``, by default now) and settle
        it. A cancelled entry stays pending as it is. Raises only for cancellation, or
        when Redis fails before the handler ran (the entry stays pending)."""
        entry = PendingCommit(self.stream, self.group, _text(raw_id))
        payload = entry_payload(fields)
        if deliveries > self.max_deliveries:
            token = CURRENT.set(entry)  # its task is ended as by the entry itself
            try:
                await self._give_up(entry, payload, deliveries)
            finally:
                CURRENT.reset(token)
            return
        claimed = self.heartbeat.claimed
        claimed[entry.entry_id] = time.monotonic() if claimed_at is None else claimed_at
        token = CURRENT.set(entry)
        try:
            failure: Exception | None = None
            try:
                event = decode_event(payload, self.max_bytes)
                with telemetry.consuming(self.service, self.stream, event):
                    await self.handler(event)
            except Exception as exc:
                failure = exc
            await self._settle(entry, payload, failure, deliveries)
        finally:
            CURRENT.reset(token)
            claimed.pop(entry.entry_id, None)

    async def _settle(
        self, entry: PendingCommit, payload: Any, failure: Exception | None, deliveries: int
    ) -> None:
        """Apply the entry's fate (``fate_of``)."""
        redelivered = deliveries > 1
        if entry.committed:  # a fused transition sent it all, with the ack
            if failure is not None:  # a failure after the commit: a bug
                log.error(
                    "%s %s failed after its commit: %r", self.stream, entry.entry_id, failure,
                    exc_info=failure,
                )  # fmt: skip
            if redelivered:
                with contextlib.suppress(aioredis.RedisError):
                    await self.rt.redis.hdel(self.rt.names.errors, self._error_field(entry))
            return
        clear_error = self._error_field(entry) if redelivered else None
        fate = fate_of(failure)
        if fate is Fate.ACK:
            try:
                await self._commit(entry, clear_error=clear_error)
            except Exception as exc:  # stays pending: the reclaimer redelivers it
                log.error("committing %s %s failed: %r", self.stream, entry.entry_id, exc)
                await self._not_recorded(entry, deliveries, exc)
        elif fate is Fate.DEAD_LETTER:
            assert failure is not None
            reason = describe(failure)
            await self._dead_letter(
                entry, payload, reason, deliveries, deliveries, clear_error,
                ends_task=not isinstance(failure, Refused),
            )  # fmt: skip
        else:
            assert failure is not None
            await self._retry(entry, failure, deliveries)

    async def _retry(self, entry: PendingCommit, failure: Exception, deliveries: int) -> None:
        """Leave the entry pending with its error recorded (and what its handler queued)
        for its redelivery. A failure that is Redis out of memory does not count as a
        delivery: the entry waits for memory, however long that takes."""
        if out_of_memory(failure):
            log.warning(
                "Redis is out of memory (maxmemory): %s %s stays pending, retried until "
                "its outcome can be recorded", self.stream, entry.entry_id,
            )  # fmt: skip
            await self._not_recorded(entry, deliveries, failure)
            return
        log.error(
            "handling %s %s failed: %r", self.stream, entry.entry_id, failure,
            exc_info=failure,
        )  # fmt: skip
        error = (self._error_field(entry), describe(failure))
        try:
            await self._commit(entry, ack=False, error=error)
        except Exception as exc:
            await self._not_recorded(entry, deliveries, exc)

    async def _not_recorded(
        self, entry: PendingCommit, deliveries: int, failure: BaseException
    ) -> None:
        """Redis could not record this delivery's outcome: when it could not take a write
        at all (``unrecordable``), the delivery is taken back, so it is retried until
        its outcome can be recorded rather than given up on with no error to name.
        XCLAIM runs even when Redis is out of memory; its RETRYCOUNT sets the count."""
        if not unrecordable(failure):
            return
        with contextlib.suppress(aioredis.RedisError):
            await self.rt.redis.xclaim(
                self.stream, self.group, self.consumer, 0, [entry.entry_id],
                retrycount=deliveries - 1, justid=True,
            )  # fmt: skip

    async def _give_up(self, entry: PendingCommit, payload: Any, deliveries: int) -> None:
        """An entry delivered too often: dead-letter it with its last recorded error."""
        field = self._error_field(entry)
        recorded = await self.rt.redis.hget(self.rt.names.errors, field)
        last_error = NONE_RECORDED if recorded is None else _text(recorded)
        reason = f"gave up after {deliveries - 1} deliveries; last error: {last_error}"
        await self._dead_letter(entry, payload, reason, deliveries - 1, deliveries, field)

    async def _dead_letter(
        self,
        entry: PendingCommit,
        payload: Any,
        reason: str,
        deliveries: int,
        delivery: int,
        clear_error: str | None,
        *,
        ends_task: bool = True,
    ) -> None:
        """End the event's task (``Runtime.on_refused``; not for a ``Refused`` event,
        which no state asked for and whose task goes on), then commit the entry's
        ``DeadLettered`` event with its ack (and what its handler queued before it
        failed). If the task cannot be ended now (Redis failing), the entry stays pending
        and is dead-lettered again on its next delivery: no task is left waiting.
        ``deliveries``: how many the letter reports; ``delivery``: this one's number."""
        try:
            if ends_task:
                await self._end_task(payload, reason)
        except Exception as exc:
            log.error("ending the task of %s %s failed: %r", self.stream, entry.entry_id, exc)
            error = (self._error_field(entry), reason)
            with contextlib.suppress(Exception):
                await self._commit(entry, ack=False, error=error)
            await self._not_recorded(entry, delivery, exc)
            return
        letter = dead_letter_data(
            self.stream, entry.entry_id, payload, reason, deliveries, max_bytes=self.max_bytes
        )
        entry.outbox.append((self.rt.names.dlq, letter))
        try:
            await self._commit(entry, clear_error=clear_error)
        except Exception as exc:
            log.exception("dead-lettering %s %s failed", self.stream, entry.entry_id)
            await self._not_recorded(entry, delivery, exc)
            return
        log.warning("dead-lettered %s %s: %s", self.stream, entry.entry_id, reason)

    async def _end_task(self, payload: Any, reason: str) -> None:
        refused = self.rt.on_refused
        found = task_of(payload)
        if refused is not None and found is not None:
            await refused(found[0], found[1], self.service, reason)

    def _error_field(self, entry: PendingCommit) -> str:
        """The entry's field in the errors hash: its last failure, kept for its redelivery."""
        return f"{self.stream}|{entry.entry_id}"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)

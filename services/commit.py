"""Committing a handled stream entry: what its handler published and wrote, then its ack
or its error, atomically (the scripts of ``services.entry``).

One EVALSHA costs about half the client CPU of the same commands in a MULTI/EXEC pipeline
and is just as atomic. On a Redis Cluster one script cannot span slots: a commit whose
keys all share the entry's slot (partitioned work streams) is still one script; any other
is done in steps (``services.redisconn``).
"""

from __future__ import annotations

from contracts.streams import hash_tag, key_slot
from services.connection import Connection
from services.entry import COMMIT_LUA, COMMIT_SCRIPT, PendingCommit, commit_parts
from services.redisconn import commit_in_steps

REDELIVERED_COMMIT_SCRIPT = (
    COMMIT_LUA + "redis.call('HDEL', KEYS[1], ARGV[1])\ncommit(2, 2)\nreturn 1\n"
)
"""The commit of a redelivered entry: it also clears the error its last delivery recorded
(KEYS[1]: the errors hash, ARGV[1]: the entry's field), so that error never outlives it."""


def one_slot(entry: PendingCommit) -> bool:
    """Whether every key an entry's commit takes is in one hash slot, so one script can
    commit it on a Redis Cluster too (a task's entry with partitioned work streams)."""
    keys = [entry.stream, *(s for s, _ in entry.outbox), *(k for k, _, _ in entry.writes)]
    return len({key_slot(hash_tag(key) or key) for key in keys}) == 1


class Committer:
    """Commits the entries handled in this process (``Runtime.commit``)."""

    def __init__(self, connection: Connection, errors_key: str) -> None:
        self._connection = connection
        self._errors_key = errors_key
        self._script = connection.register_script(COMMIT_SCRIPT)
        self._redelivered_script = connection.register_script(REDELIVERED_COMMIT_SCRIPT)

    async def commit(
        self,
        entry: PendingCommit,
        *,
        ack: bool = True,
        error: tuple[str, str] | None = None,
        clear_error: str | None = None,
    ) -> None:
        """Send a handled entry's publishes and writes, then its ack or its error (field,
        text), atomically (one script: all of it or nothing). ``clear_error``: the field
        of the errors hash a previous delivery of the entry recorded, deleted with it."""
        outbox, writes = entry.outbox, entry.writes
        if not outbox and not writes and error is None and clear_error is None:
            if ack:
                await self._connection.command("XACK", *entry.ack)
            return
        # the errors hash is in a slot of its own: on a cluster a commit that records or
        # clears an error goes in steps (a retried entry is redelivered, never lost)
        touches_errors = error is not None or clear_error is not None
        if self._connection.cluster and (touches_errors or not one_slot(entry)):
            await self._commit_in_steps(entry, ack=ack, error=error, clear_error=clear_error)
            return
        keys, args = commit_parts(
            outbox,
            writes,
            ack=entry.ack if ack and error is None else None,
            error=(self._errors_key, *error) if error is not None else None,
        )
        if clear_error is None:
            await self._script(keys=keys, args=args)
        else:
            await self._redelivered_script(
                keys=[self._errors_key, *keys], args=[clear_error, *args]
            )

    async def _commit_in_steps(
        self,
        entry: PendingCommit,
        *,
        ack: bool,
        error: tuple[str, str] | None,
        clear_error: str | None,
    ) -> None:
        """The cluster's commit: writes, publishes, then the ack (or the error)."""
        redis = self._connection.redis
        for key, name, value in entry.writes:
            await redis.hset(key, name, value)
        await commit_in_steps(
            redis,
            entry.outbox,
            ack=entry.ack if ack else None,
            error=error,
            errors_key=self._errors_key,
        )
        if clear_error is not None and error is None:
            await redis.hdel(self._errors_key, clear_error)

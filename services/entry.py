"""What handling one stream entry commits, and the Lua that commits it atomically.

A handler's publishes and hash writes are not sent as they happen: they are collected for
the entry being handled (``PendingCommit``) and sent with the entry's XACK in one script,
so the ack is never applied without them. A task transition can take the commit over
(``services.tasks.transition.Fusion``): the transition script then also publishes what
the new state asks for, applies the writes and acks the entry, all in one round trip
instead of two, and only when the state is one the caller predicted; otherwise the caller
goes on as usual and the entry is committed when its handler returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from contracts.streams import DATA_FIELD

Outbox = list[tuple[str, bytes]]
Write = tuple[str, str, str | bytes]
"""A hash write committed with the entry: key, field, value."""


@dataclass
class PendingCommit:
    """The entry being handled in this task, and what it will commit."""

    stream: str
    group: str
    entry_id: str
    outbox: Outbox = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)
    committed: bool = False
    """Set when a transition script committed it (nothing may be added after that)."""

    @property
    def ack(self) -> tuple[str, str, str]:
        return self.stream, self.group, self.entry_id


CURRENT: ContextVar[PendingCommit | None] = ContextVar("loopline_entry", default=None)


def current_entry_id() -> str:
    """The id of the stream entry being handled ("" outside a consumer's handler)."""
    entry = CURRENT.get()
    return "" if entry is None else entry.entry_id


# A Lua function: publishes, hash writes, then the ack or the error, reading its KEYS and
# ARGV from the given positions. ARGV: npub, nwrites, npub payloads, nwrites (field,
# value) pairs, then "ack" group id | "error" field text | "". KEYS: npub streams,
# nwrites hash keys, then the acked stream or the errors hash.
COMMIT_LUA = """
local function commit(k, p)
  local npub = tonumber(ARGV[p])
  local nwrites = tonumber(ARGV[p + 1])
  p = p + 2
  for _ = 1, npub do
    redis.call('XADD', KEYS[k], '*', '__DATA__', ARGV[p])
    k = k + 1
    p = p + 1
  end
  for _ = 1, nwrites do
    redis.call('HSET', KEYS[k], ARGV[p], ARGV[p + 1])
    k = k + 1
    p = p + 2
  end
  local mode = ARGV[p]
  if mode == 'ack' then
    redis.call('XACK', KEYS[k], ARGV[p + 1], ARGV[p + 2])
  elseif mode == 'error' then
    redis.call('HSET', KEYS[k], ARGV[p + 1], ARGV[p + 2])
  end
end
""".replace("__DATA__", DATA_FIELD)

COMMIT_SCRIPT = COMMIT_LUA + "commit(1, 1)\nreturn 1\n"


def commit_parts(
    outbox: Outbox,
    writes: Sequence[Write],
    *,
    ack: tuple[str, str, str] | None = None,
    error: tuple[str, str, str] | None = None,
) -> tuple[list[str], list[Any]]:
    """KEYS and ARGV of ``commit`` (``error``: the errors hash, field, text)."""
    keys: list[str] = [stream for stream, _ in outbox]
    keys += [key for key, _, _ in writes]
    args: list[Any] = [len(outbox), len(writes), *(data for _, data in outbox)]
    for _, name, value in writes:
        args += [name, value]
    if ack is not None:
        keys.append(ack[0])
        args += ["ack", ack[1], ack[2]]
    elif error is not None:
        keys.append(error[0])
        args += ["error", error[1], error[2]]
    else:
        args.append("")
    return keys, args

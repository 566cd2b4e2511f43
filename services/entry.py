"""What handling one stream entry commits, and the Lua that commits it atomically.

A handler's publishes and hash writes are not sent as they happen: they are collected for
the entry being handled (``PendingCommit``) and sent with the entry's XACK in one script,
so the ack is never applied without them. A loop transition can take the commit over
(``Fused``): the transition script then also publishes what the new state asks for,
applies the writes and acks the entry, all in one round trip instead of two, and only
when the state is one the caller predicted; otherwise the caller goes on as usual and
the entry is committed when its handler returns.
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


@dataclass(frozen=True)
class Fused:
    """A transition that commits the entry being handled when it lands in a predicted
    state: applied now, in one of ``phases``. In ``publish_phase`` it also publishes
    ``outputs`` (encoded events with their streams), if the transcript then has
    ``expect_len`` messages (what the outputs were built for; otherwise nothing is
    committed and the caller goes on as usual); a task that ended is taken off the
    deadline set."""

    entry: PendingCommit
    phases: tuple[str, ...]
    publish_phase: str
    outputs: Outbox
    deadlines_key: str
    task_id: str
    expect_len: int | None = None

    def parts(self) -> tuple[list[str], list[Any]]:
        """The KEYS and ARGV that follow the transition's own."""
        keys = [stream for stream, _ in self.outputs] + [self.deadlines_key]
        args: list[Any] = [
            "," + ",".join(self.phases) + ",",
            self.publish_phase,
            "" if self.expect_len is None else self.expect_len,
            len(self.outputs),
            *(data for _, data in self.outputs),
            self.task_id,
        ]
        more_keys, more_args = commit_parts(
            self.entry.outbox, self.entry.writes, ack=self.entry.ack
        )
        return keys + more_keys, args + more_args


def fused_script(prelude: str, body: str, n_keys: int, n_args: int) -> str:
    """A transition script (``body`` returns a snapshot; it reads ``n_keys`` KEYS and
    ``n_args`` ARGV) followed by the commit ``Fused.parts`` describes. The snapshot gets
    one more element: 1 when the script committed the entry."""
    return (
        prelude
        + COMMIT_LUA
        + "local function transition()\n"
        + body
        + "\nend\n"
        + f"local k, a = {n_keys + 1}, {n_args + 1}\n"
        + """
local snap = transition()
local fire = snap[1] == 1 and string.find(ARGV[a], ',' .. snap[4] .. ',', 1, true) ~= nil
local publish = snap[4] == ARGV[a + 1]
if fire and publish and ARGV[a + 2] ~= '' then
  fire = tonumber(ARGV[a + 2]) == tonumber(snap[6])
end
if not fire then
  snap[#snap + 1] = 0
  return snap
end
local n = tonumber(ARGV[a + 3])
if publish then
  for i = 0, n - 1 do
    redis.call('XADD', KEYS[k + i], '*', '__DATA__', ARGV[a + 4 + i])
  end
end
if snap[4] == 'done' then redis.call('ZREM', KEYS[k + n], ARGV[a + 4 + n]) end
commit(k + n + 1, a + 5 + n)
snap[#snap + 1] = 1
return snap
""".replace("__DATA__", DATA_FIELD)
    )

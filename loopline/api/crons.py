"""Crons as LangGraph's server keeps them, in Redis so that every gateway replica sees
them and they outlive restarts: a cron is a run payload and a schedule; its next run date
is its score in one sorted set (``Names.api_cron_schedule``).

Schedules are croniter's, as on LangGraph's server: five fields (minute hour day month
weekday), or six where the sixth is seconds (``* * * * * */10``: every ten seconds),
read in UTC unless the cron names an IANA ``timezone``.

A tick fires once whatever the number of replicas: ``claim`` moves a due cron's score
from the tick to the next date in one script, only where the score is still that tick,
and records the tick as firing; the replica whose claim succeeded starts the run, with
an id derived from the cron and the tick, and then clears the firing mark. A replica
that dies in between leaves the mark, and a later sweep starts the same run (an existing
run record with that id means it had started).
"""

from __future__ import annotations

import datetime
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from contracts.streams import Names
from loopline.api.wire import BadRequest

CLAIM = """
local at = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not at or tonumber(at) ~= tonumber(ARGV[2]) then return 0 end
if ARGV[3] == '' then
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
end
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1] .. '/' .. ARGV[2])
return 1
"""
"""KEYS: schedule, firing. ARGV: cron id, the tick (ms) it was due at, its next tick
("" for none: past its end), now (ms). 1 when this caller fired the tick."""

RECLAIM = """
local at = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not at or tonumber(at) > tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return 1
"""
"""KEYS: firing. ARGV: ``cron_id/tick``, the latest claim time (ms) that counts as
abandoned, now (ms). 1 when this caller took over an abandoned tick."""

NAMESPACE = uuid.UUID("6b0f6d1e-2a53-4f4e-9c55-1f3c6fd0a0c1")
"""Run ids of cron ticks are uuid5 of ``cron_id/tick`` in this namespace."""


def invalid_schedule(schedule: str) -> str:
    """LangGraph's 422 detail for a schedule croniter cannot read."""
    return (
        f"Invalid cron schedule: '{schedule}'. Reason: Invalid cron schedule. Ensure the "
        "schedule uses the standard cron format (minute hour day_of_month month "
        "day_of_week). Example: '*/5 * * * *' for every 5 minutes."
    )


def check_schedule(schedule: str) -> None:
    if not croniter.is_valid(schedule):
        raise BadRequest(invalid_schedule(schedule))


def check_timezone(timezone: str | None) -> None:
    if timezone is None:
        return
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, KeyError):
        raise BadRequest(
            f"Invalid timezone: '{timezone}'. Use IANA timezone format (e.g. 'America/New_York')."
        ) from None


def next_date(schedule: str, after: datetime.datetime, timezone: str | None) -> datetime.datetime:
    """The first tick of ``schedule`` after ``after``, in UTC (read in ``timezone``)."""
    if timezone:
        after = after.astimezone(ZoneInfo(timezone))
    found: datetime.datetime = croniter(schedule, after).get_next(datetime.datetime)
    return found.astimezone(datetime.UTC)


def to_ms(moment: datetime.datetime) -> int:
    return int(moment.timestamp() * 1000)


def from_ms(ms: int | float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)


def tick_run_id(cron_id: str, tick_ms: int) -> str:
    return uuid.uuid5(NAMESPACE, f"{cron_id}/{tick_ms}").hex


@dataclass
class Cron:
    """A cron as LangGraph's ``Cron`` schema shows it (``next_run_date`` is kept apart,
    as the schedule's score)."""

    cron_id: str
    assistant_id: str
    thread_id: str | None
    schedule: str
    payload: dict[str, Any]
    metadata: dict[str, Any]
    enabled: bool = True
    timezone: str | None = None
    end_time: str | None = None
    on_run_completed: str | None = None
    user_id: str = ""
    created_at: str = ""
    updated_at: str = ""

    def json(self, next_ms: float | None) -> dict[str, Any]:
        shown: dict[str, Any] = {k: getattr(self, k) for k in FIELDS if k != "next_run_date"}
        shown["next_run_date"] = None if next_ms is None else from_ms(next_ms).isoformat()
        return shown

    def ended_by(self, moment: datetime.datetime) -> bool:
        return self.end_time is not None and datetime.datetime.fromisoformat(self.end_time) < moment

    def next_ms_after(self, moment: datetime.datetime) -> int | None:
        """The next tick after ``moment``; None past the cron's end."""
        following = next_date(self.schedule, moment, self.timezone)
        return None if self.ended_by(following) else to_ms(following)


CronField = Literal[
    "cron_id",
    "assistant_id",
    "thread_id",
    "user_id",
    "end_time",
    "schedule",
    "timezone",
    "payload",
    "next_run_date",
    "metadata",
    "on_run_completed",
    "enabled",
    "created_at",
    "updated_at",
]
"""A cron's fields as LangGraph's server shows them (and ``select`` may name)."""

FIELDS: tuple[CronField, ...] = get_args(CronField)
"""A cron's fields in the order LangGraph's server writes them (``select`` names them)."""


class CronStore:
    """One tenant's crons."""

    def __init__(self, redis: Any, names: Names) -> None:
        self.redis = redis
        self.names = names
        self._claim = redis.register_script(CLAIM)
        self._reclaim = redis.register_script(RECLAIM)

    async def save(self, cron: Cron, next_ms: int | None) -> None:
        """Write ``cron``; ``next_ms``: its next tick, None for none (past its end)."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(self.names.api_crons, cron.cron_id, json.dumps(cron.__dict__))
            if next_ms is None:
                pipe.zrem(self.names.api_cron_schedule, cron.cron_id)
            else:
                pipe.zadd(self.names.api_cron_schedule, {cron.cron_id: next_ms})
            await pipe.execute()

    async def get(self, cron_id: str) -> Cron | None:
        raw = await self.redis.hget(self.names.api_crons, cron_id)
        return None if raw is None else Cron(**json.loads(raw))

    async def next_ms(self, cron_ids: list[str]) -> list[float | None]:
        if not cron_ids:
            return []
        found: list[float | None] = await self.redis.zmscore(self.names.api_cron_schedule, cron_ids)
        return found

    async def delete(self, cron_id: str) -> bool:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hdel(self.names.api_crons, cron_id)
            pipe.zrem(self.names.api_cron_schedule, cron_id)
            removed, _ = await pipe.execute()
        return bool(removed)

    async def delete_for_thread(self, thread_id: str) -> int:
        """Remove the crons of a thread (as LangGraph's server does with the thread)."""
        removed = 0
        for cron in await self.all():
            if cron.thread_id == thread_id:
                removed += await self.delete(cron.cron_id)
        return removed

    async def all(self) -> list[Cron]:
        """Every cron of the tenant (searches filter these: a deployment's crons are
        few, and LangGraph's own in-memory server scans them the same way)."""
        found = await self.redis.hvals(self.names.api_crons)
        return [Cron(**json.loads(raw)) for raw in found]

    async def due(self, now_ms: int, limit: int) -> list[tuple[str, int]]:
        """Crons whose next tick has come, with that tick."""
        found = await self.redis.zrangebyscore(
            self.names.api_cron_schedule, 0, now_ms, start=0, num=limit, withscores=True
        )
        return [(_text(cron_id), int(score)) for cron_id, score in found]

    async def earliest(self) -> float | None:
        """The next tick of any cron (ms), None without crons."""
        found = await self.redis.zrange(self.names.api_cron_schedule, 0, 0, withscores=True)
        return float(found[0][1]) if found else None

    async def claim(self, cron_id: str, tick_ms: int, next_ms: int | None, now_ms: int) -> bool:
        keys = [self.names.api_cron_schedule, self.names.api_cron_firing]
        args = [cron_id, tick_ms, "" if next_ms is None else next_ms, now_ms]
        return bool(await self._claim(keys=keys, args=args))

    async def fired(self, cron_id: str, tick_ms: int) -> None:
        """The tick's run is recorded: nothing is left to recover."""
        await self.redis.zrem(self.names.api_cron_firing, f"{cron_id}/{tick_ms}")

    async def abandoned(self, older_than_ms: int, now_ms: int, limit: int) -> list[tuple[str, int]]:
        """Ticks claimed before ``older_than_ms`` whose run was never recorded, each
        taken over by this caller."""
        firing = self.names.api_cron_firing
        found = await self.redis.zrangebyscore(firing, 0, older_than_ms, start=0, num=limit)
        taken = []
        for member in (_text(m) for m in found):
            if await self._reclaim(keys=[firing], args=[member, older_than_ms, now_ms]):
                cron_id, _, tick = member.rpartition("/")
                taken.append((cron_id, int(tick)))
        return taken


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def now_utc() -> datetime.datetime:
    return datetime.datetime.fromtimestamp(time.time(), datetime.UTC)

"""What a process keeps in memory so a step reads from Redis only what is new: agent specs
and task transcripts. Both are safe to cache without invalidation: a spec is
content-addressed (immutable), and a transcript is append-only (a rewrite by middleware
starts a new revision, cached apart).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Sequence

import redis.asyncio as aioredis

from contracts.agent import AgentSpec
from contracts.messages import MESSAGE_ADAPTER, Message
from contracts.streams import Names
from services.connection import Connection
from services.errors import UnknownAgent

log = logging.getLogger("loopline")


AGENTS_CACHED = 1024
"""Specs a process keeps in memory at most: deployed agents are few, but each distinct
per-run override (a system prompt, a context) is a spec of its own. Past the bound the
cache starts over (nothing is lost: specs are in Redis), so the hot path pays nothing for
the bound."""


class AgentSpecs:
    """Agent specs by id, stored in Redis and cached for the life of the process.

    A spec is written again by every task that starts with it, and kept for the retention
    time after the last task that started or ended with it (``touch``): storage stays
    bounded by the agents in use, and a spec that Redis lost (a restart without
    persistence) is there again for the next task.

    A process writes or renews a spec at most once every ``touch_every_s`` (a tenth of the
    retention, at most a minute): doing it at every task's start and end cost two round
    trips per task (the end's often on a new connection), for a TTL of days."""

    def __init__(self, redis: aioredis.Redis, names: Names, retention_s: int) -> None:
        self._redis = redis
        self._names = names
        self._retention_s = retention_s
        self._specs: dict[str, AgentSpec] = {}
        self.touch_every_s = min(60.0, retention_s / 10)
        self._touched: dict[str, float] = {}

    async def save(self, spec: AgentSpec) -> str:
        """Store a starting task's spec, for the retention time from now; written at most
        every ``touch_every_s`` by this process (a spec Redis lost is back within that)."""
        agent_id = spec.agent_id
        self._keep(agent_id, spec)
        if self.touch_due(agent_id):
            self._touched[agent_id] = time.monotonic()
            await self._redis.set(
                self._names.agent(agent_id), spec.model_dump_json(), ex=self._retention_s
            )
        return agent_id

    def touch_due(self, agent_id: str) -> bool:
        """Whether ``touch`` would renew the spec's time now."""
        last = self._touched.get(agent_id)
        return last is None or time.monotonic() - last >= self.touch_every_s

    async def touch(self, agent_id: str) -> None:
        """A task of the agent ended: keep its spec for the retention time from now
        (less at most ``touch_every_s``, when this process renewed it lately)."""
        if not self.touch_due(agent_id):
            return
        self._touched[agent_id] = time.monotonic()
        try:
            await self._redis.expire(self._names.agent(agent_id), self._retention_s)
        except aioredis.RedisError as exc:  # the next task's start writes it again
            log.warning("keeping agent spec %s failed: %r", agent_id, exc)

    async def get(self, agent_id: str) -> AgentSpec:
        """Specs are immutable (content-addressed), so a cached copy never goes stale."""
        spec = self._specs.get(agent_id)
        if spec is None:
            raw = await self._redis.get(self._names.agent(agent_id))
            if raw is None:
                raise UnknownAgent(f"no agent spec stored under id {agent_id!r}")
            spec = AgentSpec.model_validate_json(raw)
            self._keep(agent_id, spec)
        return spec

    def _keep(self, agent_id: str, spec: AgentSpec) -> None:
        if agent_id not in self._specs and len(self._specs) >= AGENTS_CACHED:
            self._specs.clear()
            self._touched.clear()  # a spec no longer cached is written again when it starts
        self._specs.setdefault(agent_id, spec)


class Transcripts:
    """The transcripts of the tasks this process handled lately, least recently used
    dropped first past ``max_tasks``."""

    def __init__(self, connection: Connection, names: Names, max_tasks: int) -> None:
        self._connection = connection
        self._names = names
        self._max_tasks = max_tasks
        self._cached: OrderedDict[str, list[Message]] = OrderedDict()

    async def get(
        self, task_id: str, length: int, rev: int = 0, known: Sequence[Message] = ()
    ) -> list[Message]:
        """The first ``length`` messages; reads from Redis only what this process lacks.
        A rewrite by middleware bumps ``rev``, which starts a fresh cache entry.
        ``known``: the last of those messages, when the caller has them (a
        ``ModelRequested`` carries the step's one small result, or a new task's input)."""
        key = f"{task_id}:{rev}"
        cached = self._cached.get(key)
        if cached is None:
            cached = []
            self._cached[key] = cached
            if len(self._cached) > self._max_tasks:
                self._cached.popitem(last=False)
        else:
            self._cached.move_to_end(key)
        _extend(cached, length - len(known), known)
        if len(cached) < length:
            start = len(cached)
            raw = await self._connection.command(
                "LRANGE", self._names.task_messages(task_id), start, length - 1
            )
            # Another coroutine may have filled the same cache while this one awaited
            # (parallel calls of one step, a redelivery): add only what is still missing.
            fresh = raw[len(cached) - start :]
            cached.extend(MESSAGE_ADAPTER.validate_json(item) for item in fresh)
        return cached[:length]

    def remember(self, task_id: str, rev: int, at: int, message: Message) -> None:
        """The message that stands at ``at`` in the stored transcript, known without
        reading it: kept when the cached transcript ends right before it."""
        cached = self._cached.get(f"{task_id}:{rev}")
        if cached is not None:
            _extend(cached, at, [message])

    def forget(self, task_id: str, rev: int = 0) -> None:
        self._cached.pop(f"{task_id}:{rev}", None)


def _extend(cached: list[Message], at: int, messages: Sequence[Message]) -> None:
    """``messages`` stand at ``at`` on in the transcript: the cache takes those it lacks,
    when it reaches ``at`` (else it reads them, with what comes before)."""
    if at <= len(cached) < at + len(messages):
        cached.extend(messages[len(cached) - at :])

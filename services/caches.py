"""What a process keeps in memory so a step reads from Redis only what is new: agent specs
and task transcripts. Both are safe to cache without invalidation: a spec is
content-addressed (immutable), and a transcript is append-only (a rewrite by middleware
starts a new revision, cached apart).
"""

from __future__ import annotations

from collections import OrderedDict

import redis.asyncio as aioredis

from contracts.agent import AgentSpec
from contracts.messages import MESSAGE_ADAPTER, Message
from contracts.streams import Names
from services.connection import Connection
from services.errors import UnknownAgent


class AgentSpecs:
    """Agent specs by id, stored once in Redis and cached for the life of the process."""

    def __init__(self, redis: aioredis.Redis, names: Names) -> None:
        self._redis = redis
        self._names = names
        self._specs: dict[str, AgentSpec] = {}

    async def save(self, spec: AgentSpec) -> str:
        agent_id = spec.agent_id
        if agent_id not in self._specs:
            await self._redis.set(self._names.agent(agent_id), spec.model_dump_json(), nx=True)
            self._specs[agent_id] = spec
        return agent_id

    async def get(self, agent_id: str) -> AgentSpec:
        """Specs are immutable (content-addressed), so a cached copy never goes stale."""
        spec = self._specs.get(agent_id)
        if spec is None:
            raw = await self._redis.get(self._names.agent(agent_id))
            if raw is None:
                raise UnknownAgent(f"no agent spec stored under id {agent_id!r}")
            spec = AgentSpec.model_validate_json(raw)
            self._specs[agent_id] = spec
        return spec


class Transcripts:
    """The transcripts of the tasks this process handled lately, least recently used
    dropped first past ``max_tasks``."""

    def __init__(self, connection: Connection, names: Names, max_tasks: int) -> None:
        self._connection = connection
        self._names = names
        self._max_tasks = max_tasks
        self._cached: OrderedDict[str, list[Message]] = OrderedDict()

    async def get(
        self, task_id: str, length: int, rev: int = 0, last: Message | None = None
    ) -> list[Message]:
        """The first ``length`` messages; reads from Redis only what this process lacks.
        A rewrite by middleware bumps ``rev``, which starts a fresh cache entry. ``last``:
        the message at ``length - 1`` when the caller has it (``ModelRequested``)."""
        key = f"{task_id}:{rev}"
        if last is not None:
            self.remember(task_id, rev, length - 1, last)
        cached = self._cached.get(key)
        if cached is None:
            cached = []
            self._cached[key] = cached
            if len(self._cached) > self._max_tasks:
                self._cached.popitem(last=False)
        else:
            self._cached.move_to_end(key)
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
        if cached is not None and len(cached) == at:
            cached.append(message)

    def forget(self, task_id: str, rev: int = 0) -> None:
        self._cached.pop(f"{task_id}:{rev}", None)

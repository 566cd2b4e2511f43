"""Assistants created over HTTP: versioned configurations (``config``, ``context``,
``metadata``, ``name``, ``description``) of a deployed agent (their ``graph_id``), as
LangGraph's server keeps them. Creating one makes version 1; each update makes the next
version and makes it the latest; ``set_latest`` makes an earlier one current again. A run
of an assistant runs its graph's deployed agent with the latest version's config and
context under the run's own.

One hash per assistant (``Names.api_assistant``) holds its versions; concurrent updates
(from any number of gateway replicas) never share a version number: it comes from
``HINCRBY``. Plain commands and pipelines, no MULTI, as the gateway's Redis user runs them
(``loopline acl --role api``).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import redis.asyncio as aioredis

from contracts.streams import Names


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass
class AssistantVersion:
    """One version of an assistant: what a run of it is given."""

    assistant_id: str
    graph_id: str
    version: int
    config: dict[str, Any] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    name: str = "Untitled"
    description: str | None = None
    created_at: float = field(default_factory=time.time)


@dataclass
class Assistant:
    """An assistant as it is now: its latest version, when it was made and last changed."""

    latest: AssistantVersion
    created_at: float
    updated_at: float


class Assistants:
    """One tenant's assistants created over HTTP."""

    def __init__(self, redis: aioredis.Redis, names: Names) -> None:
        self.redis = redis
        self.names = names

    async def create(self, first: AssistantVersion) -> Assistant | None:
        """Store ``first`` as version 1 of a new assistant; None when its id is taken."""
        key = self.names.api_assistant(first.assistant_id)
        first.version = 1
        if not await self.redis.hsetnx(key, "versions", 1):
            return None
        at = first.created_at
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(
                key,
                mapping={
                    "v1": json.dumps(asdict(first)),
                    "latest": 1,
                    "created_at": at,
                    "updated_at": at,
                },
            )
            pipe.zadd(self.names.api_assistants, {first.assistant_id: at})
            await pipe.execute()
        return Assistant(first, at, at)

    async def get(self, assistant_id: str) -> Assistant | None:
        found: Any = await self.redis.hgetall(self.names.api_assistant(assistant_id))
        fields = {_text(k): _text(v) for k, v in found.items()}
        latest = fields.get(f"v{fields.get('latest')}")
        if latest is None:  # gone, or not yet written by a create that raced this read
            return None
        return Assistant(
            AssistantVersion(**json.loads(latest)),
            float(fields["created_at"]),
            float(fields["updated_at"]),
        )

    async def add_version(self, version: AssistantVersion) -> Assistant | None:
        """Store ``version`` as the assistant's next version and make it the latest
        (None for an assistant that does not exist)."""
        key = self.names.api_assistant(version.assistant_id)
        if not await self.redis.exists(key):
            return None
        version.version = int(await self.redis.hincrby(key, "versions", 1))
        await self.redis.hset(
            key,
            mapping={
                f"v{version.version}": json.dumps(asdict(version)),
                "latest": version.version,
                "updated_at": version.created_at,
            },
        )
        return await self.get(version.assistant_id)

    async def set_latest(self, assistant_id: str, version: int) -> bool:
        """Make ``version`` current; False when the assistant has no such version."""
        key = self.names.api_assistant(assistant_id)
        if not await self.redis.hexists(key, f"v{version}"):
            return False
        await self.redis.hset(key, mapping={"latest": version, "updated_at": time.time()})
        return True

    async def versions(self, assistant_id: str) -> list[AssistantVersion]:
        """Every version, newest first."""
        found: Any = await self.redis.hgetall(self.names.api_assistant(assistant_id))
        versions = [
            AssistantVersion(**json.loads(v))
            for k, v in found.items()
            if _text(k).startswith("v") and _text(k)[1:].isdigit()
        ]
        return sorted(versions, key=lambda v: v.version, reverse=True)

    async def delete(self, assistant_id: str) -> bool:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.delete(self.names.api_assistant(assistant_id))
            pipe.zrem(self.names.api_assistants, assistant_id)
            deleted, _ = await pipe.execute()
        return bool(deleted)

    async def all(self) -> list[Assistant]:
        ids: Any = await self.redis.zrange(self.names.api_assistants, 0, -1)
        found = [await self.get(_text(i)) for i in ids]
        return [a for a in found if a is not None]

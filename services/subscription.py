"""Listening to one pub/sub channel for the life of a service, and knowing whether
everything published on it since a known point was heard.

Pub/sub delivers only to whoever is subscribed at the moment of a publish, so what a
process keeps from the channel is trusted only while ``listening``: from the moment its
subscription is confirmed and ``caught_up`` has run (reading in Redis what may have been
missed), until the connection is lost. Until then, and on a Redis Cluster (no
subscription here) or for a Redis user that may not SUBSCRIBE, users of a subclass ask
Redis instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import redis.asyncio as aioredis

log = logging.getLogger("loopline")


class ChannelListener:
    """A ``Background`` of a service: calls ``heard`` for each message on ``channel``
    (``enabled=False``: never listens, e.g. on a Redis Cluster)."""

    def __init__(self, redis: aioredis.Redis, channel: str, *, enabled: bool = True) -> None:
        self.redis = redis
        self.channel = channel
        self.enabled = enabled
        self.listening = False
        self._task: asyncio.Task[None] | None = None

    def heard(self, data: str) -> None:
        """One message published on the channel."""

    async def caught_up(self) -> None:
        """The subscription is confirmed: what was published before it may be lost."""

    def start(self) -> None:
        if self.enabled and self._task is None:
            self._task = asyncio.create_task(self._listen(), name=f"listen {self.channel}")

    async def stop(self) -> None:
        self.listening = False
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _listen(self) -> None:
        while True:
            self.listening = False
            try:
                async with self.redis.pubsub() as pubsub:
                    await pubsub.subscribe(self.channel)
                    async for message in pubsub.listen():
                        if message.get("type") == "subscribe":
                            await self.caught_up()
                            self.listening = True
                        elif message.get("type") == "message":
                            data = message["data"]
                            self.heard(data.decode() if isinstance(data, bytes) else data)
            except (aioredis.ConnectionError, aioredis.TimeoutError, OSError):
                log.info("%s: subscription lost; asking Redis until it is back", self.channel)
                self.listening = False
                await asyncio.sleep(0.5)
            except aioredis.ResponseError as exc:  # e.g. a Redis user that may not SUBSCRIBE
                self.listening = False
                log.warning("%s: cannot listen (%s); asking Redis instead", self.channel, exc)
                return

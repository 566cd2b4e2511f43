"""Where a test session's Redis comes from: ``REDIS_URL`` when set, a Redis Cluster of M
Valkey masters when ``LOOPLINE_TEST_CLUSTER=M`` (``loopline.testing.cluster``: run a suite
on a cluster, with ``LOOPLINE_PARTITIONS`` for partitioned work streams), else a
testcontainers Redis when a Docker engine answers, else an embedded Valkey server of
this process."""

from __future__ import annotations

import os
import time
import warnings
from typing import Any

import redis

from loopline.embedded_server import EmbeddedValkey

CLUSTER_ENV = "LOOPLINE_TEST_CLUSTER"


def docker_answers() -> bool:
    """A Docker engine answers from here (the compose tests and the container need one)."""
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env(timeout=3).ping()
        return True
    except Exception:
        return False


class RedisProvider:
    """One server per test session; tests isolate by prefix. The embedded server dies
    with the session however it ends (``loopline.embedded_server``). A container is
    stopped by ``stop()`` only: testcontainers' reaper, which removes the containers of a
    killed session, is disabled because its image cannot always be pulled."""

    def __init__(self) -> None:
        self.url = ""
        self.kind = ""
        self._stop: Any = None

    def start(self) -> RedisProvider:
        url = os.environ.get("REDIS_URL")
        if url:
            self.url, self.kind = url, "REDIS_URL"
            return self
        masters = os.environ.get(CLUSTER_ENV, "").strip()
        if masters:
            from loopline.testing.cluster import ValkeyCluster

            cluster = ValkeyCluster(int(masters)).start()
            self.url, self.kind, self._stop = cluster.url, f"cluster of {masters}", cluster.stop
            return self
        if docker_answers():
            url = self._container()
            if url:
                return self
        server = EmbeddedValkey().start()
        self.url, self.kind, self._stop = server.url, "embedded", server.stop
        return self

    def _container(self) -> str:
        """A Redis container, if one starts and answers from here; else ''."""
        os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                from testcontainers.redis import RedisContainer

            container = RedisContainer("redis:7")
            container.start()
        except Exception:  # an engine that cannot run the image: use the embedded server
            return ""
        host = container.get_container_host_ip()
        url = f"redis://{host}:{container.get_exposed_port(6379)}"
        client = redis.Redis.from_url(url, socket_connect_timeout=1)
        try:
            for _ in range(50):
                try:
                    client.ping()
                    self.url, self.kind, self._stop = url, "testcontainers", container.stop
                    return url
                except redis.ConnectionError:
                    time.sleep(0.2)
        finally:
            client.close()
        container.stop()
        return ""

    def stop(self) -> None:
        if self._stop is not None:
            self._stop()

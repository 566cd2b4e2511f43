"""A Redis-backed LangGraph ``BaseStore``: long-term memory shared by every service.

Hooks get it as ``runtime.store`` and tools as ``ToolRuntime.store`` (or an
``InjectedStore`` argument) in whichever service runs them, so a tool in the tools
service writes what a hook in the loop reads. Items live under the deployment's prefix:
one hash per namespace (``<prefix>:store:ns:<namespace as JSON>``: key -> the item as
JSON) and a set of the namespaces (``<prefix>:store:namespaces``), which prefix searches
and ``list_namespaces`` walk. No vector index: ``search`` filters by namespace prefix and
by value (LangGraph's filter operators, as ``InMemoryStore`` applies them), newest first.
"""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import Iterable
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisStore(BaseStore):
    """``RedisStore(url, prefix)``: the store of a loopline deployment (``REDIS_URL``,
    ``LOOPLINE_PREFIX``). Safe to share between threads (redis-py's pool)."""

    def __init__(self, url: str, prefix: str = "loopline") -> None:
        self.url = url
        self.prefix = prefix
        self._client: Any = None

    # -- keys ---------------------------------------------------------------------------

    def _ns_key(self, namespace: tuple[str, ...]) -> str:
        return f"{self.prefix}:store:ns:{json.dumps(list(namespace))}"

    @property
    def _namespaces_key(self) -> str:
        return f"{self.prefix}:store:namespaces"

    @property
    def redis(self) -> Any:
        if self._client is None:
            from services.redisconn import sync_client

            self._client = sync_client(self.url)
        return self._client

    # -- BaseStore ----------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return [self._one(op) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))

    def _one(self, op: Op) -> Result:
        if isinstance(op, GetOp):
            return self._get(op)
        if isinstance(op, PutOp):
            self._put(op)
            return None
        if isinstance(op, SearchOp):
            return self._search(op)
        if isinstance(op, ListNamespacesOp):
            return self._list_namespaces(op)
        raise TypeError(f"unsupported store operation {type(op).__name__}")

    def _get(self, op: GetOp) -> Item | None:
        raw = self.redis.hget(self._ns_key(op.namespace), op.key)
        return None if raw is None else _item(op.namespace, op.key, raw)

    def _put(self, op: PutOp) -> None:
        key = self._ns_key(op.namespace)
        if op.value is None:  # a delete
            self.redis.hdel(key, op.key)
            if not self.redis.exists(key):
                self.redis.srem(self._namespaces_key, json.dumps(list(op.namespace)))
            return
        now = _now()
        old = self.redis.hget(key, op.key)
        created = json.loads(old)["created_at"] if old else now
        stored = {"value": dict(op.value), "created_at": created, "updated_at": now}
        self.redis.hset(key, op.key, json.dumps(stored))
        self.redis.sadd(self._namespaces_key, json.dumps(list(op.namespace)))

    def _namespaces(self) -> list[tuple[str, ...]]:
        return [tuple(json.loads(_text(n))) for n in self.redis.smembers(self._namespaces_key)]

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        found: list[SearchItem] = []
        for namespace in self._namespaces():
            if namespace[: len(prefix)] != prefix:
                continue
            for key, raw in self.redis.hgetall(self._ns_key(namespace)).items():
                item = _item(namespace, _text(key), raw)
                if op.filter and not _matches(item.value, op.filter):
                    continue
                found.append(
                    SearchItem(
                        namespace=item.namespace,
                        key=item.key,
                        value=item.value,
                        created_at=item.created_at,
                        updated_at=item.updated_at,
                    )
                )
        found.sort(key=lambda i: i.updated_at, reverse=True)
        return found[op.offset : op.offset + op.limit]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        from langgraph.store.memory import _does_match

        names = sorted(self._namespaces())
        for condition in op.match_conditions or ():
            names = [n for n in names if _does_match(condition, n)]
        if op.max_depth is not None:
            names = sorted({n[: op.max_depth] for n in names})
        return names[op.offset : op.offset + op.limit]


def _item(namespace: tuple[str, ...], key: str, raw: Any) -> Item:
    stored = json.loads(raw)
    return Item(
        namespace=tuple(namespace),
        key=key,
        value=stored["value"],
        created_at=datetime.datetime.fromisoformat(stored["created_at"]),
        updated_at=datetime.datetime.fromisoformat(stored["updated_at"]),
    )


def _matches(value: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """LangGraph's filter, as ``InMemoryStore`` applies it (equality, nested objects,
    ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``)."""
    from langgraph.store.memory import _compare_values

    return all(_compare_values(value.get(key), expected) for key, expected in wanted.items())

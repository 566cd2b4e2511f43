"""A Redis-backed LangGraph ``BaseStore``: long-term memory shared by every service.

Hooks get it as ``runtime.store`` and tools as ``ToolRuntime.store`` (or an
``InjectedStore`` argument) in whichever service runs them, so a tool in the tools
service writes what a hook in the loop reads. Items live under the deployment's prefix:
one hash per namespace (``<prefix>:store:ns:<namespace as JSON>``: key -> the item as
JSON) and a set of the namespaces (``<prefix>:store:namespaces``), which prefix searches
and ``list_namespaces`` walk. ``search`` filters by namespace prefix and by value
(LangGraph's filter operators, as ``InMemoryStore`` applies them), newest first.

With an index configured (``services.store_config``), a ``put`` embeds the configured
fields of the value (one hash of vectors per namespace, ``<prefix>:store:vec:...``, apart
from the items so a ``get`` reads no vectors) and ``search(query=...)`` ranks by cosine
similarity, each item scored by its best field, as ``InMemoryStore`` ranks.

Items may expire (``put(..., ttl=minutes)``, or the configured ``default_ttl``): an
expired item is never returned and is deleted when met; reading renews the TTL of what it
returns (``refresh_ttl``, LangGraph's semantics); ``sweep_ttl`` deletes every expired item
(``<prefix>:store:expiry``, a sorted set of expiry times) so memory is freed too.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

    from services.store_config import StoreConfig

Namespace = tuple[str, ...]


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisStore(BaseStore):
    """``RedisStore(url, prefix, config)``: the store of a loopline deployment
    (``REDIS_URL``, ``LOOPLINE_PREFIX``, ``LOOPLINE_STORE``). Safe to share between
    threads (redis-py's pool)."""

    supports_ttl = True

    def __init__(
        self,
        url: str,
        prefix: str = "loopline",
        config: StoreConfig | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.url = url
        self.prefix = prefix
        self.config = config
        self.ttl_config = config.ttl.as_langgraph() if config and config.ttl else None
        self._fields = _index_fields(config)
        self._embeddings: Embeddings | None = None
        self._client: Any = None
        self._clock = clock
        """Seconds since the epoch, for expiry times (a test passes its own)."""

    @property
    def indexed(self) -> bool:
        """Whether ``search`` can rank by a ``query`` (an index is configured)."""
        return self._fields is not None

    @property
    def embeddings(self) -> Embeddings:
        if self._embeddings is None:
            assert self.config is not None and self.config.index is not None
            self._embeddings = self.config.index.embeddings()
        return self._embeddings

    # -- keys ---------------------------------------------------------------------------

    def _ns_key(self, namespace: Namespace) -> str:
        return f"{self.prefix}:store:ns:{json.dumps(list(namespace))}"

    def _vec_key(self, namespace: Namespace) -> str:
        return f"{self.prefix}:store:vec:{json.dumps(list(namespace))}"

    @property
    def _namespaces_key(self) -> str:
        return f"{self.prefix}:store:namespaces"

    @property
    def _expiry_key(self) -> str:
        return f"{self.prefix}:store:expiry"

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
        stored = self._live(
            op.namespace, op.key, self.redis.hget(self._ns_key(op.namespace), op.key)
        )
        if stored is None:
            return None
        if op.refresh_ttl:
            self._renew(op.namespace, op.key, stored)
        return _item(op.namespace, op.key, stored)

    def _put(self, op: PutOp) -> None:
        if op.value is None:
            self._drop(op.namespace, op.key)
            return
        key = self._ns_key(op.namespace)
        now = _now()
        raw = self.redis.hget(key, op.key)
        old: dict[str, Any] | None = json.loads(raw) if raw else None
        created = old["created_at"] if old else now
        stored: dict[str, Any] = {"value": dict(op.value), "created_at": created, "updated_at": now}
        if op.ttl is not None:
            stored["ttl"] = op.ttl
            stored["expires_at"] = self._clock() + op.ttl * 60
        self._index(op)
        self.redis.hset(key, op.key, json.dumps(stored))
        self.redis.sadd(self._namespaces_key, json.dumps(list(op.namespace)))
        member = _member(op.namespace, op.key)
        if op.ttl is not None:
            self.redis.zadd(self._expiry_key, {member: stored["expires_at"]})
        elif old is not None and old.get("ttl") is not None:  # it expired before; no more
            self.redis.zrem(self._expiry_key, member)

    # -- expiry -------------------------------------------------------------------------

    def _live(self, namespace: Namespace, key: str, raw: Any) -> dict[str, Any] | None:
        """The stored item, or None when there is none or it expired (then deleted)."""
        if raw is None:
            return None
        stored: dict[str, Any] = json.loads(raw)
        expires = stored.get("expires_at")
        if expires is not None and expires <= self._clock():
            self._drop(namespace, key)
            return None
        return stored

    def _renew(self, namespace: Namespace, key: str, stored: dict[str, Any]) -> None:
        """Start the item's TTL over (a write, or a read that refreshes)."""
        ttl = stored.get("ttl")
        if ttl is None:
            return
        stored["expires_at"] = self._clock() + ttl * 60
        self.redis.hset(self._ns_key(namespace), key, json.dumps(stored))
        self.redis.zadd(self._expiry_key, {_member(namespace, key): stored["expires_at"]})

    def _drop(self, namespace: Namespace, key: str) -> None:
        ns_key = self._ns_key(namespace)
        self.redis.hdel(ns_key, key)
        self.redis.hdel(self._vec_key(namespace), key)
        self.redis.zrem(self._expiry_key, _member(namespace, key))
        if not self.redis.exists(ns_key):
            self.redis.srem(self._namespaces_key, json.dumps(list(namespace)))

    def sweep_ttl(self) -> int:
        """Delete every item whose TTL ran out; how many went."""
        due = self.redis.zrangebyscore(self._expiry_key, "-inf", self._clock())
        gone = 0
        for member in due:
            namespace, key = json.loads(member)
            raw = self.redis.hget(self._ns_key(tuple(namespace)), key)
            if raw is None or self._live(tuple(namespace), key, raw) is None:
                self.redis.zrem(self._expiry_key, member)  # gone already, or dropped now
                gone += raw is not None
        return gone

    async def asweep_ttl(self) -> int:
        return await asyncio.to_thread(self.sweep_ttl)

    # -- the index ----------------------------------------------------------------------

    def _index(self, op: PutOp) -> None:
        """Embed the put value's configured fields (or the put's own ``index``)."""
        if self._fields is None:  # no index: no vectors are ever kept
            return
        if op.index is False or op.value is None:
            self.redis.hdel(self._vec_key(op.namespace), op.key)
            return
        from langgraph.store.base.embed import get_text_at_path, tokenize_path

        fields = self._fields if op.index is None else list(op.index)
        texts: dict[str, str] = {}
        for path in fields:
            found = get_text_at_path(op.value, path if path == "$" else tokenize_path(path))
            named = [path] if len(found) == 1 else [f"{path}.{i}" for i in range(len(found))]
            texts.update(zip(named, found, strict=True))
        if not texts:
            self.redis.hdel(self._vec_key(op.namespace), op.key)
            return
        vectors = self.embeddings.embed_documents(list(texts.values()))
        self.redis.hset(
            self._vec_key(op.namespace), op.key, json.dumps(dict(zip(texts, vectors, strict=True)))
        )

    # -- search -------------------------------------------------------------------------

    def _namespaces(self) -> list[Namespace]:
        return [tuple(json.loads(_text(n))) for n in self.redis.smembers(self._namespaces_key)]

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        found: list[Item] = []
        for namespace in self._namespaces():
            if namespace[: len(prefix)] != prefix:
                continue
            for key, raw in self.redis.hgetall(self._ns_key(namespace)).items():
                stored = self._live(namespace, _text(key), raw)
                if stored is None:
                    continue
                item = _item(namespace, _text(key), stored)
                if op.filter and not _matches(item.value, op.filter):
                    continue
                found.append(item)
        found.sort(key=lambda i: i.updated_at, reverse=True)
        if op.query and self.indexed:
            page = self._ranked(op, found)
        else:
            page = [(None, i) for i in found[op.offset : op.offset + op.limit]]
        if op.refresh_ttl:
            for _, item in page:
                self._refresh(item)
        return [_search_item(item, score) for score, item in page]

    def _ranked(self, op: SearchOp, found: list[Item]) -> list[tuple[float | None, Item]]:
        """``InMemoryStore``'s ranking: each item scored by its best embedded field, best
        first, ties in the order the items were first put; items without vectors fill a
        short page after them."""
        from langgraph.store.memory import _cosine_similarity

        assert op.query is not None
        query = self.embeddings.embed_query(op.query)
        scored: list[tuple[float, Item]] = []
        scoreless: list[Item] = []
        for item in sorted(found, key=lambda i: i.created_at):
            raw = self.redis.hget(self._vec_key(item.namespace), item.key)
            vectors = list(json.loads(raw).values()) if raw else []
            if not vectors:
                scoreless.append(item)
                continue
            scored.append((max(_cosine_similarity(query, vectors)), item))
        scored.sort(key=lambda pair: pair[0], reverse=True)
        kept: list[tuple[float | None, Item]] = list(scored[op.offset : op.offset + op.limit])
        if len(kept) < op.limit:
            kept.extend((None, item) for item in scoreless[: op.limit - len(kept)])
        return kept

    def _refresh(self, item: Item) -> None:
        raw = self.redis.hget(self._ns_key(item.namespace), item.key)
        if raw is not None:
            self._renew(item.namespace, item.key, json.loads(raw))

    def _list_namespaces(self, op: ListNamespacesOp) -> list[Namespace]:
        from langgraph.store.memory import _does_match

        names = sorted(self._namespaces())
        for condition in op.match_conditions or ():
            names = [n for n in names if _does_match(condition, n)]
        if op.max_depth is not None:
            names = sorted({n[: op.max_depth] for n in names})
        return names[op.offset : op.offset + op.limit]


def _index_fields(config: StoreConfig | None) -> list[str] | None:
    if config is None or config.index is None:
        return None
    return config.index.fields or ["$"]


def _member(namespace: Namespace, key: str) -> str:
    return json.dumps([list(namespace), key])


def _item(namespace: Namespace, key: str, stored: dict[str, Any]) -> Item:
    return Item(
        namespace=tuple(namespace),
        key=key,
        value=stored["value"],
        created_at=datetime.datetime.fromisoformat(stored["created_at"]),
        updated_at=datetime.datetime.fromisoformat(stored["updated_at"]),
    )


def _search_item(item: Item, score: float | None) -> SearchItem:
    return SearchItem(
        namespace=item.namespace,
        key=item.key,
        value=item.value,
        created_at=item.created_at,
        updated_at=item.updated_at,
        score=None if score is None else float(score),
    )


def _matches(value: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """LangGraph's filter, as ``InMemoryStore`` applies it (equality, nested objects,
    ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``)."""
    from langgraph.store.memory import _compare_values

    return all(_compare_values(value.get(key), expected) for key, expected in wanted.items())

"""The store routes of the Agent Server API (``/store/items``, ``/store/items/search``,
``/store/namespaces``) through the real ``langgraph_sdk`` client against ``loopline serve
api``: the deployment's ``RedisStore``, the one hooks and tools see.

What LangGraph's own server (``langgraph dev``, langgraph-api 0.16.7 in memory) answered
to the same calls is kept below as data (``REFERENCE_*``, the namespace's unique label
written ``NS`` and times left out).
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from services.redis_store import RedisStore
from tests import test_http_gateway as shared

scripted = shared.scripted
deployment = shared.deployment
gateway = shared.gateway
sdk = shared.sdk

REFERENCE_ITEM = {"namespace": ["a", "NS"], "key": "k1", "value": {"x": 1, "y": "z"}}
REFERENCE_SEARCH_X1 = [  # search_items(["a", NS], filter={"x": 1}): keys and namespaces
    (["a", "NS"], "k1", None),
    (["a", "NS", "deep"], "k3", None),
]
REFERENCE_ALL_KEYS = ["k1", "k2", "k3"]  # search_items(["a", NS]) after k1, k2, k3 were put
REFERENCE_SECOND_PAGE = ["k2"]  # limit=1, offset=1
REFERENCE_NAMESPACES = [["a", "NS"], ["a", "NS", "deep"]]
REFERENCE_NAMESPACES_DEPTH_2 = [["a", "NS"]]
REFERENCE_MISSING_ITEM = None  # get_item of a key never put: 200 and null
REFERENCE_EMPTY_NAMESPACE = (400, "Namespace cannot be empty.")


def _shown(found: list[dict[str, Any]], ns: str) -> list[tuple[list[str], str, Any]]:
    return [
        ([("NS" if label == ns else label) for label in i["namespace"]], i["key"], i["score"])
        for i in found
    ]


async def test_items_are_put_read_searched_listed_and_deleted(sdk: Any, deployment: Any) -> None:
    ns = str(uuid.uuid4())
    store = sdk.store
    assert await store.put_item(["a", ns], "k1", {"x": 1, "y": "z"}) is None
    await store.put_item(["a", ns], "k2", {"x": 2})
    await store.put_item(["a", ns, "deep"], "k3", {"x": 1})

    item = await store.get_item(["a", ns], "k1")
    assert {k: item[k] for k in REFERENCE_ITEM} == {**REFERENCE_ITEM, "namespace": ["a", ns]}
    assert item["created_at"] <= item["updated_at"]
    assert await store.get_item(["a", ns], "nope") == REFERENCE_MISSING_ITEM

    found = (await store.search_items(["a", ns], filter={"x": 1}))["items"]
    assert sorted(_shown(found, ns)) == REFERENCE_SEARCH_X1
    every = (await store.search_items(["a", ns]))["items"]
    assert sorted(i["key"] for i in every) == REFERENCE_ALL_KEYS
    newest_first = [i["key"] for i in every]
    second = (await store.search_items(["a", ns], limit=1, offset=1))["items"]
    assert [i["key"] for i in second] == newest_first[1:2]
    assert len(REFERENCE_SECOND_PAGE) == len(second)
    with_operator = (await store.search_items(["a", ns], filter={"x": {"$gt": 1}}))["items"]
    assert [i["key"] for i in with_operator] == ["k2"]

    listed = (await store.list_namespaces(prefix=["a", ns]))["namespaces"]
    assert [[("NS" if x == ns else x) for x in n] for n in listed] == REFERENCE_NAMESPACES
    shallow = (await store.list_namespaces(prefix=["a", ns], max_depth=2))["namespaces"]
    assert [[("NS" if x == ns else x) for x in n] for n in shallow] == REFERENCE_NAMESPACES_DEPTH_2

    # the same store the deployment's hooks and tools are given
    seen = RedisStore(deployment.redis_url, deployment.prefix).get(("a", ns), "k1")
    assert seen is not None and seen.value == {"x": 1, "y": "z"}

    assert await store.delete_item(["a", ns], "k2") is None
    assert await store.get_item(["a", ns], "k2") is None

    with pytest.raises(httpx.HTTPStatusError) as empty:
        await store.put_item([], "k", {"x": 1})
    answer = empty.value.response
    assert (answer.status_code, answer.json()["detail"]) == REFERENCE_EMPTY_NAMESPACE


async def test_store_parameters_loopline_does_not_implement_are_refused(sdk: Any) -> None:
    """LangGraph's in-memory server, with no TTL and no index configured, accepts ``ttl``
    and ``query`` and does nothing with them; loopline refuses them (422, by name)."""
    ns = ["a", str(uuid.uuid4())]
    for call, name in (
        (sdk.store.put_item(ns, "k", {"x": 1}, ttl=5), "ttl"),
        (sdk.store.put_item(ns, "k", {"x": 1}, index=["x"]), "index"),
        (sdk.store.search_items(ns, query="hello"), "query"),
        (sdk.store.get_item(ns, "k", refresh_ttl=True), "refresh_ttl"),
    ):
        with pytest.raises(httpx.HTTPStatusError) as refused:
            await call
        assert refused.value.response.status_code == 422
        assert name in refused.value.response.json()["detail"]
    assert await sdk.store.get_item(ns, "k") is None  # nothing refused was stored
    assert await sdk.store.put_item(ns, "k", {"x": 1}, index=False) is None

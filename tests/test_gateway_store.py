"""The store routes of the Agent Server API (``/store/items``, ``/store/items/search``,
``/store/namespaces``) through the real ``langgraph_sdk`` client against ``loopline serve
api``: the deployment's ``RedisStore``, the one hooks and tools see.

What LangGraph's own server (``langgraph dev``, langgraph-api 0.16.7 in memory) answered
to the same calls is kept below as data (``REFERENCE_*``, the namespace's unique label
written ``NS`` and times left out).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client

from loopline.testing.processes import GatewayProcess
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


async def test_a_query_or_index_without_a_configured_index_is_refused(sdk: Any) -> None:
    """LangGraph's in-memory server, with no index configured, accepts ``query`` and an
    ``index`` list and does nothing with them; loopline says why (422, by name)."""
    ns = ["a", str(uuid.uuid4())]
    for call, name in (
        (sdk.store.put_item(ns, "k", {"x": 1}, index=["x"]), "index"),
        (sdk.store.search_items(ns, query="hello"), "query"),
    ):
        with pytest.raises(httpx.HTTPStatusError) as refused:
            await call
        assert refused.value.response.status_code == 422
        assert name in refused.value.response.json()["detail"]
    assert await sdk.store.get_item(ns, "k") is None  # nothing refused was stored
    assert await sdk.store.put_item(ns, "k", {"x": 1}, index=False) is None
    assert await sdk.store.put_item(ns, "t", {"x": 1}, ttl=5) is None
    assert (await sdk.store.get_item(ns, "t", refresh_ttl=True))["value"] == {"x": 1}


STORE_CONFIG = {
    "ttl": {"default_ttl": 60, "refresh_on_read": True, "sweep_interval_minutes": 0.01},
    "index": {"embed": "tests.store_tooling:embed", "dims": 8, "fields": ["text"]},
}


async def test_a_configured_store_ranks_queries_and_sweeps_expired_items(
    deployment: Any,
) -> None:
    """``LOOPLINE_STORE`` as ``langgraph.json``'s ``store``: the gateway's search ranks by
    the index as the deployment's ``RedisStore`` does, and its sweep deletes an item whose
    TTL ran out (a ttl of 0.01 minutes, swept every 0.6 s)."""
    env = {"LOOPLINE_STORE": json.dumps(STORE_CONFIG)}
    ns = ["docs", str(uuid.uuid4())]
    with GatewayProcess(deployment.redis_url, deployment.prefix, env=env) as api:
        client = get_client(url=api.url, api_key=None)
        await client.store.put_item(ns, "py", {"text": "python tutorial"})
        await client.store.put_item(ns, "soup", {"text": "cooking soup"})
        await client.store.put_item(ns, "sky", {"text": "blue sky"}, index=False)
        found = (await client.store.search_items(ns, query="python guide"))["items"]
        assert [(i["key"], i["score"] is not None) for i in found] == [
            ("py", True),
            ("soup", True),
            ("sky", False),
        ]
        assert found[0]["score"] > found[1]["score"]
        direct = RedisStore(deployment.redis_url, deployment.prefix, _config())
        assert [i.key for i in direct.search(tuple(ns), query="python guide")] == [
            "py",
            "soup",
            "sky",
        ]
        await client.store.put_item(ns, "brief", {"text": "soon gone"}, ttl=0.01)
        assert await client.store.get_item(ns, "brief", refresh_ttl=False) is not None
        key = f"{deployment.prefix}:store:ns:{json.dumps(ns)}"
        for _ in range(100):  # the sweep removes it from Redis, unread
            if not direct.redis.hexists(key, "brief"):
                break
            await asyncio.sleep(0.1)
        assert not direct.redis.hexists(key, "brief")
        assert await client.store.get_item(ns, "py") is not None


def _config() -> Any:
    from services.store_config import StoreConfig

    return StoreConfig.model_validate(STORE_CONFIG)

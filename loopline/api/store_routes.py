"""``/store``: the deployment's long-term memory over HTTP, the same ``RedisStore`` that
hooks see as ``runtime.store`` and tools as ``ToolRuntime.store``: put, get and delete an
item, search a namespace prefix by value or by similarity, list namespaces, with TTLs as
LangGraph's store keeps them (``LOOPLINE_STORE``)."""

from __future__ import annotations

from typing import Any

from langgraph.store.base import Item
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from loopline.api.gateway import body_of, tenant_of
from loopline.api.params import (
    StoreDelete,
    StoreItemQuery,
    StoreNamespaces,
    StorePut,
    StoreSearch,
    parse,
)
from loopline.api.wire import BadRequest


def _namespace(labels: list[str]) -> tuple[str, ...]:
    """A namespace as LangGraph's server takes it (no empty one, no dotted label)."""
    if not labels:
        raise EmptyNamespace("Namespace cannot be empty.")
    for label in labels:
        if not label or "." in label:
            raise BadRequest(f"Invalid namespace label {label!r}: empty or with a period")
    return tuple(labels)


class EmptyNamespace(BadRequest):
    """LangGraph's server answers an empty namespace with 400, not 422."""


class NoIndex(BadRequest):
    """A ``query`` or an ``index`` list on a store with no vector index configured:
    LangGraph's server ignores them; loopline says why (422)."""


def _needs_index(store: Any, name: str) -> None:
    if not store.indexed:
        raise NoIndex(
            f"{name}: the store has no vector index (configure LOOPLINE_STORE's index, "
            "as langgraph.json's store.index)"
        )


def item_json(item: Item) -> dict[str, Any]:
    shown: dict[str, Any] = item.dict()
    return shown


async def put(request: Request) -> Response:
    body = parse(StorePut, await body_of(request))
    tenant = await tenant_of(request)
    if isinstance(body.index, list):
        _needs_index(tenant.store, "index")
    await tenant.store.aput(
        _namespace(body.namespace),
        body.key,
        body.value,
        index=body.index,
        **({} if body.ttl is None else {"ttl": body.ttl}),
    )
    return Response(status_code=204)


async def get(request: Request) -> Response:
    """``GET /store/items``: the item, or ``null`` (200) when there is none."""
    query = parse(StoreItemQuery, request.query_params)
    tenant = await tenant_of(request)
    labels = query.namespace.split(".") if query.namespace else []
    item = await tenant.store.aget(_namespace(labels), query.key, refresh_ttl=query.refresh_ttl)
    return JSONResponse(None if item is None else item_json(item))


async def delete(request: Request) -> Response:
    body = parse(StoreDelete, await body_of(request))
    tenant = await tenant_of(request)
    await tenant.store.adelete(_namespace(body.namespace), body.key)
    return Response(status_code=204)


async def search(request: Request) -> Response:
    body = parse(StoreSearch, await body_of(request))
    tenant = await tenant_of(request)
    if body.query is not None:
        _needs_index(tenant.store, "query")
    found = await tenant.store.asearch(
        tuple(body.namespace_prefix),
        query=body.query,
        filter=body.filter,
        limit=body.limit,
        offset=body.offset,
        refresh_ttl=body.refresh_ttl,
    )
    return JSONResponse({"items": [item_json(item) for item in found]})


async def namespaces(request: Request) -> Response:
    body = parse(StoreNamespaces, await body_of(request))
    tenant = await tenant_of(request)
    found = await tenant.store.alist_namespaces(
        prefix=tuple(body.prefix) if body.prefix else None,
        suffix=tuple(body.suffix) if body.suffix else None,
        max_depth=body.max_depth,
        limit=body.limit,
        offset=body.offset,
    )
    return JSONResponse({"namespaces": [list(n) for n in found]})

"""The thread routes of the Agent Server API (search, count, update, copy, prune,
delete) through the real ``langgraph_sdk`` client against ``loopline serve api`` with the
services as processes (the fixtures of ``test_http_gateway``).

What LangGraph's own server (``langgraph dev``, langgraph-api 0.16.7 in memory) answered
to the same calls, on a ``create_agent`` graph and the same scripted replies, is kept
below as data (``REFERENCE_*``, ids and times left out).
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from langgraph_sdk.errors import NotFoundError

from tests import test_http_gateway as shared
from tests.test_http_gateway import ANSWER, hello

scripted = shared.scripted
deployment = shared.deployment
gateway = shared.gateway
sdk = shared.sdk

REFERENCE_THREAD_KEYS = {
    "thread_id",
    "created_at",
    "updated_at",
    "state_updated_at",
    "metadata",
    "status",
    "config",
    "values",
}
"""``threads.create``, ``search``, ``update``: every field of the thread (loopline adds
``error`` and ``interrupts``, as LangGraph's server shows on a thread that has run)."""
REFERENCE_RAN_METADATA = {"graph_id": "agent", "assistant_id": "agent"}
"""What a run adds to its thread's metadata (LangGraph's server: the graph's name and the
assistant's id, here the deployed agent's name)."""
REFERENCE_PRUNED = {"pruned_count": 1}
REFERENCE_PRUNED_NOTHING = {"pruned_count": 0}  # a thread id that does not exist
REFERENCE_STATUS = {  # the status codes of refused or impossible calls
    "search_bad_status": 422,
    "search_bad_sort": 422,
    "search_bad_select": 422,
    "update_missing": 404,
    "copy_missing": 409,
    "prune_bad_strategy": 422,
    "prune_keep_latest": 422,  # "keep_latest strategy is not supported in in-memory runtime"
    "get_pruned": 404,
}


async def _status_of(call: Any) -> int:
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await call
    return int(refused.value.response.status_code)


async def test_threads_are_searched_counted_updated_copied_and_pruned(sdk: Any) -> None:
    tag = str(uuid.uuid4())  # this test's threads among every other test's
    ann = await sdk.threads.create(metadata={"owner": "ann", "n": 1, "tag": tag})
    bob = await sdk.threads.create(metadata={"owner": "bob", "n": 2, "tag": tag})
    assert set(ann) >= REFERENCE_THREAD_KEYS
    await sdk.runs.wait(bob["thread_id"], "agent", input=hello())

    found = await sdk.threads.search(metadata={"owner": "ann", "tag": tag})
    assert [t["thread_id"] for t in found] == [ann["thread_id"]]
    assert set(found[0]) >= REFERENCE_THREAD_KEYS and found[0]["values"] is None
    by_id = await sdk.threads.search(ids=[bob["thread_id"]])
    assert [t["thread_id"] for t in by_id] == [bob["thread_id"]]
    assert [m["content"] for m in by_id[0]["values"]["messages"]] == ["hello", ANSWER]
    idle = await sdk.threads.search(status="idle", metadata={"owner": "bob", "tag": tag})
    assert len(idle) == 1
    assert await sdk.threads.search(status="busy", metadata={"tag": tag}) == []
    said = await sdk.threads.search(values={"messages": [{"content": ANSWER}]}, limit=1000)
    assert bob["thread_id"] in [t["thread_id"] for t in said]
    assert ann["thread_id"] not in [t["thread_id"] for t in said]
    selected = await sdk.threads.search(
        metadata={"owner": "ann", "tag": tag}, select=["thread_id", "metadata"]
    )
    assert selected == [{"thread_id": ann["thread_id"], "metadata": ann["metadata"]}]
    oldest_first = await sdk.threads.search(
        sort_by="created_at", sort_order="asc", limit=2, metadata={"tag": tag}
    )
    assert [t["metadata"]["owner"] for t in oldest_first] == ["ann", "bob"]
    page = await sdk.threads.search(
        sort_by="created_at", sort_order="asc", limit=1, offset=1, metadata={"tag": tag}
    )
    assert [t["metadata"]["owner"] for t in page] == ["bob"]
    assert await sdk.threads.count(metadata={"owner": "ann", "tag": tag}) == 1
    assert await sdk.threads.count(status="idle", metadata={"tag": tag}) == 2

    updated = await sdk.threads.update(ann["thread_id"], metadata={"n": 5, "x": "y"})
    assert updated["metadata"] == {"owner": "ann", "n": 5, "tag": tag, "x": "y"}
    assert updated["created_at"] == ann["created_at"]
    assert updated["updated_at"] > ann["updated_at"]
    assert (await sdk.threads.get(ann["thread_id"]))["metadata"] == updated["metadata"]

    ran = await sdk.threads.get(bob["thread_id"])  # its metadata name who ran on it
    assert ran["metadata"] == {**bob["metadata"], **REFERENCE_RAN_METADATA}
    by_graph = await sdk.threads.search(metadata={"graph_id": "agent", "tag": tag})
    assert [t["thread_id"] for t in by_graph] == [bob["thread_id"]]
    copied = await sdk.threads.copy(bob["thread_id"])
    assert copied["thread_id"] != bob["thread_id"] and copied["status"] == "idle"
    assert copied["metadata"] == ran["metadata"]
    state = await sdk.threads.get_state(copied["thread_id"])
    original = await sdk.threads.get_state(bob["thread_id"])
    assert state["values"] == original["values"]
    assert state["checkpoint"]["thread_id"] == copied["thread_id"]
    # the copy goes on by itself: the original does not see its turn
    await sdk.runs.wait(copied["thread_id"], "agent", input=hello("again"))
    turns = (await sdk.threads.get_state(copied["thread_id"]))["values"]["messages"]
    assert [m["content"] for m in turns] == ["hello", ANSWER, "again", "answer to again"]
    assert (await sdk.threads.get_state(bob["thread_id"]))["values"] == original["values"]

    statuses = {
        "search_bad_status": await _status_of(sdk.threads.search(status="nope")),
        "search_bad_sort": await _status_of(sdk.threads.search(sort_by="nope")),
        "search_bad_select": await _status_of(sdk.threads.search(select=["nope"])),
        "update_missing": await _status_of(sdk.threads.update(str(uuid.uuid4()), metadata={})),
        "copy_missing": await _status_of(sdk.threads.copy(str(uuid.uuid4()))),
        "prune_bad_strategy": await _status_of(
            sdk.threads.prune([ann["thread_id"]], strategy="nope")
        ),
        "prune_keep_latest": await _status_of(
            sdk.threads.prune([ann["thread_id"]], strategy="keep_latest")
        ),
    }
    assert await sdk.threads.prune([str(uuid.uuid4())]) == REFERENCE_PRUNED_NOTHING
    assert await sdk.threads.prune([bob["thread_id"]]) == REFERENCE_PRUNED
    statuses["get_pruned"] = await _status_of(sdk.threads.get(bob["thread_id"]))
    assert statuses == REFERENCE_STATUS
    assert (await sdk.threads.get(copied["thread_id"]))["thread_id"] == copied["thread_id"]

    await sdk.threads.delete(ann["thread_id"])
    assert await sdk.threads.count(metadata={"owner": "ann", "tag": tag}) == 0
    with pytest.raises(NotFoundError):
        await sdk.threads.delete(ann["thread_id"])


REFERENCE_UPDATE_KEYS = {"checkpoint", "checkpoint_id", "configurable"}
"""``threads.update_state``'s answer, as LangGraph's server gave it."""


async def test_state_at_a_checkpoint_and_state_updates(sdk: Any, scripted: Any) -> None:
    tid = (await sdk.threads.create())["thread_id"]
    await sdk.runs.wait(tid, "agent", input=hello())
    first = await sdk.threads.get_state(tid)
    await sdk.runs.wait(tid, "agent", input=hello("again"))
    at_first = await sdk.threads.get_state(tid, checkpoint_id=first["checkpoint_id"])
    assert at_first["values"] == first["values"]
    assert at_first["checkpoint_id"] == first["checkpoint_id"]
    by_config = await sdk.threads.get_state(tid, checkpoint=first["checkpoint"])
    assert by_config["values"] == first["values"]
    with pytest.raises(NotFoundError):
        await sdk.threads.get_state(tid, checkpoint_id=str(uuid.uuid4()))
    looped = await sdk.threads.get_history(tid, metadata={"source": "loop"})
    assert looped and all(h["metadata"]["source"] == "loop" for h in looped)
    assert await sdk.threads.get_history(tid, metadata={"source": "nowhere"}) == []

    note = {"role": "user", "content": "remember: blue", "id": "note-1"}
    answer = await sdk.threads.update_state(tid, {"messages": [note]})
    assert set(answer) >= REFERENCE_UPDATE_KEYS
    assert answer["checkpoint"]["thread_id"] == tid
    shown = (await sdk.threads.get_state(tid))["values"]["messages"]
    assert [m["content"] for m in shown][-2:] == ["answer to again", "remember: blue"]
    edited = {**note, "content": "remember: green"}  # same id: replaced, as add_messages does
    await sdk.threads.update_state(tid, {"messages": [edited]})
    shown = (await sdk.threads.get_state(tid))["values"]["messages"]
    assert [m["content"] for m in shown][-1:] == ["remember: green"] and len(shown) == 5

    scripted.reset()
    await sdk.runs.wait(tid, "agent", input=hello("third"))
    (sent,) = scripted.chat_requests()
    assert [m["content"] for m in sent["messages"]][-2:] == ["remember: green", "third"]

    with pytest.raises(httpx.HTTPStatusError) as refused:
        await sdk.threads.update_state(tid, {"messages": []}, as_node="model")
    assert refused.value.response.status_code == 422
    assert "as_node" in refused.value.response.json()["detail"]
    fresh = (await sdk.threads.create())["thread_id"]
    with pytest.raises(httpx.HTTPStatusError) as nothing_ran:
        await sdk.threads.update_state(fresh, {"messages": [note]})
    assert nothing_ran.value.response.status_code == 422

"""Assistants as versioned configurations of deployed agents, through the real
``langgraph_sdk`` client against ``loopline serve api`` with the services as processes:
create, update (each makes a version), get_versions, set_latest, delete, search, count,
and a run of an assistant carrying its config and context.

What LangGraph's own server (``langgraph dev``, langgraph-api 0.16.7 in memory) answered
to the same calls on a ``create_agent`` graph is kept below as data (``REFERENCE_*``,
ids and times left out).
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from tests import test_http_gateway as shared
from tests.test_http_gateway import ANSWER, hello

scripted = shared.scripted
deployment = shared.deployment
gateway = shared.gateway
sdk = shared.sdk

VOLATILE = ("assistant_id", "created_at", "updated_at")

REFERENCE_CREATED = {  # create("agent", config={"tags": ["t1"]}, metadata=..., name, description)
    "graph_id": "agent",
    "config": {"tags": ["t1"]},
    "context": {},
    "metadata": {"tag": "TAG"},
    "name": "mine",
    "version": 1,
    "description": "d1",
}
REFERENCE_UPDATED = {  # update(id, metadata={"v": 2}, name="mine2")
    **REFERENCE_CREATED,
    "metadata": {"tag": "TAG", "v": 2},
    "name": "mine2",
    "version": 2,
}
REFERENCE_VERSIONS = [  # get_versions(id): newest first
    {k: v for k, v in REFERENCE_UPDATED.items()},
    {k: v for k, v in REFERENCE_CREATED.items()},
]
REFERENCE_SET_LATEST_1 = REFERENCE_CREATED  # set_latest(id, 1), and get(id) after it
REFERENCE_STATUS = {
    "create_unknown_graph": 404,  # "Graph 'nope' not found. Expected one of: ['agent']"
    "set_latest_unknown_version": 404,  # "Version 9 not found for assistant ..."
    "create_taken_id": 409,  # "Assistant ... already exists"
    "update_unknown": 404,
    "delete_unknown": 404,  # "Assistant with ID ... not found"
    "get_deleted": 404,
}
REFERENCE_DEFAULT_NAME = "Untitled"


def _stable(shown: dict[str, Any], tag: str) -> dict[str, Any]:
    found = {k: v for k, v in shown.items() if k not in VOLATILE}
    found["metadata"] = {k: ("TAG" if v == tag else v) for k, v in found["metadata"].items()}
    return found


async def _status_of(call: Any) -> int:
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await call
    return int(refused.value.response.status_code)


async def test_an_assistant_is_created_updated_versioned_and_deleted(sdk: Any) -> None:
    tag = str(uuid.uuid4())
    made = await sdk.assistants.create(
        "agent", config={"tags": ["t1"]}, metadata={"tag": tag}, name="mine", description="d1"
    )
    assert _stable(made, tag) == REFERENCE_CREATED
    aid = made["assistant_id"]
    assert _stable(await sdk.assistants.get(aid), tag) == REFERENCE_CREATED

    updated = await sdk.assistants.update(aid, metadata={"v": 2}, name="mine2")
    assert _stable(updated, tag) == REFERENCE_UPDATED
    assert updated["created_at"] == made["created_at"]
    assert updated["updated_at"] > made["updated_at"]
    versions = await sdk.assistants.get_versions(aid)
    assert [{k: v for k, v in _stable(x, tag).items()} for x in versions] == [
        {k: v for k, v in r.items() if k != "updated_at"} for r in REFERENCE_VERSIONS
    ]
    assert [x["version"] for x in await sdk.assistants.get_versions(aid, metadata={"v": 2})] == [2]

    latest = await sdk.assistants.set_latest(aid, 1)
    assert _stable(latest, tag) == REFERENCE_SET_LATEST_1
    assert _stable(await sdk.assistants.get(aid), tag) == REFERENCE_SET_LATEST_1
    assert [a["assistant_id"] for a in await sdk.assistants.search(metadata={"tag": tag})] == [aid]
    assert await sdk.assistants.count(metadata={"tag": tag}) == 1
    assert await sdk.assistants.count(graph_id="agent") >= 2  # the deployed agent's, and this

    plain = await sdk.assistants.create("agent")
    assert plain["name"] == REFERENCE_DEFAULT_NAME and plain["version"] == 1
    same = await sdk.assistants.create(
        "agent", assistant_id=plain["assistant_id"], if_exists="do_nothing"
    )
    assert same == plain

    statuses = {
        "create_unknown_graph": await _status_of(sdk.assistants.create("nope")),
        "set_latest_unknown_version": await _status_of(sdk.assistants.set_latest(aid, 9)),
        "create_taken_id": await _status_of(
            sdk.assistants.create("agent", assistant_id=plain["assistant_id"])
        ),
        "update_unknown": await _status_of(
            sdk.assistants.update(str(uuid.uuid4()), metadata={"a": 1})
        ),
    }
    await sdk.assistants.delete(aid)
    statuses["delete_unknown"] = await _status_of(sdk.assistants.delete(aid))
    statuses["get_deleted"] = await _status_of(sdk.assistants.get(aid))
    assert statuses == REFERENCE_STATUS
    assert await sdk.assistants.count(metadata={"tag": tag}) == 0


async def test_a_run_of_an_assistant_carries_its_config_and_context(
    sdk: Any, scripted: Any
) -> None:
    """The assistant's latest version is what runs: its config and context under the
    run's own (tags added, metadata and context merged key by key), as the run's record
    shows them, and it answers as its deployed agent."""
    made = await sdk.assistants.create(
        "agent",
        config={"tags": ["from-assistant"], "metadata": {"team": "a"}},
        context={"user": "ann", "lang": "en"},
    )
    tid = (await sdk.threads.create())["thread_id"]
    values = await sdk.runs.wait(
        tid,
        made["assistant_id"],
        input=hello(),
        config={"tags": ["from-run"]},
        context={"lang": "fr"},
    )
    assert [m["content"] for m in values["messages"]] == ["hello", ANSWER]
    (run,) = await sdk.runs.list(tid)
    assert run["assistant_id"] == made["assistant_id"]
    config = run["kwargs"]["config"]
    assert config["tags"] == ["from-assistant", "from-run"]
    assert config["metadata"] == {"team": "a"}
    assert run["kwargs"]["context"] == {"user": "ann", "lang": "fr"}
    # a new version changes what the next run is given; set_latest brings the old back
    await sdk.assistants.update(made["assistant_id"], config={"tags": ["v2"]})
    await sdk.runs.wait(tid, made["assistant_id"], input=hello("again"))
    newest = (await sdk.runs.list(tid))[0]
    assert newest["kwargs"]["config"]["tags"] == ["v2"]
    await sdk.assistants.set_latest(made["assistant_id"], 1)
    await sdk.runs.wait(tid, made["assistant_id"], input=hello("third"))
    assert (await sdk.runs.list(tid))[0]["kwargs"]["config"]["tags"] == ["from-assistant"]


async def test_a_deployed_agents_assistant_is_changed_only_by_deploying(sdk: Any) -> None:
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await sdk.assistants.update("agent", metadata={"a": 1})
    assert refused.value.response.status_code == 422
    assert "loopline deploy" in refused.value.response.json()["detail"]
    with pytest.raises(httpx.HTTPStatusError) as unimplemented:
        await sdk.assistants.create("agent", config={"configurable": {"model": "x"}})
    assert unimplemented.value.response.status_code == 422
    assert "model" in unimplemented.value.response.json()["detail"]

"""Stateless runs of the Agent Server API in the background (``runs.create(None, ...)``
with ``on_completion``) and in batches (``runs.create_batch``), through the real
``langgraph_sdk`` client against ``loopline serve api`` with the services as processes.

What LangGraph's own server (``langgraph dev``, langgraph-api 0.16.7 in memory) answered
to the same calls is kept below as data (``REFERENCE_*``, ids and times left out).
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests import test_http_gateway as shared
from tests.test_http_gateway import ANSWER, hello

scripted = shared.scripted
deployment = shared.deployment
gateway = shared.gateway
sdk = shared.sdk

REFERENCE_RUN_KEYS = {
    "run_id",
    "thread_id",
    "assistant_id",
    "metadata",
    "status",
    "kwargs",
    "multitask_strategy",
    "created_at",
    "updated_at",
}
"""A run's fields, as ``runs.create(None, ...)`` and ``create_batch`` answered (loopline
leaves out ``langsmith_session_name``)."""
REFERENCE_STATUS_AT_CREATE = ("pending", "running")  # "pending" there
REFERENCE_KEPT_THREAD_STATUS = "idle"  # threads.get of on_completion="keep"'s thread
REFERENCE_THREAD_OF_A_DELETE_RUN = 404  # threads.get of on_completion="delete"'s thread
REFERENCE_BATCH_BAD_ASSISTANT = 422  # "Invalid assistant: 'nope'. ..."


async def test_a_stateless_background_run_is_joined_and_leaves_no_thread(sdk: Any) -> None:
    run = await sdk.runs.create(None, "agent", input=hello())
    assert set(run) >= REFERENCE_RUN_KEYS and run["status"] in REFERENCE_STATUS_AT_CREATE
    assert run["thread_id"]  # where the SDK joins it
    values = await sdk.runs.join(run["thread_id"], run["run_id"])
    assert [m["content"] for m in values["messages"]] == ["hello", ANSWER]
    with pytest.raises(httpx.HTTPStatusError) as gone:
        await sdk.threads.get(run["thread_id"])
    assert gone.value.response.status_code == REFERENCE_THREAD_OF_A_DELETE_RUN


async def test_a_stateless_run_that_keeps_its_thread_goes_on_there(sdk: Any) -> None:
    run = await sdk.runs.create(None, "agent", input=hello(), on_completion="keep")
    await sdk.runs.join(run["thread_id"], run["run_id"])
    thread = await sdk.threads.get(run["thread_id"])
    assert thread["status"] == REFERENCE_KEPT_THREAD_STATUS
    assert [m["content"] for m in thread["values"]["messages"]] == ["hello", ANSWER]
    assert (await sdk.runs.get(run["thread_id"], run["run_id"]))["status"] == "success"
    again = await sdk.runs.wait(run["thread_id"], "agent", input=hello("more"))
    assert len(again["messages"]) == 4


async def test_a_batch_starts_every_run_or_none(sdk: Any, scripted: Any) -> None:
    runs = await sdk.runs.create_batch(
        [
            {"assistant_id": "agent", "input": hello()},
            {"assistant_id": "agent", "input": hello("two"), "metadata": {"n": 2}},
        ]
    )
    assert len(runs) == 2 and all(set(r) >= REFERENCE_RUN_KEYS for r in runs)
    assert runs[1]["metadata"]["n"] == 2
    joined = [await sdk.runs.join(r["thread_id"], r["run_id"]) for r in runs]
    assert [v["messages"][-1]["content"] for v in joined] == [ANSWER, "answer to two"]
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await sdk.runs.create_batch(
            [
                {"assistant_id": "agent", "input": hello("never")},
                {"assistant_id": "nope", "input": hello()},
            ]
        )
    assert refused.value.response.status_code == REFERENCE_BATCH_BAD_ASSISTANT
    await asyncio.sleep(1.0)  # a run the batch had started would have asked the model by now
    prompts = [str(r["messages"][-1]["content"]) for r in scripted.chat_requests()]
    assert "never" not in prompts
    with pytest.raises(httpx.HTTPStatusError) as bad_webhook:  # refused before any run starts
        await sdk.runs.create_batch([{"assistant_id": "agent", "input": hello(), "webhook": "x"}])
    assert bad_webhook.value.response.status_code == 422
    assert "Webhook URL must be http or https" in bad_webhook.value.response.json()["detail"]

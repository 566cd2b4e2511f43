"""docs/asyncapi.json: current, deterministic, and covering every stream and event."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from contracts.events import EVENT_TYPES, event_schemas
from contracts.streams import GROUPS, SERVICES, Names
from loopline import asyncapi
from tests.support import REPO_ROOT

DOC = REPO_ROOT / "docs" / "asyncapi.json"
REGENERATE = "loopline asyncapi -o docs/asyncapi.json"
NOT_STREAMS = {
    "api_threads",  # the gateway's index of its threads (a sorted set)
    "api_thread_expiry",  # and of when those given a TTL expire
    "api_assistants",  # and of the assistants created over HTTP
    "errors",
    "deadlines",
    "consumers",
    "deployed",
    "seal_key",
    "partitions_key",
    "threads",
    "stream_requests",
    "stream_requested",
    "registry_changes",
    "api_crons",
    "api_cron_schedule",
    "api_cron_firing",
    "api_webhooks",
    "api_delayed",  # the gateway's delayed runs (a sorted set)
    "api_delayed_runs",  # and what starts each (a hash)
}  # Names properties naming other keys (and pub/sub channels)


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return asyncapi.document()


@pytest.mark.fast
def test_the_committed_document_is_current(doc: dict[str, Any]) -> None:
    assert DOC.exists(), f"{DOC} is missing: run `{REGENERATE}`"
    current = asyncapi.render(doc)
    assert DOC.read_text(encoding="utf-8") == current, (
        f"docs/asyncapi.json is not current (an event or stream changed): run `{REGENERATE}`"
    )


def test_generation_is_deterministic(doc: dict[str, Any]) -> None:
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "loopline.asyncapi"],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == asyncapi.render(doc)


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for value in node.values() for r in _refs(value)]
    if isinstance(node, list):
        return [r for value in node for r in _refs(value)]
    return []


@pytest.mark.fast
def test_every_ref_resolves(doc: dict[str, Any]) -> None:
    refs = _refs(doc)
    assert refs
    for ref in refs:
        assert ref.startswith("#/"), ref
        node: Any = doc
        for part in ref[2:].split("/"):
            part = unquote(part).replace("~1", "/").replace("~0", "~")
            assert isinstance(node, dict) and part in node, f"unresolved {ref}"
            node = node[part]


def _payload_events(doc: dict[str, Any], channel: dict[str, Any]) -> set[str]:
    schemas = doc["components"]["schemas"]
    names: set[str] = set()
    for ref in channel["messages"].values():
        message = doc["components"]["messages"][unquote(ref["$ref"].rsplit("/", 1)[1])]
        payload = unquote(message["payload"]["$ref"].rsplit("/", 1)[1])
        schema = schemas[payload]
        options = schema.get("oneOf") or schema.get("anyOf")
        if options:
            names |= {unquote(o["$ref"].rsplit("/", 1)[1]) for o in options}
        else:
            names.add(payload)
    return names


@pytest.mark.fast
def test_every_stream_and_event_is_documented(doc: dict[str, Any]) -> None:
    names = Names()
    channels = doc["channels"]
    operations = doc["operations"]
    by_address: dict[str, set[str]] = {}
    for channel in channels.values():
        by_address.setdefault(channel["address"], set()).update(_payload_events(doc, channel))

    # every stream the Names contract defines has a channel
    streams = {
        getattr(names, attr)
        for attr, value in vars(Names).items()
        if isinstance(value, property) and attr not in NOT_STREAMS
    }
    streams.add(names.task_log(asyncapi.TASK_TAG))
    streams.add(names.thread_log(asyncapi.THREAD_TAG))
    assert streams == set(by_address), "a stream is missing: add it to loopline.asyncapi"

    # every event appears on at least one channel
    documented = set().union(*by_address.values())
    assert {cls.__name__ for cls in EVENT_TYPES} <= documented

    # what the services consume: one receive operation per input stream, with its group
    received = {
        channels[op["channel"]["$ref"].rsplit("/", 1)[1]]["address"]: title
        for title, op in operations.items()
        if op["action"] == "receive"
    }
    inputs = {stream: s for s in SERVICES for stream in names.inputs_of(s)}
    assert set(received) == set(inputs)
    for stream, service in inputs.items():
        binding = channels[received[stream]]["bindings"]["redis"]
        assert binding["method"] == "xreadgroup"
        assert binding["groupName"] == GROUPS[service]

    # a few event placements that matter to clients
    assert {"TaskSubmitted", "CancelRequested", "DecisionsSubmitted"} <= by_address[names.tasks]
    log = by_address[names.task_log(asyncapi.TASK_TAG)]
    assert {"TaskSubmitted", "TaskCompleted", "TaskFailed", "ToolCompleted"} <= log
    assert by_address[names.dlq] == {"DeadLettered"}


def _normalized(schema: Any) -> Any:
    """pydantic's schema as FastStream places it: refs into components, and
    ``discriminator`` as the property name (AsyncAPI's Schema Object)."""
    if isinstance(schema, dict):
        out = {}
        for key, value in schema.items():
            if key == "$defs":
                continue
            if key == "$ref":
                value = value.replace("#/$defs/", "#/components/schemas/")
            if key == "discriminator" and isinstance(value, dict):
                value = value["propertyName"]
            out[key] = _normalized(value)
        return out
    if isinstance(schema, list):
        return [_normalized(item) for item in schema]
    return schema


@pytest.mark.fast
def test_payload_schemas_are_the_event_schemas(doc: dict[str, Any]) -> None:
    components = doc["components"]["schemas"]
    for name, schema in event_schemas().items():
        assert components[name] == _normalized(schema), name
        for sub, sub_schema in schema.get("$defs", {}).items():
            assert components[sub] == _normalized(sub_schema), (name, sub)


@pytest.mark.fast
def test_check_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "asyncapi.json"
    assert asyncapi.main(["--check", str(path)]) == 1  # missing
    assert asyncapi.main(["-o", str(path)]) == 0
    assert asyncapi.main(["--check", str(path)]) == 0
    stale = json.loads(path.read_text())
    stale["info"]["version"] = "0"
    path.write_text(json.dumps(stale))
    assert asyncapi.main(["--check", str(path)]) == 1
    assert "is not current" in capsys.readouterr().err

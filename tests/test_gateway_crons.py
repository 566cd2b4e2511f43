"""Crons and webhooks through the real ``langgraph_sdk`` client against two replicas of
``loopline serve api``, with two replicas of the loop and the model service, each its
own process, and a real HTTP receiver for the webhooks.

- ``client.crons`` answers as LangGraph's server does (``REFERENCE_*``: what
  ``langgraph dev``, langgraph-api 0.16.7 in memory, answered to the same calls, ids
  and times normalised).
- A cron fires exactly once per tick whatever the number of replicas. The schedule is
  croniter's six-field form, whose sixth field is seconds (``* * * * * */2``: every two
  seconds), which LangGraph's server reads the same way (it fired a ``*/10`` seconds
  cron every ten seconds in the recording), so the test takes seconds, not minutes.
- A cron outlives the gateway replicas: killed, and a new one fires it.
- A webhook arrives once per run with LangGraph's body and the operator's headers, a
  receiver's 503 is retried, and a host the operator's policy refuses is refused when
  the run is created (422, LangGraph's detail) and never called.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import re
import threading
import time
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from croniter import croniter
from langgraph_sdk import get_client

from loopline import create_agent
from loopline.client import Client
from loopline.testing.processes import GatewayProcess
from loopline.testing.scripted import Reply, ScriptedOpenAIServer
from services.settings import Settings
from tests.support import ServiceProcesses, unique_prefix

# -- what langgraph dev answered (ids, times and its assistant's uuid normalised) ------

REFERENCE_CREATE = {
    "assistant_id": "<assistant>",
    "created_at": "<time>",
    "cron_id": "<id>",
    "enabled": True,
    "end_time": None,
    "metadata": {"k": "v"},
    "next_run_date": "2027-01-01T00:00:00+00:00",
    "on_run_completed": "delete",
    "payload": {
        "assistant_id": "<assistant>",
        "config": {"configurable": {"cron_id": "<id>"}},
        "input": {"messages": [{"content": "hello", "role": "user"}]},
        "metadata": {"k": "v"},
        "schedule": "0 0 1 1 *",
    },
    "schedule": "0 0 1 1 *",
    "thread_id": None,
    "timezone": None,
    "updated_at": "<time>",
    "user_id": "",
}
"""``crons.create("agent", schedule="0 0 1 1 *", input=..., metadata={"k": "v"})``."""
REFERENCE_CREATE_FOR_THREAD = {
    **REFERENCE_CREATE,
    "metadata": {},
    "on_run_completed": None,
    "payload": {k: v for k, v in REFERENCE_CREATE["payload"].items() if k != "metadata"},
    "thread_id": "<id>",
}
"""``crons.create_for_thread(thread, "agent", schedule="0 0 1 1 *", input=...)``."""
REFERENCE_UPDATE = {
    **REFERENCE_CREATE,
    "enabled": False,
    "metadata": {"k": "v", "x": 1},
    "next_run_date": "2027-01-02T00:00:00+00:00",
    "payload": {
        **REFERENCE_CREATE["payload"],
        "enabled": False,
        "metadata": {"x": 1},
        "schedule": "0 0 2 1 *",
    },
    "schedule": "0 0 2 1 *",
}
"""``crons.update(cron, schedule="0 0 2 1 *", enabled=False, metadata={"x": 1})``."""
REFERENCE_ERRORS = {
    "bad schedule": (
        422,
        "Invalid cron schedule: 'not a cron'. Reason: Invalid cron schedule. Ensure the "
        "schedule uses the standard cron format (minute hour day_of_month month "
        "day_of_week). Example: '*/5 * * * *' for every 5 minutes.",
    ),
    "unknown assistant": (404, "Assistant 'nope' not found"),
    "unknown thread": (
        404,
        "Thread with ID '00000000-0000-0000-0000-000000000000' not found. Please verify "
        "the ID is correct and the thread hasn't been deleted or expired.",
    ),
    "bad timezone": (
        422,
        "Invalid timezone: 'Mars/Olympus'. Use IANA timezone format (e.g. 'America/New_York').",
    ),
    "refused webhook": (422, "Webhook domain not allowed"),
    "empty update": (400, "Request body cannot be empty"),
    "unknown cron": (404, "Cron '00000000-0000-0000-0000-000000000000' not found"),
    "deleted twice": (404, "Not Found"),
}
REFERENCE_WEBHOOK_FIELDS = {
    "assistant_id",
    "created_at",
    "kwargs",
    "langsmith_session_name",
    "metadata",
    "multitask_strategy",
    "run_ended_at",
    "run_id",
    "run_started_at",
    "status",
    "thread_id",
    "updated_at",
    "values",
    "webhook_sent_at",
}
"""The body a webhook receiver got for a run that succeeded."""

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
TIME = re.compile(r"^\d{4}-\d\d-\d\dT")
NO_THREAD = "00000000-0000-0000-0000-000000000000"


def normalised(value: Any, key: str | None = None) -> Any:
    """Ids, times (but next run dates) and the assistant's id as placeholders."""
    if isinstance(value, dict):
        return {k: normalised(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [normalised(v) for v in value]
    if isinstance(value, str):
        if key == "assistant_id":
            return "<assistant>"
        if UUID.match(value):
            return "<id>"
        if TIME.match(value) and key != "next_run_date":
            return "<time>"
    return value


# -- the receiver -----------------------------------------------------------------------


class Receiver:
    """A real HTTP server that records each POST (path, headers, JSON body); a path
    listed in ``fail_first`` is answered 503 the first time."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self.fail_first: set[str] = set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                receiver.posts.append((self.path, dict(self.headers), body))
                failing = self.path in receiver.fail_first
                receiver.fail_first.discard(self.path)
                self.send_response(503 if failing else 200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def to(self, path: str) -> list[dict[str, Any]]:
        return [body for at, _, body in self.posts if at == path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.close()


@pytest.fixture(scope="module")
def refused_receiver() -> Iterator[Receiver]:
    """Listens, but its host (``localhost``) is not in the operator's allow-list."""
    found = Receiver()
    yield found
    found.close()


# -- the deployment -------------------------------------------------------------------


def respond(body: dict[str, Any]) -> Reply:
    prompt = [m for m in body["messages"] if m.get("role") == "user"][-1]["content"]
    return Reply(content=f"answer to {prompt}")


@pytest.fixture(scope="module")
def scripted() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(responder=respond) as server:
        yield server


@pytest.fixture(scope="module")
def deployment(redis_url: str, scripted: ScriptedOpenAIServer) -> Iterator[ServiceProcesses]:
    """Two replicas of loop and of model, with a plain agent deployed as ``agent``."""
    env = {"OPENAI_BASE_URL": scripted.url, "OPENAI_API_KEY": "test"}
    services = ("loop", "model")
    with ServiceProcesses(
        redis_url, unique_prefix(), env=env, services=services, replicas=2
    ) as procs:
        asyncio.run(_deploy(procs))
        yield procs


async def _deploy(procs: ServiceProcesses) -> None:
    agent = create_agent(
        "gpt-4o-mini", redis_url=procs.redis_url, settings=Settings(prefix=procs.prefix)
    )
    async with Client(procs.redis_url, procs.prefix) as client:
        await client.deploy(agent, name="agent")


POLICY = {
    "url": {"allowed_domains": ["127.0.0.1"], "disable_loopback": False},
    "headers": {"X-Hook": "from-config"},
}
"""The operator's webhooks setting: the test's receiver on 127.0.0.1 only."""


def _gateway(deployment: ServiceProcesses) -> GatewayProcess:
    env = {"LOOPLINE_API_WEBHOOKS": json.dumps(POLICY)}
    return GatewayProcess(deployment.redis_url, deployment.prefix, env=env)


@pytest.fixture(scope="module")
def gateways(deployment: ServiceProcesses) -> Iterator[list[GatewayProcess]]:
    with _gateway(deployment) as first, _gateway(deployment) as second:
        yield [first, second]


@pytest.fixture
async def sdks(gateways: list[GatewayProcess]) -> AsyncIterator[list[Any]]:
    clients = [get_client(url=g.url, api_key=None) for g in gateways]
    yield clients
    for client in clients:
        await client.http.client.aclose()


def hello(text: str = "hello") -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


async def _answer(call: Any) -> tuple[int, str]:
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await call
    return refused.value.response.status_code, refused.value.response.json()["detail"]


# -- the routes -----------------------------------------------------------------------


async def test_the_cron_routes_answer_as_langgraphs_server(sdks: list[Any]) -> None:
    sdk, other = sdks
    thread = (await sdk.threads.create())["thread_id"]
    made = await sdk.crons.create("agent", schedule="0 0 1 1 *", input=hello(), metadata={"k": "v"})
    assert normalised(made) == REFERENCE_CREATE
    assert made["payload"]["config"]["configurable"]["cron_id"] == made["cron_id"]
    for_thread = await sdk.crons.create_for_thread(
        thread, "agent", schedule="0 0 1 1 *", input=hello()
    )
    assert normalised(for_thread) == REFERENCE_CREATE_FOR_THREAD
    assert for_thread["thread_id"] == thread
    # every replica answers for every cron (they live in Redis)
    assert await other.http.get(f"/runs/crons/{made['cron_id']}") == made
    ours = {made["cron_id"], for_thread["cron_id"]}
    found = await other.crons.search(limit=100)
    assert ours <= {c["cron_id"] for c in found}
    assert [c["cron_id"] for c in await other.crons.search(thread_id=thread)] == [
        for_thread["cron_id"]
    ]
    assert [c["cron_id"] for c in await other.crons.search(metadata={"k": "v"})] == [
        made["cron_id"]
    ]
    assert await other.crons.count(thread_id=thread) == 1
    selected = await other.crons.search(thread_id=thread, select=["cron_id", "schedule"])
    assert selected == [{"cron_id": for_thread["cron_id"], "schedule": "0 0 1 1 *"}]
    updated = await other.crons.update(
        made["cron_id"], schedule="0 0 2 1 *", enabled=False, metadata={"x": 1}
    )
    assert normalised(updated) == REFERENCE_UPDATE
    assert await other.crons.search(thread_id=thread, enabled=False) == []

    errors = {
        "bad schedule": sdk.crons.create("agent", schedule="not a cron", input=hello()),
        "unknown assistant": sdk.crons.create("nope", schedule="0 0 1 1 *", input=hello()),
        "unknown thread": sdk.crons.create_for_thread(
            NO_THREAD, "agent", schedule="0 0 1 1 *", input=hello()
        ),
        "bad timezone": sdk.crons.create(
            "agent", schedule="0 0 1 1 *", input=hello(), timezone="Mars/Olympus"
        ),
        "refused webhook": sdk.crons.create(
            "agent", schedule="0 0 1 1 *", input=hello(), webhook="http://example.com/hook"
        ),
        "empty update": sdk.crons.update(made["cron_id"]),
        "unknown cron": sdk.crons.update(NO_THREAD, enabled=True),
    }
    for name, call in errors.items():
        assert await _answer(call) == REFERENCE_ERRORS[name], name
    await sdk.crons.delete(made["cron_id"])
    await sdk.crons.delete(for_thread["cron_id"])
    assert await _answer(sdk.crons.delete(made["cron_id"])) == REFERENCE_ERRORS["deleted twice"]
    assert await sdk.crons.count(thread_id=thread) == 0
    # a thread's crons go with it, as on LangGraph's server
    doomed = await sdk.crons.create_for_thread(thread, "agent", schedule="0 0 1 1 *", input=hello())
    await sdk.threads.delete(thread)
    assert await other.crons.count(thread_id=thread) == 0
    assert await _answer(other.crons.delete(doomed["cron_id"])) == REFERENCE_ERRORS["deleted twice"]
    # what loopline does not implement is refused, never ignored
    refused = sdk.crons.create("agent", schedule="* * * * *", input=hello(), interrupt_before="*")
    status, detail = await _answer(refused)
    assert status == 422 and "interrupt_before" in detail


# -- firing ---------------------------------------------------------------------------

EVERY_2_S = "* * * * * */2"


def _ticks(schedule: str, start: datetime.datetime, end: datetime.datetime) -> int:
    """The ticks of ``schedule`` after ``start`` up to and including ``end``."""
    found, it = 0, croniter(schedule, start)
    while it.get_next(datetime.datetime) <= end:
        found += 1
    return found


async def _settled(sdk: Any, thread: str, expected: int, timeout: float = 60) -> list[Any]:
    deadline = time.monotonic() + timeout
    while True:
        runs = await sdk.runs.list(thread, limit=100)
        done = [r for r in runs if r["status"] == "success"]
        if len(done) >= expected or time.monotonic() > deadline:
            return runs
        await asyncio.sleep(0.25)


async def test_a_cron_fires_once_per_tick_with_two_gateways_and_two_loops(
    sdks: list[Any], receiver: Receiver, scripted: ScriptedOpenAIServer
) -> None:
    sdk, other = sdks
    thread = (await sdk.threads.create())["thread_id"]
    prompt = f"tick {thread}"
    hook = f"/cron/{thread}"
    end = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=9)
    cron = await sdk.crons.create_for_thread(
        thread,
        "agent",
        schedule=EVERY_2_S,
        input=hello(prompt),
        end_time=end,
        webhook=f"http://127.0.0.1:{receiver.port}{hook}",
    )
    created = datetime.datetime.fromisoformat(cron["created_at"])
    expected = _ticks(EVERY_2_S, created, datetime.datetime.fromisoformat(cron["end_time"]))
    assert expected >= 4
    await asyncio.sleep(max(0.0, (end - datetime.datetime.now(datetime.UTC)).total_seconds()))
    runs = await _settled(other, thread, expected)
    # ordinary runs of the thread, one per tick: as many as the ticks, no more
    assert len(runs) == expected, runs
    assert {r["status"] for r in runs} == {"success"}
    assert {r["multitask_strategy"] for r in runs} == {"enqueue"}
    assert {r["kwargs"]["config"]["configurable"]["cron_id"] for r in runs} == {cron["cron_id"]}
    state = await sdk.threads.get_state(thread)
    contents = [m["content"] for m in state["values"]["messages"]]
    assert contents == [prompt, f"answer to {prompt}"] * expected
    model_calls = [r for r in scripted.requests if r["messages"][-1]["content"] == prompt]
    assert len(model_calls) == expected
    # its webhook: one POST per run, each run once
    deadline = time.monotonic() + 20
    while len(receiver.to(hook)) < expected and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    await asyncio.sleep(1.0)  # a second delivery would arrive now
    posted = sorted(body["run_id"] for body in receiver.to(hook))
    assert posted == sorted(r["run_id"] for r in runs)
    # past its end it fires no more, and has no next run date
    assert (await other.http.get(f"/runs/crons/{cron['cron_id']}"))["next_run_date"] is None
    await sdk.crons.delete(cron["cron_id"])


async def test_a_cron_outlives_the_gateway_replicas(
    deployment: ServiceProcesses, gateways: list[GatewayProcess]
) -> None:
    first = get_client(url=gateways[0].url, api_key=None)
    thread = (await first.threads.create())["thread_id"]
    cron = await first.crons.create_for_thread(
        thread, "agent", schedule=EVERY_2_S, input=hello("again"), enabled=False
    )
    await first.http.client.aclose()
    for replica in gateways:
        replica.kill()  # no replica runs: nothing fires, nothing is lost
    with _gateway(deployment) as fresh:
        sdk = get_client(url=fresh.url, api_key=None)
        assert (await sdk.http.get(f"/runs/crons/{cron['cron_id']}"))["enabled"] is False
        await sdk.crons.update(cron["cron_id"], enabled=True)
        runs = await _settled(sdk, thread, 1, timeout=30)
        await sdk.crons.delete(cron["cron_id"])
        assert runs and runs[-1]["status"] == "success"
        await sdk.http.client.aclose()
    for replica in gateways:
        replica.start()  # the module's other tests use them


# -- webhooks -------------------------------------------------------------------------


async def test_a_webhook_arrives_once_per_run_and_a_refused_host_is_never_called(
    sdks: list[Any], receiver: Receiver, refused_receiver: Receiver
) -> None:
    sdk, other = sdks
    thread = (await sdk.threads.create())["thread_id"]
    url = f"http://127.0.0.1:{receiver.port}/hook/{thread}?x=1"
    receiver.fail_first.add(f"/hook/{thread}?x=1")  # the first try gets a 503: retried
    run = await sdk.runs.create(thread, "agent", input=hello("hooked"), webhook=url)
    assert run["kwargs"]["webhook"] == url
    await other.runs.join(thread, run["run_id"])
    stateless = await sdk.runs.wait(None, "agent", input=hello("stateless"), webhook=url)
    assert stateless["messages"][-1]["content"] == "answer to stateless"

    refused = f"http://localhost:{refused_receiver.port}/hook"
    for call in (
        sdk.runs.create(thread, "agent", input=hello(), webhook=refused),
        sdk.runs.wait(None, "agent", input=hello(), webhook=refused),
        sdk.crons.create("agent", schedule="* * * * *", input=hello(), webhook=refused),
    ):
        assert await _answer(call) == REFERENCE_ERRORS["refused webhook"]

    deadline = time.monotonic() + 20
    while len(receiver.to(f"/hook/{thread}?x=1")) < 3 and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    await asyncio.sleep(1.0)  # a second delivery would arrive now
    bodies = receiver.to(f"/hook/{thread}?x=1")
    # each run's once, and the one sent first twice (a 503, then its retry): the sender
    # may find both runs ended in one sweep, so either may meet the 503
    posted = [b["run_id"] for b in bodies]
    assert len(posted) == 3 and run["run_id"] in posted, posted
    assert sorted(posted.count(r) for r in set(posted)) == [1, 2], posted
    body = [b for b in bodies if b["run_id"] == run["run_id"]][-1]
    assert set(body) == REFERENCE_WEBHOOK_FIELDS
    assert body["status"] == "success" and body["thread_id"] == thread
    assert body["kwargs"]["webhook"] == url
    assert [m["content"] for m in body["values"]["messages"]] == ["hooked", "answer to hooked"]
    assert body["run_started_at"] <= body["run_ended_at"] <= body["webhook_sent_at"]
    headers = [h for at, h, _ in receiver.posts if at == f"/hook/{thread}?x=1"]
    assert {h.get("X-Hook") for h in headers} == {"from-config"}
    assert refused_receiver.posts == []


REFERENCE_FAILED_RUN = {
    "status": "error",
    "error": {
        "error": "GraphRecursionError",
        "message": "Recursion limit of 1 reached without hitting a stop condition. You can "
        "increase the limit by setting the `recursion_limit` config key.\nFor "
        "troubleshooting, visit: "
        "https://docs.langchain.com/oss/python/langgraph/errors/GRAPH_RECURSION_LIMIT",
    },
}
"""What langgraph dev posted for a run that failed (``config={"recursion_limit": 1}``):
its ``error`` is what ``join`` answers as ``__error__``, ``values`` the state it reached."""


async def test_a_failed_runs_webhook_carries_its_error(sdks: list[Any], receiver: Receiver) -> None:
    sdk, other = sdks
    thread = (await sdk.threads.create())["thread_id"]
    url = f"http://127.0.0.1:{receiver.port}/failed/{thread}"
    limit = {"recursion_limit": 1}
    run = await sdk.runs.create(thread, "agent", input=hello("x"), config=limit, webhook=url)
    joined = await other.runs.join(thread, run["run_id"])
    deadline = time.monotonic() + 20
    while not receiver.to(f"/failed/{thread}") and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    (body,) = receiver.to(f"/failed/{thread}")
    assert body["status"] == "error" and body["error"] == joined["__error__"]
    assert body["error"] == REFERENCE_FAILED_RUN["error"]  # in join and streams alike
    assert body["values"]["messages"][0]["content"] == "x"

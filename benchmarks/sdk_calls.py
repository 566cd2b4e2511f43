"""Which calls of ``langgraph_sdk``'s async client loopline's gateway answers as
LangGraph's own Agent Server answers them.

``python -m benchmarks.sdk_calls [--langgraph LANGGRAPH_CLI] [--redis-url URL]``

Every public method of the async client (``assistants``, ``threads``, ``runs``,
``crons``, ``store``), with its variants (filters, stream modes, multitask strategies,
errors), is called in the same order against two servers serving the same agent
(``create_agent`` on ``ChatOpenAI``, no tools) and the same scripted model:

- **LangGraph**: ``langgraph dev`` (langgraph-api in memory; pip ``langgraph-cli[inmem]``,
  installed apart from this project: ``--langgraph`` is the path of its ``langgraph``
  command). Its answers are written to ``benchmarks/results/sdk_calls_reference.json``;
  without ``--langgraph`` the answers recorded there are the reference.
- **loopline**: ``loopline serve api`` with the services, each its own process.

An answer is reduced to what a client relies on: the status of an error, or for a
success its shape (an object's keys, a list's items' keys, a stream's event names, a
scalar's type). A call "answers as LangGraph's" when both fail with the same status, or
both succeed and loopline's shape has everything LangGraph's has (loopline may add
fields). Calls LangGraph's server itself fails on (a 5xx, or an exception in the client)
are left out of the count. The table goes to ``benchmarks/results/sdk_calls.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
from langgraph_sdk import get_client

from benchmarks.agent_server import agent_server
from benchmarks.report import RESULTS_DIR
from benchmarks.stack import Services, drop_prefix, new_prefix
from loopline import create_agent
from loopline.client import Client
from loopline.testing.processes import GatewayProcess
from loopline.testing.scripted import Reply, ScriptedOpenAIServer
from services.settings import Settings

REFERENCE = RESULTS_DIR / "sdk_calls_reference.json"
ASSISTANT = "agent"
MODEL = "gpt-4o-mini"
SLOW_S = 2.0
"""How long the model takes to answer the prompt ``slow`` (a run to cancel or to be busy)."""

GRAPH = """\
import os

from langchain.agents import create_agent
from langchain_openai import ChatOpenAI

model = ChatOpenAI(model="gpt-4o-mini", base_url=os.environ["OPENAI_BASE_URL"], api_key="x")
graph = create_agent(model)
"""


def respond(body: dict[str, Any]) -> Reply:
    """The reply to the last user message; ``slow`` takes ``SLOW_S`` to come."""
    prompt = str([m for m in body["messages"] if m.get("role") == "user"][-1]["content"])
    if prompt == "slow":
        time.sleep(SLOW_S)
    return Reply(content=f"answer to {prompt}")


def hello(text: str = "hello") -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


# -- the calls -------------------------------------------------------------------------


@dataclass
class Ctx:
    """One server's client and what earlier calls made there (ids to call on)."""

    sdk: Any
    made: dict[str, Any] = field(default_factory=dict)

    async def thread(self, **metadata: Any) -> str:
        """A new thread that has run once."""
        tid: str = (await self.sdk.threads.create(metadata=metadata or None))["thread_id"]
        await self.sdk.runs.wait(tid, ASSISTANT, input=hello())
        return tid

    async def busy(self) -> tuple[str, str]:
        """A thread with a slow run going, and that run's id."""
        tid = (await self.sdk.threads.create())["thread_id"]
        run = await self.sdk.runs.create(tid, ASSISTANT, input=hello("slow"))
        await asyncio.sleep(0.5)
        return tid, run["run_id"]

    async def system(self) -> str:
        """The id of the assistant the server made for the agent itself (LangGraph's
        routes on an assistant take its id, not the graph's name)."""
        (found,) = await self.sdk.assistants.search(graph_id=ASSISTANT, metadata=SYSTEM)
        return str(found["assistant_id"])

    async def assistant(self) -> str:
        made = await self.sdk.assistants.create(ASSISTANT, metadata={"probe": "yes"})
        return str(made["assistant_id"])

    async def checkpoint(self, tid: str) -> dict[str, Any]:
        return dict((await self.sdk.threads.get_state(tid))["checkpoint"])


Call = Callable[[Ctx], Awaitable[Any]]


async def _stream(parts: Any) -> list[str]:
    """A stream's event names, in the order each first came. A last ``end`` is left out:
    loopline ends a run's stream with it, LangGraph's in-memory server closes the stream
    without it, and ``langgraph_sdk`` takes either as the run's end (``end`` spares it
    asking the server whether the run ended)."""
    seen: list[str] = []
    async for part in parts:
        if part.event not in seen:
            seen.append(part.event)
    return seen[:-1] if seen[-1:] == ["end"] else seen


async def _first_event(parts: Any, timeout_s: float = 5.0) -> list[str]:
    """The first event of a stream that does not end by itself."""
    iterator = parts.__aiter__()
    part = await asyncio.wait_for(iterator.__anext__(), timeout_s)
    return [part.event]


async def _thread_stream(c: Ctx) -> Any:
    async with c.sdk.threads.stream(assistant_id=ASSISTANT) as stream:
        await stream.run.start(input=hello())
        return await stream.output.with_timeout(30)


async def _thread_run_start(c: Ctx) -> Any:
    async with c.sdk.threads.stream(assistant_id=ASSISTANT) as stream:
        started = await stream.run.start(input=hello())
        await stream.output.with_timeout(30)
        return started


async def _rolled_back_then_get(c: Ctx) -> Any:
    tid, run_id = await c.busy()
    await c.sdk.runs.cancel(tid, run_id, action="rollback")
    return await c.sdk.runs.get(tid, run_id)


async def _join_thread_stream(c: Ctx) -> Any:
    tid = (await c.sdk.threads.create())["thread_id"]
    parts = await c.sdk.threads.join_stream(tid)
    waiting = asyncio.ensure_future(_first_event(parts, 10))
    await asyncio.sleep(0.3)
    await c.sdk.runs.wait(tid, ASSISTANT, input=hello())
    return await waiting


def _streamed(mode: str) -> Call:
    """A run on a new thread streamed in ``mode``."""

    async def call(c: Ctx) -> list[str]:
        tid = (await c.sdk.threads.create())["thread_id"]
        return await _stream(c.sdk.runs.stream(tid, ASSISTANT, input=hello(), stream_mode=mode))

    return call


async def _cancel(c: Ctx, **kwargs: Any) -> Any:
    tid, run_id = await c.busy()
    return await c.sdk.runs.cancel(tid, run_id, **kwargs)


async def _busy_then(c: Ctx, strategy: str) -> Any:
    tid, _ = await c.busy()
    return await c.sdk.runs.create(tid, ASSISTANT, input=hello(), multitask_strategy=strategy)


async def _cancel_many(c: Ctx, by_status: bool) -> Any:
    tid, run_id = await c.busy()
    if by_status:
        return await c.sdk.runs.cancel_many(thread_id=tid, status="running")
    return await c.sdk.runs.cancel_many(thread_id=tid, run_ids=[run_id])


async def _run_of(c: Ctx) -> tuple[str, str]:
    tid = await c.thread()
    (run,) = await c.sdk.runs.list(tid)
    return tid, str(run["run_id"])


async def _cron(c: Ctx) -> str:
    made = await c.sdk.crons.create(ASSISTANT, schedule="0 0 1 1 *", input=hello())
    return str(made["cron_id"])


async def _ns(c: Ctx) -> list[str]:
    if "ns" not in c.made:
        c.made["ns"] = ["probe", uuid.uuid4().hex]
        await c.sdk.store.put_item(c.made["ns"], "k1", {"x": 1})
        await c.sdk.store.put_item([*c.made["ns"], "deep"], "k2", {"x": 2})
    return list(c.made["ns"])


SYSTEM = {"created_by": "system"}
UNKNOWN = "00000000-0000-4000-8000-000000000000"
STEPS = [{"updates": [{"values": {"messages": []}, "as_node": "model"}]}]

CALLS: dict[str, Call] = {
    # assistants
    "assistants.get": lambda c: _then(c.system(), c.sdk.assistants.get),
    "assistants.get unknown": lambda c: c.sdk.assistants.get(UNKNOWN),
    "assistants.get_graph": lambda c: _then(c.system(), c.sdk.assistants.get_graph),
    "assistants.get_graph xray": lambda c: _then(
        c.system(), lambda a: c.sdk.assistants.get_graph(a, xray=True)
    ),
    "assistants.get_schemas": lambda c: _then(c.system(), c.sdk.assistants.get_schemas),
    "assistants.get_subgraphs": lambda c: _then(c.system(), c.sdk.assistants.get_subgraphs),
    "assistants.get_subgraphs recurse": lambda c: _then(
        c.system(), lambda a: c.sdk.assistants.get_subgraphs(a, recurse=True)
    ),
    "assistants.search": lambda c: c.sdk.assistants.search(),
    "assistants.search graph_id": lambda c: c.sdk.assistants.search(graph_id=ASSISTANT),
    "assistants.search metadata": lambda c: c.sdk.assistants.search(metadata={"no": "ne"}),
    "assistants.search sorted": lambda c: c.sdk.assistants.search(
        sort_by="created_at", sort_order="asc", limit=1
    ),
    "assistants.search select": lambda c: c.sdk.assistants.search(select=["assistant_id"]),
    "assistants.count": lambda c: c.sdk.assistants.count(),
    "assistants.count graph_id": lambda c: c.sdk.assistants.count(graph_id=ASSISTANT),
    "assistants.create": lambda c: c.sdk.assistants.create(
        ASSISTANT, config={"tags": ["a"]}, metadata={"m": 1}, name="mine", description="d"
    ),
    "assistants.create unknown graph": lambda c: c.sdk.assistants.create("nope"),
    "assistants.create taken id": lambda c: _then(
        c.assistant(), lambda a: c.sdk.assistants.create(ASSISTANT, assistant_id=a)
    ),
    "assistants.create do_nothing": lambda c: _then(
        c.assistant(),
        lambda a: c.sdk.assistants.create(ASSISTANT, assistant_id=a, if_exists="do_nothing"),
    ),
    "assistants.update": lambda c: _then(
        c.assistant(), lambda a: c.sdk.assistants.update(a, metadata={"v": 2}, name="two")
    ),
    "assistants.update unknown": lambda c: c.sdk.assistants.update(UNKNOWN, metadata={"v": 2}),
    "assistants.get_versions": lambda c: _then(
        c.assistant(), lambda a: c.sdk.assistants.get_versions(a)
    ),
    "assistants.set_latest": lambda c: _then(
        c.assistant(), lambda a: c.sdk.assistants.set_latest(a, 1)
    ),
    "assistants.set_latest unknown version": lambda c: _then(
        c.assistant(), lambda a: c.sdk.assistants.set_latest(a, 9)
    ),
    "assistants.delete": lambda c: _then(c.assistant(), c.sdk.assistants.delete),
    "assistants.delete unknown": lambda c: c.sdk.assistants.delete(UNKNOWN),
    # threads
    "threads.create": lambda c: c.sdk.threads.create(),
    "threads.create metadata": lambda c: c.sdk.threads.create(metadata={"owner": "ann"}),
    "threads.create thread_id": lambda c: c.sdk.threads.create(thread_id=str(uuid.uuid4())),
    "threads.create taken id": lambda c: _then(
        c.thread(), lambda t: c.sdk.threads.create(thread_id=t)
    ),
    "threads.create do_nothing": lambda c: _then(
        c.thread(), lambda t: c.sdk.threads.create(thread_id=t, if_exists="do_nothing")
    ),
    "threads.create supersteps": lambda c: c.sdk.threads.create(supersteps=STEPS),
    "threads.create ttl": lambda c: c.sdk.threads.create(ttl=60),
    "threads.get": lambda c: _then(c.thread(), c.sdk.threads.get),
    "threads.get unknown": lambda c: c.sdk.threads.get(UNKNOWN),
    "threads.update": lambda c: _then(
        c.thread(), lambda t: c.sdk.threads.update(t, metadata={"x": 1})
    ),
    "threads.update unknown": lambda c: c.sdk.threads.update(UNKNOWN, metadata={"x": 1}),
    "threads.search": lambda c: c.sdk.threads.search(),
    "threads.search metadata": lambda c: _then(
        c.thread(owner="bob"), lambda _: c.sdk.threads.search(metadata={"owner": "bob"})
    ),
    "threads.search status": lambda c: c.sdk.threads.search(status="idle"),
    "threads.search ids": lambda c: _then(c.thread(), lambda t: c.sdk.threads.search(ids=[t])),
    "threads.search sorted": lambda c: c.sdk.threads.search(
        sort_by="created_at", sort_order="asc", limit=2
    ),
    "threads.search select": lambda c: c.sdk.threads.search(select=["thread_id", "status"]),
    "threads.search values": lambda c: c.sdk.threads.search(values={"messages": []}),
    "threads.count": lambda c: c.sdk.threads.count(),
    "threads.count metadata": lambda c: c.sdk.threads.count(metadata={"owner": "bob"}),
    "threads.count status": lambda c: c.sdk.threads.count(status="idle"),
    "threads.copy": lambda c: _then(c.thread(), c.sdk.threads.copy),
    "threads.copy unknown": lambda c: c.sdk.threads.copy(UNKNOWN),
    "threads.prune": lambda c: _then(c.thread(), lambda t: c.sdk.threads.prune([t])),
    "threads.prune keep_latest": lambda c: _then(
        c.thread(), lambda t: c.sdk.threads.prune([t], strategy="keep_latest")
    ),
    "threads.delete": lambda c: _then(c.thread(), c.sdk.threads.delete),
    "threads.delete unknown": lambda c: c.sdk.threads.delete(UNKNOWN),
    "threads.get_state": lambda c: _then(c.thread(), c.sdk.threads.get_state),
    "threads.get_state new thread": lambda c: _then(
        c.sdk.threads.create(), lambda t: c.sdk.threads.get_state(t["thread_id"])
    ),
    "threads.get_state checkpoint_id": lambda c: _then(
        c.thread(),
        lambda t: _then(
            c.checkpoint(t),
            lambda cp: c.sdk.threads.get_state(t, checkpoint_id=cp["checkpoint_id"]),
        ),
    ),
    "threads.get_state subgraphs": lambda c: _then(
        c.thread(), lambda t: c.sdk.threads.get_state(t, subgraphs=True)
    ),
    "threads.update_state": lambda c: _then(
        c.thread(),
        lambda t: c.sdk.threads.update_state(t, {"messages": [{"role": "user", "content": "x"}]}),
    ),
    "threads.update_state as_node": lambda c: _then(
        c.thread(),
        lambda t: c.sdk.threads.update_state(
            t, {"messages": [{"role": "ai", "content": "x"}]}, as_node="model"
        ),
    ),
    "threads.get_history": lambda c: _then(c.thread(), c.sdk.threads.get_history),
    "threads.get_history limit": lambda c: _then(
        c.thread(), lambda t: c.sdk.threads.get_history(t, limit=1)
    ),
    "threads.get_history before": lambda c: _then(
        c.thread(),
        lambda t: _then(
            c.checkpoint(t),
            lambda cp: c.sdk.threads.get_history(t, before={"configurable": cp}),
        ),
    ),
    "threads.get_history metadata": lambda c: _then(
        c.thread(), lambda t: c.sdk.threads.get_history(t, metadata={"source": "loop"})
    ),
    "threads.join_stream": _join_thread_stream,
    "threads.stream": _thread_stream,
    "threads.stream run.start": _thread_run_start,
    # runs
    "runs.create": lambda c: _then(
        c.sdk.threads.create(),
        lambda t: c.sdk.runs.create(t["thread_id"], ASSISTANT, input=hello()),
    ),
    "runs.create metadata": lambda c: _then(
        c.sdk.threads.create(),
        lambda t: c.sdk.runs.create(t["thread_id"], ASSISTANT, input=hello(), metadata={"m": 1}),
    ),
    "runs.create if_not_exists": lambda c: c.sdk.runs.create(
        str(uuid.uuid4()), ASSISTANT, input=hello(), if_not_exists="create"
    ),
    "runs.create unknown thread": lambda c: c.sdk.runs.create(UNKNOWN, ASSISTANT, input=hello()),
    "runs.create unknown assistant": lambda c: _then(
        c.sdk.threads.create(),
        lambda t: c.sdk.runs.create(t["thread_id"], "nope", input=hello()),
    ),
    "runs.create stateless": lambda c: c.sdk.runs.create(None, ASSISTANT, input=hello()),
    "runs.create stateless keep": lambda c: c.sdk.runs.create(
        None, ASSISTANT, input=hello(), on_completion="keep"
    ),
    "runs.create webhook": lambda c: _then(
        c.sdk.threads.create(),
        lambda t: c.sdk.runs.create(
            t["thread_id"], ASSISTANT, input=hello(), webhook="http://127.0.0.1:9/hook"
        ),
    ),
    "runs.create after_seconds": lambda c: _then(
        c.sdk.threads.create(),
        lambda t: c.sdk.runs.create(t["thread_id"], ASSISTANT, input=hello(), after_seconds=1),
    ),
    "runs.create interrupt_before": lambda c: _then(
        c.sdk.threads.create(),
        lambda t: c.sdk.runs.create(
            t["thread_id"], ASSISTANT, input=hello(), interrupt_before=["model"]
        ),
    ),
    "runs.create busy reject": lambda c: _busy_then(c, "reject"),
    "runs.create busy enqueue": lambda c: _busy_then(c, "enqueue"),
    "runs.create busy interrupt": lambda c: _busy_then(c, "interrupt"),
    "runs.create busy rollback": lambda c: _busy_then(c, "rollback"),
    "runs.create_batch": lambda c: c.sdk.runs.create_batch(
        [{"assistant_id": ASSISTANT, "input": hello(x)} for x in ("one", "two")]
    ),
    "runs.wait": lambda c: _then(
        c.sdk.threads.create(), lambda t: c.sdk.runs.wait(t["thread_id"], ASSISTANT, input=hello())
    ),
    "runs.wait stateless": lambda c: c.sdk.runs.wait(None, ASSISTANT, input=hello()),
    "runs.wait config": lambda c: _then(
        c.sdk.threads.create(),
        lambda t: c.sdk.runs.wait(t["thread_id"], ASSISTANT, input=hello(), config={"tags": ["t"]}),
    ),
    **{
        f"runs.stream {mode}": _streamed(mode)
        for mode in (
            "values",
            "messages-tuple",
            "updates",
            "custom",
            "events",
            "debug",
            "checkpoints",
            "tasks",
        )
    },
    "runs.stream values+updates": lambda c: _then(
        c.sdk.threads.create(),
        lambda t: _stream(
            c.sdk.runs.stream(
                t["thread_id"], ASSISTANT, input=hello(), stream_mode=["values", "updates"]
            )
        ),
    ),
    "runs.stream stateless": lambda c: _stream(c.sdk.runs.stream(None, ASSISTANT, input=hello())),
    "runs.stream failed": lambda c: _then(
        c.sdk.threads.create(),
        lambda t: _stream(
            c.sdk.runs.stream(
                t["thread_id"], ASSISTANT, input=hello(), config={"recursion_limit": 1}
            )
        ),
    ),
    "runs.list": lambda c: _then(c.thread(), c.sdk.runs.list),
    "runs.list status": lambda c: _then(c.thread(), lambda t: c.sdk.runs.list(t, status="success")),
    "runs.list select": lambda c: _then(
        c.thread(), lambda t: c.sdk.runs.list(t, select=["run_id", "status"])
    ),
    "runs.get": lambda c: _then(_run_of(c), lambda tr: c.sdk.runs.get(*tr)),
    "runs.get unknown": lambda c: _then(c.thread(), lambda t: c.sdk.runs.get(t, UNKNOWN)),
    "runs.join": lambda c: _then(_run_of(c), lambda tr: c.sdk.runs.join(*tr)),
    "runs.join_stream": lambda c: _then(
        _run_of(c), lambda tr: _stream(c.sdk.runs.join_stream(*tr))
    ),
    "runs.cancel": lambda c: _cancel(c),
    "runs.cancel wait": lambda c: _cancel(c, wait=True),
    "runs.cancel rollback": lambda c: _cancel(c, action="rollback"),
    "runs.cancel rollback wait": lambda c: _cancel(c, action="rollback", wait=True),
    "runs.cancel rollback then get": _rolled_back_then_get,
    "runs.cancel rollback ended": lambda c: _then(
        _run_of(c), lambda tr: c.sdk.runs.cancel(*tr, action="rollback")
    ),
    "runs.cancel_many run_ids": lambda c: _cancel_many(c, by_status=False),
    "runs.cancel_many status": lambda c: _cancel_many(c, by_status=True),
    "runs.delete": lambda c: _then(_run_of(c), lambda tr: c.sdk.runs.delete(*tr)),
    # crons
    "crons.create": lambda c: c.sdk.crons.create(ASSISTANT, schedule="0 0 1 1 *", input=hello()),
    "crons.create_for_thread": lambda c: _then(
        c.thread(),
        lambda t: c.sdk.crons.create_for_thread(t, ASSISTANT, schedule="0 0 1 1 *", input=hello()),
    ),
    "crons.search": lambda c: c.sdk.crons.search(),
    "crons.count": lambda c: c.sdk.crons.count(),
    "crons.update": lambda c: _then(
        _cron(c), lambda i: c.sdk.crons.update(i, schedule="1 0 1 1 *")
    ),
    "crons.delete": lambda c: _then(_cron(c), c.sdk.crons.delete),
    # store
    "store.put_item": lambda c: c.sdk.store.put_item(["probe", "p"], "k", {"x": 1}),
    "store.put_item ttl": lambda c: c.sdk.store.put_item(["probe", "p"], "kt", {"x": 1}, ttl=5),
    "store.put_item empty namespace": lambda c: c.sdk.store.put_item([], "k", {"x": 1}),
    "store.get_item": lambda c: _then(_ns(c), lambda ns: c.sdk.store.get_item(ns, "k1")),
    "store.get_item missing": lambda c: _then(_ns(c), lambda ns: c.sdk.store.get_item(ns, "no")),
    "store.delete_item": lambda c: _then(_ns(c), lambda ns: c.sdk.store.delete_item(ns, "k9")),
    "store.search_items": lambda c: _then(_ns(c), c.sdk.store.search_items),
    "store.search_items filter": lambda c: _then(
        _ns(c), lambda ns: c.sdk.store.search_items(ns, filter={"x": 1})
    ),
    "store.search_items page": lambda c: _then(
        _ns(c), lambda ns: c.sdk.store.search_items(ns, limit=1, offset=1)
    ),
    "store.search_items query": lambda c: _then(
        _ns(c), lambda ns: c.sdk.store.search_items(ns, query="x")
    ),
    "store.list_namespaces": lambda c: _then(
        _ns(c), lambda ns: c.sdk.store.list_namespaces(prefix=ns)
    ),
    "store.list_namespaces max_depth": lambda c: _then(
        _ns(c), lambda ns: c.sdk.store.list_namespaces(prefix=ns, max_depth=2)
    ),
}


async def _then(first: Awaitable[Any], then: Callable[[Any], Awaitable[Any]]) -> Any:
    return await then(await first)


# -- answers and their comparison --------------------------------------------------------


def shape(value: Any) -> Any:
    """What a client relies on in an answer (see the module's docstring)."""
    if isinstance(value, dict):
        return {"keys": sorted(value)}
    if isinstance(value, list):
        if value and all(isinstance(v, str) for v in value):
            return {"events": value}  # a stream's event names
        first = value[0] if value else None
        return {"list": sorted(first) if isinstance(first, dict) else type(first).__name__}
    return {"type": type(value).__name__}


async def answer(call: Call, ctx: Ctx) -> dict[str, Any]:
    try:
        found = await asyncio.wait_for(call(ctx), 60)
    except httpx.HTTPStatusError as exc:
        return {"status": exc.response.status_code}
    except Exception as exc:  # any failure is this call's answer
        return {"exception": type(exc).__name__}
    return {"status": 200, "shape": shape(found)}


def answers_alike(theirs: dict[str, Any], ours: dict[str, Any]) -> bool:
    if theirs.get("status") != ours.get("status") or "exception" in ours:
        return False
    if "shape" not in theirs:
        return True
    want, got = theirs["shape"], ours["shape"]
    if "keys" in want:
        return "keys" in got and set(want["keys"]) <= set(got["keys"])
    if "list" in want and isinstance(want["list"], list):
        return isinstance(got.get("list"), list) and set(want["list"]) <= set(got["list"])
    return bool(want == got)


def counted(theirs: dict[str, Any]) -> bool:
    """LangGraph's server answered the call (no 5xx, no exception in the client)."""
    return "exception" not in theirs and int(theirs.get("status", 500)) < 500


async def answers(url: str) -> dict[str, dict[str, Any]]:
    sdk = get_client(url=url, api_key=None)
    ctx = Ctx(sdk)
    found = {}
    try:
        for name, call in CALLS.items():
            found[name] = await answer(call, ctx)
            print(f"  {name}: {found[name]}", flush=True)
    finally:
        await sdk.http.client.aclose()
    return found


# -- the two servers -----------------------------------------------------------------------


@contextmanager
def loopline_gateway(url: str, model_url: str) -> Iterator[str]:
    """The services and ``loopline serve api`` on a fresh prefix, the agent deployed as
    ``agent``; yields the gateway's URL. The prefix is dropped afterwards."""
    prefix = new_prefix()
    env = {"OPENAI_BASE_URL": model_url, "OPENAI_API_KEY": "unused"}
    try:
        with Services(url, prefix, env=env), GatewayProcess(url, prefix, env=env) as api:
            asyncio.run(_deploy(url, prefix))
            yield api.url
    finally:
        drop_prefix(url, prefix)


async def _deploy(url: str, prefix: str) -> None:
    agent = create_agent(MODEL, settings=Settings(redis_url=url, prefix=prefix))
    async with Client(url, prefix) as client:
        await client.deploy(agent, name=ASSISTANT)


def to_markdown(theirs: dict[str, Any], ours: dict[str, Any]) -> tuple[str, int, int]:
    names = [n for n in CALLS if counted(theirs.get(n, {"exception": "missing"}))]
    alike = [n for n in names if answers_alike(theirs[n], ours[n])]
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime())
    lines = [
        "# `langgraph_sdk` calls: loopline's gateway beside LangGraph's Agent Server",
        "",
        f"`python -m benchmarks.sdk_calls`, {when}. {len(CALLS)} calls of the async "
        f"client (every method, with variants); LangGraph's server (`langgraph dev`) answers "
        f"{len(names)}; **loopline answers {len(alike)} of those {len(names)}** as it does "
        "(same error status, or a success of the same shape; see the module's docstring).",
        "",
        "| call | LangGraph | loopline | alike |",
        "|---|---|---|---|",
    ]
    for name in CALLS:
        mark = "yes" if name in alike else ("(not counted)" if name not in names else "no")
        lines.append(f"| {name} | {_brief(theirs.get(name))} | {_brief(ours.get(name))} | {mark} |")
    return "\n".join(lines), len(alike), len(names)


def _brief(found: dict[str, Any] | None) -> str:
    if not found:
        return ""
    if "exception" in found:
        return f"raised {found['exception']}"
    return str(found["status"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--langgraph", help="the `langgraph` command: record its answers anew")
    parser.add_argument(
        "--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")
    )
    args = parser.parse_args()
    with ScriptedOpenAIServer(responder=respond) as model:
        if args.langgraph:
            print("LangGraph's server:")
            with agent_server(args.langgraph, model.url, GRAPH, ASSISTANT) as url:
                theirs = asyncio.run(answers(url))
            RESULTS_DIR.mkdir(parents=True, exist_ok=True)
            REFERENCE.write_text(json.dumps(theirs, indent=1) + "\n")
        theirs = json.loads(REFERENCE.read_text())
        print("loopline:")
        with loopline_gateway(args.redis_url, model.url) as url:
            ours = asyncio.run(answers(url))
    markdown, alike, total = to_markdown(theirs, ours)
    (RESULTS_DIR / "sdk_calls.md").write_text(markdown + "\n")
    (RESULTS_DIR / "sdk_calls.json").write_text(json.dumps(ours, indent=1) + "\n")
    print(markdown)
    print(f"\nloopline answers {alike} of {total}")


if __name__ == "__main__":
    main()

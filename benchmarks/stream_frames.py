"""LangGraph's own Agent Server's frames for a run with one tool call, recorded as the
reference for the gateway's stream modes, static breakpoints and delayed runs.

``python -m benchmarks.stream_frames --langgraph LANGGRAPH_CLI [--loopline]``

The agent is ``create_agent`` on ``ChatOpenAI`` with one tool (``add``), the model the
scripted server (a call of ``add``, then an answer). Each run goes to a new thread; the
raw SSE frames (event name and JSON data) of ``POST /threads/{id}/runs/stream`` and of
the stateless ``POST /runs/stream`` are written, for each of the modes ``events``,
``debug``, ``checkpoints``, ``tasks``, to ``benchmarks/results/stream_frames_reference.json``
(``langgraph dev``) or ``stream_frames_loopline.json`` (``--loopline``: the gateway with
the services, the same agent deployed), with what a run with ``interrupt_before`` /
``interrupt_after`` and one with ``after_seconds`` leave on their thread. The files are
what ``tests/test_gateway_stream_modes.py`` compares shapes with.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from benchmarks.agent_server import agent_server
from benchmarks.report import RESULTS_DIR
from benchmarks.stack import Services, drop_prefix, new_prefix
from loopline import create_agent
from loopline.client import Client
from loopline.testing.processes import GatewayProcess
from loopline.testing.scripted import Reply, ScriptedOpenAIServer, ScriptedToolCall
from services.settings import Settings

ASSISTANT = "agent"
MODES = ("events", "debug", "checkpoints", "tasks")
ADD = "benchmarks.tools:add"
"""The tool, by import path (the tools service imports it), as the graph below defines it."""

GRAPH = """\
import os

from langchain.agents import create_agent
from langchain_openai import ChatOpenAI


def add(a: int, b: int) -> int:
    \"\"\"Add two integers.\"\"\"
    return a + b


model = ChatOpenAI(model="gpt-4o-mini", base_url=os.environ["OPENAI_BASE_URL"], api_key="x")
graph = create_agent(model, tools=[add])
"""


def respond(body: dict[str, Any]) -> Reply:
    """A call of ``add`` first, then the answer (counted from the last user message)."""
    messages = body["messages"]
    last_user = max(i for i, m in enumerate(messages) if m.get("role") == "user")
    if any(m.get("role") == "tool" for m in messages[last_user:]):
        return Reply(content="2 + 3 is 5.")
    return Reply(tool_calls=(ScriptedToolCall("add", {"a": 2, "b": 3}, id="call_add"),))


def hello() -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "add 2 and 3"}]}


async def frames(http: httpx.AsyncClient, path: str, body: dict[str, Any]) -> list[list[Any]]:
    """The stream's frames as ``[event, data]``."""
    found: list[list[Any]] = []
    async with http.stream("POST", path, json=body, timeout=60) as response:
        response.raise_for_status()
        event = ""
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                found.append([event, json.loads(line[6:])])
    return found


async def _thread(http: httpx.AsyncClient) -> str:
    made = await http.post("/threads", json={})
    made.raise_for_status()
    return str(made.json()["thread_id"])


async def _breakpoint(http: httpx.AsyncClient, key: str, nodes: list[str]) -> dict[str, Any]:
    """A run that stops at ``key`` (``interrupt_before``/``_after``) ``nodes``, what its
    thread shows, and the run that goes on with ``input=None``."""
    tid = await _thread(http)
    run = {"assistant_id": ASSISTANT, "input": hello(), key: nodes}
    first = await http.post(f"/threads/{tid}/runs/wait", json=run, timeout=60)
    state = (await http.get(f"/threads/{tid}/state")).json()
    thread = (await http.get(f"/threads/{tid}")).json()
    runs = (await http.get(f"/threads/{tid}/runs")).json()
    on = {"assistant_id": ASSISTANT, "input": None, "stream_mode": ["values", "updates"]}
    went_on = await frames(http, f"/threads/{tid}/runs/stream", on)
    after = (await http.get(f"/threads/{tid}/state")).json()
    return {
        "wait": [first.status_code, first.json()],
        "state": state,
        "thread": thread,
        "runs": runs,
        "resumed_frames": went_on,
        "state_after": after,
    }


async def _delayed(http: httpx.AsyncClient) -> dict[str, Any]:
    tid = await _thread(http)
    body = {"assistant_id": ASSISTANT, "input": hello(), "after_seconds": 2}
    made = (await http.post(f"/threads/{tid}/runs", json=body)).json()
    soon = (await http.get(f"/threads/{tid}/runs/{made['run_id']}")).json()
    thread_soon = (await http.get(f"/threads/{tid}")).json()
    joined = (await http.get(f"/threads/{tid}/runs/{made['run_id']}/join", timeout=60)).json()
    later = (await http.get(f"/threads/{tid}/runs/{made['run_id']}")).json()
    return {
        "created": made,
        "soon": soon,
        "thread_soon": thread_soon,
        "joined": joined,
        "later": later,
    }


async def record(url: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        for mode in MODES:
            body = {"assistant_id": ASSISTANT, "input": hello(), "stream_mode": [mode]}
            tid = await _thread(http)
            found[f"thread {mode}"] = await frames(http, f"/threads/{tid}/runs/stream", body)
            found[f"stateless {mode}"] = await frames(http, "/runs/stream", body)
        tid = await _thread(http)
        body = {"assistant_id": ASSISTANT, "input": hello(), "stream_mode": list(MODES)}
        found["thread all"] = await frames(http, f"/threads/{tid}/runs/stream", body)
        for key in ("interrupt_before", "interrupt_after"):
            try:
                found[key] = await _breakpoint(http, key, ["tools"])
            except (httpx.HTTPError, KeyError) as exc:  # refused: the answer says why
                found[key] = {"error": repr(exc)}
        try:
            found["after_seconds"] = await _delayed(http)
        except (httpx.HTTPError, KeyError) as exc:  # refused: the answer says why
            found["after_seconds"] = {"error": repr(exc)}
    return found


@contextmanager
def loopline_gateway(redis_url: str, model_url: str) -> Iterator[str]:
    prefix = new_prefix()
    env = {"OPENAI_BASE_URL": model_url, "OPENAI_API_KEY": "unused"}
    try:
        with (
            Services(redis_url, prefix, env=env),
            GatewayProcess(redis_url, prefix, env=env) as api,
        ):
            asyncio.run(_deploy(redis_url, prefix))
            yield api.url
    finally:
        drop_prefix(redis_url, prefix)


async def _deploy(url: str, prefix: str) -> None:
    agent = create_agent(
        "gpt-4o-mini", tools=[ADD], settings=Settings(redis_url=url, prefix=prefix)
    )
    async with Client(url, prefix) as client:
        await client.deploy(agent, name=ASSISTANT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--langgraph", help="the `langgraph` command: record its frames")
    parser.add_argument("--loopline", action="store_true", help="record the gateway's frames")
    parser.add_argument(
        "--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")
    )
    args = parser.parse_args()
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    with ScriptedOpenAIServer(responder=respond) as model:
        if args.langgraph:
            with agent_server(args.langgraph, model.url, GRAPH, ASSISTANT) as url:
                found = asyncio.run(record(url))
            path = RESULTS_DIR / "stream_frames_reference.json"
            path.write_text(json.dumps(found, indent=1) + "\n")
            print(f"wrote {path}")
        if args.loopline:
            with loopline_gateway(args.redis_url, model.url) as url:
                found = asyncio.run(record(url))
            path = RESULTS_DIR / "stream_frames_loopline.json"
            path.write_text(json.dumps(found, indent=1) + "\n")
            print(f"wrote {path}")


if __name__ == "__main__":
    main()

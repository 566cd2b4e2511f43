"""loopline's gateway beside LangGraph's own Agent Server, as one client sees both.

``python -m benchmarks.agent_server --langgraph LANGGRAPH_CLI [--rounds N]``

The same agent (``create_agent`` on ``ChatOpenAI``, no tools) and the same streaming
scripted server (``benchmarks.streaming``'s reply), served two ways, and the same client,
``langgraph_sdk``'s ``runs.stream(stream_mode="messages-tuple")`` on a stateless run:

- **loopline**: ``loopline serve api`` with the services, each its own process;
- **agent server**: ``langgraph dev --no-reload`` (LangGraph's in-memory Agent Server,
  pip ``langgraph-cli[inmem]``; installed apart from this project, as its dependencies pin
  their own versions: ``--langgraph`` is the path of its ``langgraph`` command).

In-process ``astream(stream_mode="messages")`` runs beside them as the baseline. One run
of each side per round, interleaved; the table (printed, and written to
``benchmarks/results/agent_server.md``) gives first token (p50, p99) and tokens per
second (p50), and each server's overhead over in-process.

Read the Agent Server's figure for what it is: the development server. Its in-memory
queue looks for new runs every half second while idle (``langgraph_runtime_inmem``'s
``Runs.next`` sleeps 0.5 s when it waits), so a run's stream starts up to that much
later; the licensed server on Postgres and Redis (which cannot run here) does not work
that way.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from langgraph_sdk import get_client

from benchmarks.report import RESULTS_DIR
from benchmarks.streaming import (
    Side,
    _sides,
    deployment,
    gateway_texts,
    interleaved,
    summary,
)
from loopline import lifetime
from loopline.testing.processes import free_port

GRAPH = """\
import os

from langchain.agents import create_agent
from langchain_openai import ChatOpenAI

model = ChatOpenAI(
    model="gpt-4o-mini", base_url=os.environ["OPENAI_BASE_URL"], api_key="unused",
    stream_usage=True,
)
graph = create_agent(model)
"""


@contextmanager
def agent_server(
    langgraph: str, model_url: str, graph: str = GRAPH, name: str = "streaming"
) -> Iterator[str]:
    """``langgraph dev`` serving the module text ``graph`` (its ``graph``) as the
    assistant ``name``; yields its URL."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="loopline-agent-server-") as root:
        Path(root, "graph.py").write_text(graph)
        config = {"dependencies": ["."], "graphs": {name: "./graph.py:graph"}}
        Path(root, "langgraph.json").write_text(json.dumps(config))
        env = {
            **os.environ,
            "OPENAI_BASE_URL": model_url,
            "LANGSMITH_TRACING": "false",
            "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        }
        env.pop("PYTHONPATH", None)  # its own environment, not this project's
        proc = lifetime.spawn(
            [langgraph, "dev", "--no-browser", "--no-reload", "--port", str(port)],
            cwd=root,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_ready(url, proc)
            yield url
        finally:
            proc.terminate()
            proc.wait(timeout=20)


def _wait_ready(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("langgraph dev exited before it served")
        try:
            if httpx.get(f"{url}/ok", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise RuntimeError("langgraph dev did not answer /ok in time")


async def compare(url: str, langgraph: str, rounds: int) -> dict[str, Any]:
    with deployment(url) as deployed, agent_server(langgraph, deployed.model_url) as theirs_url:
        ours = get_client(url=deployed.api_url, api_key=None)
        theirs = get_client(url=theirs_url, api_key=None)
        base = await _sides(url, deployed.prefix, deployed.model_url, ours)
        sides: dict[str, Side] = {
            "langchain": base["langchain"],
            "loopline": base["gateway"],
            "agent_server": lambda prompt: gateway_texts(theirs, prompt),
        }
        try:
            runs = await interleaved(sides, rounds)
        finally:
            await ours.http.client.aclose()
            await theirs.http.client.aclose()
    return {
        "langchain": summary(runs["langchain"], None),
        "loopline": summary(runs["loopline"], runs["langchain"]),
        "agent_server": summary(runs["agent_server"], runs["langchain"]),
    }


def to_markdown(fig: dict[str, Any], rounds: int) -> str:
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime())
    names = {
        "langchain": "LangChain `create_agent` in-process `astream(messages)`",
        "loopline": "loopline: `loopline serve api` + services, `langgraph_sdk`",
        "agent_server": "LangGraph Agent Server: `langgraph dev` (in-memory), `langgraph_sdk`",
    }
    lines = [
        "# First token: loopline's gateway and LangGraph's Agent Server",
        "",
        f"`python -m benchmarks.agent_server`, {when}, {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.1f}. Same agent, scripted server and client; {rounds} "
        "interleaved runs per side. The Agent Server is `langgraph dev` (in-memory), whose "
        "queue looks for new runs every 0.5 s while idle (see the module's docstring).",
        "",
        "",
        "| side | first token p50 | p99 | overhead p50 vs in-process | tokens/s p50 |",
        "|---|---|---|---|---|",
    ]
    for side, name in names.items():
        row = fig[side]
        overhead = row.get("first_token_overhead_p50_ms")
        lines.append(
            f"| {name} | {row['first_token_p50_ms']:.1f} ms | {row['first_token_p99_ms']:.1f} ms"
            f" | {'' if overhead is None else f'{overhead:+.1f} ms'} | "
            f"{row['tokens_per_s_p50']:.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--langgraph", required=True, help="the `langgraph` command (its path)")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument(
        "--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")
    )
    args = parser.parse_args()
    fig = asyncio.run(compare(args.redis_url, args.langgraph, args.rounds))
    markdown = to_markdown(fig, args.rounds)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "agent_server.md").write_text(markdown + "\n")
    print(markdown)


if __name__ == "__main__":
    main()

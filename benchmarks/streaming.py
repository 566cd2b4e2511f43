"""Streaming as a client sees it: time to the first token and tokens per second.

Three clients of the same streaming scripted server (its own process, a reply of
``PIECES`` pieces, ``CHUNK_DELAY`` seconds apart, as a model generating at a rate), one run
of each in turn per round so that the machine's load falls on all alike:

- **langchain**: ``create_agent(ChatOpenAI(...)).astream(stream_mode="messages")``
  in this process (the baseline);
- **bus**: loopline with each service its own process, ``Agent.astream(stream_mode=
  "messages")`` reading the task's chunk stream on Redis;
- **gateway**: the same services behind ``loopline serve api`` (its own process),
  ``langgraph_sdk``'s ``runs.stream(stream_mode="messages-tuple")``, a stateless run;
- **gateway_http**: the same request from a client that speaks HTTP itself: ``httpx``
  (the SDK's own transport) posting the run and reading its Server-Sent Events, without
  the SDK's work around them (it encodes every request body on a worker thread).

First token: from the call to the first chunk with text. Token rate: text chunks after
the first, over the time from the first to the last.

Beside them, the floor under the gateway's overhead: ``langgraph_sdk`` against a stub on
the gateway's HTTP stack that answers at once, and against a bare asyncio server that
does (the client's own cost; ``benchmarks.http_floor``).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
from langchain.agents import create_agent as lc_create_agent
from langchain_openai import ChatOpenAI
from langgraph_sdk import get_client

from benchmarks.stack import REPO_ROOT, Services, drop_prefix, new_prefix
from benchmarks.suite import pct
from loopline import lifetime
from loopline.agent import create_agent
from loopline.client import Client
from loopline.testing.processes import GatewayProcess, ScriptedServerProcess, free_port
from services.settings import Settings

PIECE = "token "  # the scripted server streams a reply in pieces of about 8 characters
PIECES = 100
CHUNK_DELAY = 0.004  # 250 pieces a second: a fast model
MODEL = "gpt-4o-mini"
ASSISTANT = "streaming"
SIDES = ("langchain", "bus", "gateway", "gateway_http")


@dataclass
class Timing:
    """One run as its client saw it."""

    first_s: float = 0.0
    stamps: list[float] = field(default_factory=list)  # when each text chunk arrived

    def rate(self) -> float:
        if len(self.stamps) < 2 or self.stamps[-1] <= self.stamps[0]:
            return float("nan")
        return (len(self.stamps) - 1) / (self.stamps[-1] - self.stamps[0])


async def timed(texts: AsyncIterator[str]) -> Timing:
    """Times the text pieces of one streamed reply, from now."""
    start = time.perf_counter()
    timing = Timing()
    async for text in texts:
        if text:
            timing.stamps.append(time.perf_counter())
    if timing.stamps:
        timing.first_s = timing.stamps[0] - start
    return timing


def prompt_input(prompt: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": prompt}]}


async def agent_texts(agent: Any, prompt: str) -> AsyncIterator[str]:
    """LangChain's agent and loopline's Agent alike: ``astream(stream_mode="messages")``."""
    async for chunk, _ in agent.astream(prompt_input(prompt), stream_mode="messages"):
        yield str(chunk.content)


async def gateway_texts(sdk: Any, prompt: str) -> AsyncIterator[str]:
    parts = sdk.runs.stream(
        None, ASSISTANT, input=prompt_input(prompt), stream_mode="messages-tuple"
    )
    async for part in parts:
        if part.event == "messages":
            yield str(part.data[0].get("content", ""))


async def http_texts(http: httpx.AsyncClient, prompt: str) -> AsyncIterator[str]:
    """The run's ``messages`` frames read off the SSE stream with ``httpx`` alone."""
    body = {"assistant_id": ASSISTANT, "input": prompt_input(prompt)}
    body["stream_mode"] = ["messages-tuple"]
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    request = http.stream("POST", "/runs/stream", content=json.dumps(body), headers=headers)
    async with request as res:
        event = ""
        async for line in res.aiter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:") and event == "messages":
                yield str(json.loads(line[5:])[0].get("content", ""))


def summary(runs: list[Timing], baseline: list[Timing] | None) -> dict[str, Any]:
    firsts = [t.first_s for t in runs]
    rates = [t.rate() for t in runs]
    out: dict[str, Any] = {
        "first_token_p50_ms": pct(firsts, 50) * 1000,
        "first_token_p99_ms": pct(firsts, 99) * 1000,
        "tokens_per_s_p50": pct(rates, 50),
        "runs": len(runs),
        "pieces_per_run": [len(t.stamps) for t in runs][:1],
    }
    if baseline is not None:
        base = summary(baseline, None)
        out["first_token_overhead_p50_ms"] = out["first_token_p50_ms"] - base["first_token_p50_ms"]
        out["first_token_ratio_p50"] = out["first_token_p50_ms"] / base["first_token_p50_ms"]
        out["tokens_per_s_ratio"] = out["tokens_per_s_p50"] / base["tokens_per_s_p50"]
    return out


@contextmanager
def floor_server(*, raw: bool = False) -> Iterator[str]:
    """``benchmarks.http_floor`` as its own process (``raw``: the bare asyncio server);
    yields its URL."""
    port = free_port()
    proc = lifetime.spawn(
        [sys.executable, "-m", "benchmarks.http_floor", str(port), *(["--raw"] if raw else [])],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("the HTTP floor's stub did not start") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


Side = Callable[[str], AsyncIterator[str]]
"""A client's streamed texts for a prompt."""


async def interleaved(sides: dict[str, Side], rounds: int) -> dict[str, list[Timing]]:
    """``rounds`` timed runs of each side, one of each in turn per round (so that the
    machine's load falls on all alike), after a round that warms every side up."""
    runs: dict[str, list[Timing]] = {side: [] for side in sides}
    for r in range(rounds + 1):
        for side, run in sides.items():
            timing = await timed(run(f"stream r{r} {side}"))
            if r > 0:
                runs[side].append(timing)
    return runs


@dataclass(frozen=True)
class Deployment:
    """What the streaming sides run against."""

    prefix: str
    model_url: str
    """The streaming scripted server."""
    api_url: str
    """``loopline serve api`` on the services."""


@contextmanager
def deployment(url: str) -> Iterator[Deployment]:
    """The streaming scripted server (its own process), the services on a fresh prefix
    and the gateway, each its own process; the prefix is dropped afterwards."""
    prefix = new_prefix()
    reply = [{"content": PIECE * (PIECES * 8 // len(PIECE))}]
    with ScriptedServerProcess(reply, chunk_delay=CHUNK_DELAY) as model_server:
        env = {"OPENAI_BASE_URL": model_server.url, "OPENAI_API_KEY": "unused"}
        with Services(url, prefix, env=env), GatewayProcess(url, prefix, env=env) as api:
            yield Deployment(prefix, model_server.url, api.url)
    drop_prefix(url, prefix)


async def streaming(url: str, rounds: int) -> dict[str, Any]:
    """``rounds`` runs of each side, interleaved, after one warm-up run each."""
    with (
        deployment(url) as ours,
        floor_server() as floor_url,
        floor_server(raw=True) as raw_url,
    ):
        sdk = get_client(url=ours.api_url, api_key=None)
        http = httpx.AsyncClient(base_url=ours.api_url)
        raw_http = httpx.AsyncClient(base_url=raw_url)
        floor_sdk = get_client(url=floor_url, api_key=None)
        raw_sdk = get_client(url=raw_url, api_key=None)
        sides = await _sides(url, ours.prefix, ours.model_url, sdk)
        sides["gateway_http"] = lambda prompt: http_texts(http, prompt)
        sides["floor"] = lambda prompt: gateway_texts(floor_sdk, prompt)
        sides["sdk_floor"] = lambda prompt: gateway_texts(raw_sdk, prompt)
        sides["http_floor"] = lambda prompt: http_texts(raw_http, prompt)
        try:
            runs = await interleaved(sides, rounds)
        finally:
            await sdk.http.client.aclose()
            await http.aclose()
            await raw_http.aclose()
            await floor_sdk.http.client.aclose()
            await raw_sdk.http.client.aclose()
    base = runs["langchain"]
    floor = [t.first_s for t in runs["floor"]]
    return {
        "langchain": summary(base, None),
        "bus": summary(runs["bus"], base),
        "gateway": summary(runs["gateway"], base),
        "gateway_http": summary(runs["gateway_http"], base),
        "http_floor_p50_ms": pct(floor, 50) * 1000,
        "sdk_floor_p50_ms": pct([t.first_s for t in runs["sdk_floor"]], 50) * 1000,
        "http_client_floor_p50_ms": pct([t.first_s for t in runs["http_floor"]], 50) * 1000,
        "pieces": PIECES,
        "chunk_delay_ms": CHUNK_DELAY * 1000,
    }


async def _sides(url: str, prefix: str, model_url: str, sdk: Any) -> dict[str, Side]:
    """Each side's streamed texts for a prompt, by name; loopline's agent deployed under
    ``ASSISTANT`` for the gateway."""
    settings = Settings(redis_url=url, prefix=prefix)
    ours = create_agent(MODEL, settings=settings)
    async with Client(url, prefix) as client:
        await client.deploy(ours, name=ASSISTANT)
    model = ChatOpenAI(model=MODEL, base_url=model_url, api_key="unused", stream_usage=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = lc_create_agent(model)
    return {
        "langchain": lambda prompt: agent_texts(theirs, prompt),
        "bus": lambda prompt: agent_texts(ours, prompt),
        "gateway": lambda prompt: gateway_texts(sdk, prompt),
    }


def to_markdown(fig: dict[str, Any], environment: dict[str, Any]) -> str:
    """The streaming table, with the run's conditions."""
    lines = [
        "# Streaming: first token and token rate, as a client sees them",
        "",
        f"Run {environment.get('when', '')} on {environment.get('machine', '')}; Redis: "
        f"{environment.get('redis', '')}. The machine was shared with other work while this "
        "ran (see the load average): absolute figures are noisy, the ratios compare runs "
        "interleaved in the same rounds.",
        "",
        f"Same scripted server (its own process): one reply of {fig['pieces']} pieces, "
        f"{fig['chunk_delay_ms']:g} ms apart. {fig['langchain']['runs']} runs per side.",
        "",
        "| side | first token p50 | p99 | overhead p50 vs in-process | tokens/s p50 | "
        "rate vs in-process |",
        "|---|---|---|---|---|---|",
    ]
    names = {
        "langchain": "LangChain `create_agent` in-process `astream(messages)`",
        "bus": "loopline, services as processes, `Agent.astream(messages)` on the bus",
        "gateway": "loopline, `loopline serve api` + `langgraph_sdk` `runs.stream`",
        "gateway_http": "loopline, `loopline serve api` + `httpx` reading the SSE itself",
    }
    for side in SIDES:
        row = fig[side]
        overhead = row.get("first_token_overhead_p50_ms")
        ratio = row.get("tokens_per_s_ratio")
        lines.append(
            f"| {names[side]} | {row['first_token_p50_ms']:.1f} ms | "
            f"{row['first_token_p99_ms']:.1f} ms | "
            f"{'' if overhead is None else f'{overhead:+.1f} ms'} | "
            f"{row['tokens_per_s_p50']:.0f} | "
            f"{'' if ratio is None else f'{ratio:.2f}x'} |"
        )
    lines += [
        "",
        "Targets (issue 17): first-token overhead at most 2 ms p50 over in-process, no "
        "lower token rate.",
        "",
    ]
    if "http_floor_p50_ms" in fig:
        lines += [
            f"HTTP floor: `langgraph_sdk`'s `runs.stream` to the first `messages` frame of a "
            f"stub on the gateway's HTTP stack (Starlette on uvicorn) that answers at once, no "
            f"bus behind it (`benchmarks/http_floor.py`): {fig['http_floor_p50_ms']:.1f} ms "
            "p50. A front door of this kind costs a client at least that much; the gateway's "
            "overhead above overlaps part of it with the task's own start.",
            "",
        ]
    if "sdk_floor_p50_ms" in fig:
        lines += [
            f"Of that, the client's own part: the same call to a bare asyncio server that "
            f"answers at once (`http_floor.py --raw`, no HTTP framework): "
            f"{fig['sdk_floor_p50_ms']:.1f} ms p50; with `httpx` alone (the `gateway_http` "
            f"client): {fig.get('http_client_floor_p50_ms', float('nan')):.1f} ms p50.",
            "",
        ]
    return "\n".join(lines)

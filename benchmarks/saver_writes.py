"""What writing a thread's checkpoints to the user's LangGraph saver costs: one run (a
tool call and an answer: 5 checkpoints, a superstep each) by LangChain's ``create_agent``
and by loopline's (embedded, its services in this process) on the same
``PostgresSaver`` and on ``InMemorySaver``s, the same scripted replies: the median
``invoke`` of each, the part of loopline's spent writing the run's checkpoints
(``loopline.checkpoints.write_run``), and the bytes PostgreSQL holds for one such thread.

    python -m benchmarks.saver_writes [--runs 20] [--redis redis://127.0.0.1:6379/0]
        [--postgres postgresql://postgres@127.0.0.1:5432/test]

Needs a Redis and a PostgreSQL; writes threads of its own (random ids) in the saver's
tables.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from contracts.replies import Reply, ScriptedToolCall


def respond(body: dict[str, Any]) -> Reply:
    if body["messages"][-1]["role"] == "user":
        return Reply(tool_calls=(ScriptedToolCall("add", {"a": 1, "b": 2}),))
    return Reply(content="3")


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@contextmanager
def timed_writes(spent: list[float]) -> Iterator[None]:
    """Each ``write_run`` the agent makes, timed into ``spent``."""
    import loopline.agent as agent_module

    original = agent_module.write_run

    async def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await original(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - started)

    agent_module.write_run = timed  # type: ignore[assignment]
    try:
        yield
    finally:
        agent_module.write_run = original  # type: ignore[assignment]


def thread_bytes(url: str, thread_id: str) -> int:
    import psycopg

    total = 0
    with psycopg.connect(url) as conn:
        for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
            row = conn.execute(
                f"select coalesce(sum(pg_column_size(t.*)), 0) from {table} t "
                "where thread_id = %s",
                (thread_id,),
            ).fetchone()
            total += int(row[0]) if row else 0
    return total


def median_ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 1)


def run_both(
    make_saver: Callable[[], Any], runs: int, url: str, lc_url: str, ll_url: str, prefix: str
) -> dict[str, Any]:
    from langchain.agents import create_agent as lc_create_agent
    from langchain_openai import ChatOpenAI

    from loopline import create_agent
    from services.settings import Settings

    def model(base_url: str) -> ChatOpenAI:
        return ChatOpenAI(model="gpt-4o-mini", base_url=base_url, api_key="test")

    lc = lc_create_agent(model(lc_url), [add], checkpointer=make_saver())
    ll = create_agent(
        model(ll_url), [add], checkpointer=make_saver(), settings=Settings(prefix=prefix)
    )
    times: dict[str, list[float]] = {"langchain": [], "loopline": []}
    spent: list[float] = []
    threads: dict[str, str] = {}
    with timed_writes(spent):
        for _ in range(runs):
            for side, agent in (("langchain", lc), ("loopline", ll)):
                thread = f"bench-{side}-{uuid.uuid4().hex[:8]}"
                threads[side] = thread
                started = time.perf_counter()
                agent.invoke({"messages": "add"}, {"configurable": {"thread_id": thread}})
                times[side].append(time.perf_counter() - started)
    figures: dict[str, Any] = {f"{k} invoke ms": median_ms(v) for k, v in times.items()}
    figures["loopline write_run ms"] = median_ms(spent)
    if url:
        figures.update({f"{k} bytes per thread": thread_bytes(url, t) for k, t in threads.items()})
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.checkpoint.postgres import PostgresSaver

    import loopline.embedded
    from loopline.testing.scripted import ScriptedOpenAIServer

    os.environ.pop("REDIS_URL", None)
    os.environ.setdefault("LOOPLINE_ALLOWED_MODULES", "benchmarks")
    loopline.embedded.embedded_url = lambda: args.redis  # type: ignore[assignment]
    prefix = f"bench-saver-{uuid.uuid4().hex[:6]}"
    os.environ["LOOPLINE_PREFIX"] = prefix
    with (
        ScriptedOpenAIServer(responder=respond) as lc_server,
        ScriptedOpenAIServer(responder=respond) as ll_server,
        PostgresSaver.from_conn_string(args.postgres) as postgres,
    ):
        postgres.setup()
        for name, make in (("InMemorySaver", InMemorySaver), ("PostgresSaver", lambda: postgres)):
            url = args.postgres if name == "PostgresSaver" else ""
            figures = run_both(make, args.runs, url, lc_server.url, ll_server.url, prefix)
            print(name, figures)


if __name__ == "__main__":
    main()

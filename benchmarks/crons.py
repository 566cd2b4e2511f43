"""How late a cron's tick starts its run, and how soon a run's webhook arrives.

``python -m benchmarks.crons [--seconds N] [--runs N] [--redis-url URL]``

Two replicas of ``loopline serve api`` and two of the loop and the model service, each
its own process, on a private Redis (``benchmarks.stack``); a plain agent on the
scripted model. Measured with ``langgraph_sdk`` and a real HTTP receiver:

- **cron lateness**: a thread cron every second (``* * * * * *``, croniter's seconds
  field) for ``--seconds``; for each tick, its run's ``created_at`` minus the tick, and
  whether every tick ran once (runs per tick);
- **webhook latency**: ``--runs`` runs with ``webhook=``, one after another; the time the
  receiver got the POST minus the run's ``run_ended_at`` (the last entry of its log).

LangGraph's in-memory server, for comparison, looks for due crons every 5 s
(``CRON_SCHEDULER_SLEEP_TIME``) and posts a webhook from the worker that ran the run.
The table is printed and written to ``benchmarks/results/crons.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import statistics
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from langgraph_sdk import get_client

from benchmarks.report import RESULTS_DIR
from benchmarks.stack import RedisServer, new_prefix
from loopline import create_agent
from loopline.client import Client
from loopline.testing.processes import GatewayProcess, ServiceProcesses
from loopline.testing.scripted import Reply, ScriptedOpenAIServer
from services.settings import Settings

LANGGRAPH_SEEN = (
    "For comparison, LangGraph's in-memory server (`langgraph dev`, langgraph-api 0.16.7) "
    "on the same machine, a thread cron `* * * * * */10` with a webhook: ticks due at "
    ":40, :50, :00 made runs at :43.6, :53.6, :03.6 (3.6 s late: it looks every 5 s), "
    "and each webhook left 0.4-2.4 ms after its run ended (posted by the worker that ran "
    "it, in the same process)."
)

POLICY = {"url": {"allowed_domains": ["127.0.0.1"], "disable_loopback": False}}


class Receiver:
    """Records when each POST arrived, and the run's end its body gives, by run id."""

    def __init__(self) -> None:
        self.arrived: dict[str, list[float]] = {}
        self.ended: dict[str, float] = {}
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                receiver.arrived.setdefault(body["run_id"], []).append(time.time())
                ended = datetime.datetime.fromisoformat(body["run_ended_at"])
                receiver.ended[body["run_id"]] = ended.timestamp()
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def _ms(values: list[float]) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"{statistics.median(ordered) * 1000:.0f} ms / {p99 * 1000:.0f} ms"


async def measure(gateway_urls: list[str], receiver: Receiver, seconds: int, runs: int) -> str:
    sdk, other = (get_client(url=u, api_key=None) for u in gateway_urls)
    hello: dict[str, Any] = {"messages": [{"role": "user", "content": "tick"}]}
    thread = (await sdk.threads.create())["thread_id"]
    start = datetime.datetime.now(datetime.UTC)
    end = start + datetime.timedelta(seconds=seconds)
    cron = await sdk.crons.create_for_thread(
        thread, "agent", schedule="* * * * * *", input=hello, end_time=end
    )
    await asyncio.sleep(seconds + 3)
    await sdk.crons.delete(cron["cron_id"])
    fired = await other.runs.list(thread, limit=1000)
    created = sorted(datetime.datetime.fromisoformat(str(r["created_at"])) for r in fired)
    ticks = [
        start.replace(microsecond=0) + datetime.timedelta(seconds=i + 1) for i in range(seconds)
    ]
    lateness = [(c - t).total_seconds() for c, t in zip(created, ticks, strict=False)]

    latency = []
    for _ in range(runs):
        t = (await sdk.threads.create())["thread_id"]
        run = await sdk.runs.create(t, "agent", input=hello, webhook=receiver.url)
        await other.runs.join(t, run["run_id"])
        deadline = time.monotonic() + 10
        while run["run_id"] not in receiver.arrived and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        latency.append(receiver.arrived[run["run_id"]][0] - receiver.ended[run["run_id"]])
    await asyncio.sleep(1)
    once = all(len(v) == 1 for v in receiver.arrived.values())
    return "\n".join(
        [
            "| measure | p50 / p99 | count |",
            "|---|---|---|",
            f"| cron tick → its run created | {_ms(lateness)} | {len(fired)} runs for "
            f"{len(ticks)} ticks |",
            f"| run ended → webhook received | {_ms(latency)} | {len(latency)} runs, "
            f"{'each posted once' if once else 'SOME POSTED TWICE'} |",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--redis-url", default=None)
    args = parser.parse_args()
    redis = RedisServer(args.redis_url).start()
    prefix = new_prefix()
    receiver = Receiver()
    with ScriptedOpenAIServer(responder=lambda body: Reply(content="ok")) as model:
        env = {"OPENAI_BASE_URL": model.url, "OPENAI_API_KEY": "bench"}
        services = ServiceProcesses(redis.url, prefix, env=env, services=("loop", "model"))
        services.replicas = 2
        with services:
            asyncio.run(_deploy(redis.url, prefix))
            gateway_env = {"LOOPLINE_API_WEBHOOKS": json.dumps(POLICY)}
            with (
                GatewayProcess(redis.url, prefix, env=gateway_env) as first,
                GatewayProcess(redis.url, prefix, env=gateway_env) as second,
            ):
                table = asyncio.run(
                    measure([first.url, second.url], receiver, args.seconds, args.runs)
                )
    redis.stop()
    text = (
        "# Crons and webhooks\n\n"
        f"`python -m benchmarks.crons --seconds {args.seconds} --runs {args.runs}`, "
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC: two gateway replicas, "
        "two loop and two model replicas, a plain agent on the scripted model.\n\n"
        f"{table}\n\n{LANGGRAPH_SEEN}\n"
    )
    print(text)
    (RESULTS_DIR / "crons.md").write_text(text)


async def _deploy(url: str, prefix: str) -> None:
    agent = create_agent("gpt-4o-mini", redis_url=url, settings=Settings(prefix=prefix))
    async with Client(url, prefix) as client:
        await client.deploy(agent, name="agent")


if __name__ == "__main__":
    main()

"""Sync and async as LangChain has them: ``invoke``/``stream`` run the sync variant of each
middleware hook (``before_model``, ``wrap_model_call``, ``wrap_tool_call``), ``ainvoke``
the async one; a hook missing the variant a run needs fails as LangChain's does
(LangGraph's TypeError for a before/after hook, LangChain's NotImplementedError for a
``wrap_*`` hook); ``invoke()`` works inside a running event loop. The same agents through
LangChain's ``create_agent`` and through loopline (deployed: every service its own
process; embedded: one process), against twin scripted servers: the same requests (the
middleware write the variant that ran into them), the same result or exception."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from langchain.agents import create_agent as lc_create_agent
from langchain_openai import ChatOpenAI

from contracts.agent import ModelSpec
from contracts.replies import Reply, ScriptedToolCall
from loopline import create_agent
from loopline.testing.scripted import ScriptedOpenAIServer, first_user_text
from services.settings import Settings
from tests import tooling, variants
from tests.error_cases import outcome
from tests.support import REPO_ROOT, ServiceProcesses

# one event loop for the module's async tests: langchain-openai's shared async HTTP
# client is bound to the loop that first used it
one_loop = pytest.mark.asyncio(loop_scope="module")

SCRIPTS = {"variants": [Reply(tool_calls=(ScriptedToolCall("add", {"a": 1, "b": 2}),)), Reply("3")]}
MIDDLEWARE = [
    "BothWays",
    "AsyncOnlyBefore",
    "SyncOnlyWrapModel",
    "AsyncOnlyWrapTool",
    "SyncOnlyBefore",
]


def lc_agent(server: ScriptedOpenAIServer, middleware: str) -> Any:
    """A fresh model per run: ChatOpenAI's async client belongs to the loop that made it."""
    model = ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="test", max_retries=0)
    return lc_create_agent(model, [tooling.add], middleware=[getattr(variants, middleware)()])


def ll_agent(stack: ServiceProcesses, middleware: str) -> Any:
    return create_agent(
        ModelSpec(name="gpt-4o-mini", params={"max_retries": 0}),
        [tooling.add],
        middleware=[getattr(variants, middleware)()],
        redis_url=stack.redis_url,
        settings=Settings(prefix=stack.prefix),
    )


async def aoutcome(run: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    """``outcome`` of an async run."""
    raised: list[Exception] = []
    try:
        result = await run()
    except Exception as exc:
        raised.append(exc)

    def again() -> dict[str, Any]:
        if raised:
            raise raised[0]
        return result

    return outcome(again)


def requests_for(server: ScriptedOpenAIServer, prompt: str) -> list[dict[str, Any]]:
    return [r for r in server.chat_requests() if first_user_text(r) == prompt]


def same_requests(servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer], prompt: str) -> Any:
    lc, ll = (requests_for(s, prompt) for s in servers)
    assert ll == lc
    return lc


@pytest.mark.parametrize("middleware", MIDDLEWARE)
def test_invoke_runs_the_sync_variants(
    middleware: str,
    stack: ServiceProcesses,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
) -> None:
    prompt = f"variants {middleware} invoke"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lc = outcome(lambda: lc_agent(servers[0], middleware).invoke({"messages": prompt}))
    ours = outcome(lambda: ll_agent(stack, middleware).invoke({"messages": prompt}))
    assert ours == lc
    sent = str(same_requests(servers, prompt))
    assert "async" not in sent


@one_loop
@pytest.mark.parametrize("middleware", MIDDLEWARE)
async def test_ainvoke_runs_the_async_variants(
    middleware: str,
    stack: ServiceProcesses,
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
) -> None:
    prompt = f"variants {middleware} ainvoke"
    lc = await aoutcome(lambda: lc_agent(servers[0], middleware).ainvoke({"messages": prompt}))
    ours = await aoutcome(lambda: ll_agent(stack, middleware).ainvoke({"messages": prompt}))
    assert ours == lc
    sent = str(same_requests(servers, prompt))
    if middleware != "SyncOnlyBefore":
        assert ":sync" not in sent


def test_the_cases_show_what_they_claim(
    servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer],
) -> None:
    """Read from LangChain's side (module order: after the runs above)."""
    lc_server, _ = servers
    both = str(requests_for(lc_server, "variants BothWays invoke")[-1])
    assert all(f"{hook}:sync" in both for hook in ("before_model", "wrap_model_call"))
    assert "wrap_tool_call:sync" in both
    both = str(requests_for(lc_server, "variants BothWays ainvoke")[-1])
    assert all(f"{hook}:async" in both for hook in ("before_model", "wrap_model_call"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raised = outcome(
            lambda: lc_agent(lc_server, "AsyncOnlyBefore").invoke({"messages": "variants x"})
        )
    assert raised["raised"][:2] == ["builtins", "TypeError"]


@one_loop
async def test_invoke_and_stream_work_inside_a_running_event_loop(
    stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    """As LangChain's: a blocking call from async code (a Jupyter cell) runs."""
    asyncio.get_running_loop()
    prompt = "variants BothWays in a loop"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lc = lc_agent(servers[0], "BothWays").invoke({"messages": prompt})
    ours = ll_agent(stack, "BothWays").invoke({"messages": prompt})
    assert outcome(lambda: ours) == outcome(lambda: lc)
    same_requests(servers, prompt)
    streamed = list(ll_agent(stack, "BothWays").stream({"messages": f"{prompt} streamed"}))
    assert streamed[-1]["messages"][-1].content == "3"


EMBEDDED = r"""
import asyncio, json, sys, warnings
warnings.simplefilter("ignore")
from langchain_openai import ChatOpenAI
from loopline import create_agent
from loopline.testing.harness import twin_servers
from tests import tooling, variants
from tests.error_cases import outcome
from tests.test_sync_async import MIDDLEWARE, SCRIPTS, aoutcome, lc_agent, requests_for

def ours(server, name):
    model = ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="test", max_retries=0)
    return create_agent(model, [tooling.add], middleware=[getattr(variants, name)()])

out = {}
with twin_servers(SCRIPTS) as (lc_server, ll_server):
    for name in MIDDLEWARE:
        prompt = f"variants {name} invoke"
        lc = outcome(lambda: lc_agent(lc_server, name).invoke({"messages": prompt}))
        ll = outcome(lambda: ours(ll_server, name).invoke({"messages": prompt}))
        out[prompt] = [lc, ll, requests_for(lc_server, prompt), requests_for(ll_server, prompt)]

    async def in_a_loop():  # one loop: langchain-openai's async HTTP client is bound to it
        for name in MIDDLEWARE:
            prompt = f"variants {name} ainvoke"
            lc = await aoutcome(lambda: lc_agent(lc_server, name).ainvoke({"messages": prompt}))
            ll = await aoutcome(lambda: ours(ll_server, name).ainvoke({"messages": prompt}))
            out[prompt] = [lc, ll, requests_for(lc_server, prompt), requests_for(ll_server, prompt)]
        prompt = "variants BothWays in a loop"
        lc = outcome(lambda: lc_agent(lc_server, "BothWays").invoke({"messages": prompt}))
        ll = outcome(lambda: ours(ll_server, "BothWays").invoke({"messages": prompt}))
        out[prompt] = [lc, ll, requests_for(lc_server, prompt), requests_for(ll_server, prompt)]

    asyncio.run(in_a_loop())
print(json.dumps(out))
"""


def test_embedded_runs_the_variants_as_langchain() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "OPENAI_BASE_URL")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", EMBEDDED],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(runs) == 2 * len(MIDDLEWARE) + 1
    for prompt, (lc, ll, lc_requests, ll_requests) in runs.items():
        assert ll == lc, prompt
        assert ll_requests == lc_requests, prompt
    assert runs["variants AsyncOnlyBefore invoke"][0]["raised"][1] == "TypeError"
    assert runs["variants SyncOnlyWrapModel ainvoke"][0]["raised"][1] == "NotImplementedError"

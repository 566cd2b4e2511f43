"""A tool with a sync and an async variant runs the one LangChain's run runs: ``invoke``
and ``stream`` call the sync variant (LangGraph's tool node calls ``tool.invoke``),
``ainvoke`` the async one. Its answer names the variant, so the model's next request
shows which ran; the same agent through LangChain and through loopline, embedded and
deployed (services as processes), against twin scripted servers."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent as lc_create_agent

from contracts.agent import ModelSpec
from contracts.replies import Reply, ScriptedToolCall
from loopline import create_agent
from loopline.testing.scripted import ScriptedOpenAIServer
from services.settings import Settings
from tests import tooling
from tests.error_cases import model_for
from tests.support import ServiceProcesses

# one event loop for the module: langchain-openai's shared async HTTP client is bound to
# the loop that first used it
pytestmark = pytest.mark.asyncio(loop_scope="module")

SCRIPTS = {
    f"variant {how}": [
        Reply(tool_calls=(ScriptedToolCall("both_variants", {"text": how}),)),
        Reply("done"),
    ]
    for how in ("invoke", "ainvoke", "stream", "deployed invoke", "deployed ainvoke")
}


def tool_answers(server: ScriptedOpenAIServer, prompt: str) -> list[str]:
    return [
        str(m["content"])
        for r in server.chat_requests()
        if prompt in str(r["messages"])
        for m in r["messages"]
        if m["role"] == "tool"
    ]


async def run(agent: Any, how: str) -> None:
    given = {"messages": [{"role": "user", "content": f"variant {how}"}]}
    if how.endswith("ainvoke"):
        await agent.ainvoke(given)
    elif how.endswith("stream"):
        list(agent.stream(given))
    else:
        agent.invoke(given)


@pytest.mark.parametrize("how", ["invoke", "ainvoke", "stream"])
async def test_embedded_runs_the_variant_langchain_runs(
    how: str, embedded: None, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    await run(lc_create_agent(model_for(servers[0]), [tooling.both_variants]), how)
    await run(create_agent(model_for(servers[1]), [tooling.both_variants]), how)
    expected = "sync" if how != "ainvoke" else "async"
    lc_answers = tool_answers(servers[0], f"variant {how}")
    assert lc_answers == [f"the {expected} variant got {how}"]
    assert tool_answers(servers[1], f"variant {how}") == lc_answers


@pytest.mark.parametrize("how", ["deployed invoke", "deployed ainvoke"])
async def test_deployed_runs_the_variant_langchain_runs(
    how: str, stack: ServiceProcesses, servers: tuple[ScriptedOpenAIServer, ScriptedOpenAIServer]
) -> None:
    await run(lc_create_agent(model_for(servers[0]), [tooling.both_variants]), how)
    agent = create_agent(
        ModelSpec(name="gpt-4o-mini", params={"max_retries": 0}),
        ["tests.tooling:both_variants"],
        redis_url=stack.redis_url,
        settings=Settings(prefix=stack.prefix),
    )
    await run(agent, how)
    lc_answers = tool_answers(servers[0], how)
    assert lc_answers and tool_answers(servers[1], how) == lc_answers

"""The operator's view of the page (``GET /ui/ops``) in a real browser (Debian's headless
``chromium`` driven by Playwright) against ``loopline serve api`` and every service as
its own process: each service's backlog and rate, what waits for a human across the
deployment (approved, edited and rejected by clicks, and each task then ends as the
decision says), a failed run under the stage that ended it with its reason, a dead
letter replayed and another dropped, and threads searched by status and metadata with
their runs. A screenshot is kept (``tests/artifacts/ops.png``).

Without chromium or Playwright the tests skip and say why, unless CI asks for them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain.agents.middleware import HumanInTheLoopMiddleware

from contracts import HumanMessage, TaskCompleted, TaskFailed, ToolMessage
from contracts.streams import DATA_FIELD
from loopline import create_agent
from loopline.client import Client
from loopline.testing.processes import GatewayProcess
from loopline.testing.scripted import Reply, ScriptedOpenAIServer, ScriptedToolCall
from services.settings import Settings
from tests import tooling
from tests.support import ServiceProcesses, unique_prefix, wait_for
from tests.test_page import _keep, chromium_or_skip


def _reply(request: dict[str, Any]) -> Reply:
    """A gated ``add`` for a prompt naming numbers, ``explode`` for "explode", then the
    tool's result as the answer."""
    messages = request["messages"]
    last = messages[-1]
    if last["role"] == "tool":
        return Reply(content=f"result: {last['content']}")
    prompt = str(last["content"])
    if prompt.startswith("explode"):
        return Reply(tool_calls=(ScriptedToolCall("explode", {"x": 7}),))
    a, b = (int(n) for n in prompt.split()[1:3])
    return Reply(tool_calls=(ScriptedToolCall("add", {"a": a, "b": b}),))


@pytest.fixture(scope="module")
def chromium() -> str:
    return chromium_or_skip()


@pytest.fixture(scope="module")
def scripted() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(responder=_reply) as server:
        yield server


@pytest.fixture(scope="module")
def deployment(
    chromium: str, redis_url: str, scripted: ScriptedOpenAIServer
) -> Iterator[tuple[ServiceProcesses, GatewayProcess]]:
    env = {"OPENAI_BASE_URL": scripted.url, "OPENAI_API_KEY": "test"}
    with ServiceProcesses(redis_url, unique_prefix(), env=env) as procs:
        asyncio.run(_deploy(procs))
        with GatewayProcess(procs.redis_url, procs.prefix) as api:
            yield procs, api


async def _deploy(procs: ServiceProcesses) -> None:
    agent = create_agent(
        "gpt-4o-mini",
        tools=[tooling.add, tooling.explode],
        middleware=[HumanInTheLoopMiddleware(interrupt_on={"add": True})],
        redis_url=procs.redis_url,
        settings=Settings(prefix=procs.prefix),
    )
    async with Client(procs.redis_url, procs.prefix) as client:
        await client.deploy(agent, name="gated")


@pytest.fixture
async def client(
    deployment: tuple[ServiceProcesses, GatewayProcess],
) -> AsyncIterator[Client]:
    procs, _ = deployment
    async with Client(procs.redis_url, procs.prefix) as found:
        yield found


@pytest.fixture
async def tab(
    chromium: str, deployment: tuple[ServiceProcesses, GatewayProcess]
) -> AsyncIterator[Any]:
    """A fresh tab on the operator's view; fails the test on any script error in it."""
    from playwright.async_api import async_playwright

    _, api = deployment
    errors: list[str] = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 1000})
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            await page.goto(f"{api.url}/ui/ops")
            yield page
        finally:
            await browser.close()
    assert errors == []


async def _waiting(client: Client, prompt: str) -> str:
    task_id = await client.submit("gated", [HumanMessage(content=prompt)])
    await wait_for(lambda: client.waiting(task_id), timeout=30)
    return task_id


async def test_services_show_their_backlog_and_rate(client: Client, tab: Any) -> None:
    from playwright.async_api import expect

    rows = tab.locator("#services tbody tr")
    await expect(rows).to_have_count(5, timeout=20_000)
    shown = await rows.evaluate_all(
        "rs => rs.map(r => [r.dataset.service, r.children[1].textContent])"
    )
    assert sorted(name for name, _ in shown) == ["context", "loop", "model", "todos", "tools"]
    assert all(int(live) >= 1 for _, live in shown)  # each service's process announced
    # a rate is shown from the second reading on, and it counts what the loop handled
    loop_rate = tab.locator("#services tr[data-service=loop] .rate")
    await expect(loop_rate).not_to_have_text("…", timeout=10_000)
    task_id = await _waiting(client, "add 1 2")
    await expect(tab.locator(f".waiting-task[data-task='{task_id}']")).to_be_visible(timeout=10_000)
    await client.decide(task_id, [{"type": "reject", "message": "not now"}])
    await client.wait(task_id)


async def test_waiting_tasks_are_answered_by_clicks(
    client: Client, tab: Any, tmp_path: Path
) -> None:
    from playwright.async_api import expect

    approved = await _waiting(client, "add 2 3")
    edited = await _waiting(client, "add 4 5")
    rejected = await _waiting(client, "add 6 7")
    for task_id in (approved, edited, rejected):
        await expect(tab.locator(f".waiting-task[data-task='{task_id}']")).to_be_visible(
            timeout=10_000
        )
    await expect(tab.locator("#waiting-count")).to_have_text("3")
    await tab.screenshot(path=str(tmp_path / "ops.png"), full_page=True)
    _keep(tmp_path / "ops.png")

    card = tab.locator(f".waiting-task[data-task='{approved}'] .approval")
    await card.locator("button[data-decision=approve]").click()
    card = tab.locator(f".waiting-task[data-task='{edited}'] .approval")
    await card.locator("textarea.args").fill(json.dumps({"a": 40, "b": 2}))
    await card.locator("button[data-decision=edit]").click()
    card = tab.locator(f".waiting-task[data-task='{rejected}'] .approval")
    await card.locator("input.message").fill("too big")
    await card.locator("button[data-decision=reject]").click()

    outcomes = {t: await client.wait(t) for t in (approved, edited, rejected)}
    assert all(isinstance(o, TaskCompleted) for o in outcomes.values())
    assert outcomes[approved].answer == "result: 5"
    # LangChain's edit note, then the edited call's result
    assert '{"a": 40, "b": 2}' in outcomes[edited].answer
    assert outcomes[edited].answer.endswith("42")
    tool_reply = (await client.messages(rejected))[-2]
    assert isinstance(tool_reply, ToolMessage) and "too big" in tool_reply.text()
    await expect(tab.locator("#waiting-count")).to_have_text("0", timeout=10_000)


async def test_a_failed_run_shows_its_stage_and_reason(client: Client, tab: Any) -> None:
    from playwright.async_api import expect

    task_id = await client.submit("gated", [HumanMessage(content="explode now")])
    with pytest.raises(Exception, match="bad x=7"):
        await client.wait(task_id)
    failed = await client.outcome(task_id)
    assert isinstance(failed[1], TaskFailed)
    row = tab.locator(f"#failed tr[data-task='{task_id}']")
    await expect(row).to_be_visible(timeout=10_000)
    await expect(row.locator(".stage")).to_have_text("tools")  # the tool raised
    await expect(row.locator(".reason")).to_contain_text("bad x=7")
    await expect(row.locator(".reason")).to_contain_text("ValueError")
    await expect(tab.locator("#failed-by-stage")).to_contain_text("tools: ")


async def test_dead_letters_are_replayed_and_dropped(client: Client, tab: Any) -> None:
    from playwright.async_api import expect

    before = {entry_id for entry_id, _ in await client.dead_letters()}
    for n in range(2):  # events no service can read: the loop dead-letters each
        await client.redis.xadd(client.names.tasks, {DATA_FIELD: f"not an event {n}"})
    letters = await wait_for(lambda: _new_letters(client, before, 2), timeout=30)
    replayed, dropped = letters
    for entry_id in letters:
        await expect(tab.locator(f"#dlq tr[data-entry='{entry_id}']")).to_be_visible(timeout=10_000)
    length = await client.redis.xlen(client.names.tasks)
    await tab.locator(f"#dlq tr[data-entry='{replayed}'] button.approve").click()
    await expect(tab.locator(f"#dlq tr[data-entry='{replayed}']")).to_have_count(0)
    assert await client.redis.xlen(client.names.tasks) == length + 1  # back where it was read
    await tab.locator(f"#dlq tr[data-entry='{dropped}'] button.reject").click()
    await expect(tab.locator(f"#dlq tr[data-entry='{dropped}']")).to_have_count(0)
    remaining = {entry_id for entry_id, _ in await client.dead_letters()}
    assert dropped not in remaining


async def _new_letters(client: Client, before: set[str], count: int) -> list[str] | None:
    found = [e for e, letter in await client.dead_letters() if e not in before]
    return found if len(found) >= count else None


async def test_the_json_refuses_what_it_cannot_serve(
    deployment: tuple[ServiceProcesses, GatewayProcess],
) -> None:
    _, api = deployment
    async with httpx.AsyncClient(base_url=api.url) as http:
        bad_id = await http.post("/ui/api/ops/dead-letters/nope/replay")
        assert bad_id.status_code == 422 and "stream entry id" in bad_id.text
        gone = await http.delete("/ui/api/ops/dead-letters/1-1")
        assert gone.status_code == 404
        bad_limit = await http.get("/ui/api/ops/failed", params={"limit": "0"})
        assert bad_limit.status_code == 422
        no_task = await http.post("/ui/api/ops/approvals/nope", json={"decisions": []})
        assert no_task.status_code == 404
        empty = await http.post("/ui/api/ops/approvals/nope", json={})
        assert empty.status_code in (404, 422)


async def test_threads_are_searched_by_status_and_metadata_with_their_runs(
    deployment: tuple[ServiceProcesses, GatewayProcess], tab: Any
) -> None:
    from playwright.async_api import expect

    _, api = deployment
    team = f"team-{id(tab)}"
    async with httpx.AsyncClient(base_url=api.url, timeout=60) as http:
        waiting = (await http.post("/threads", json={"metadata": {"team": team}})).json()
        other = (await http.post("/threads", json={"metadata": {"team": "other"}})).json()
        ran = await http.post(
            f"/threads/{waiting['thread_id']}/runs/wait",
            json={"assistant_id": "gated", "input": {"messages": [("user", "add 3 4")]}},
        )
        assert ran.status_code == 200, ran.text
        run = (await http.get(f"/threads/{waiting['thread_id']}/runs")).json()[0]

    await tab.fill("#thread-metadata", json.dumps({"team": team}))
    await tab.select_option("#thread-status", "interrupted")
    await tab.click("#thread-search button[type=submit]")
    rows = tab.locator("#threads tbody tr")
    await expect(rows).to_have_count(1)
    row = tab.locator(f"#threads tr[data-thread='{waiting['thread_id']}']")
    await expect(row.locator(".status-cell")).to_have_text("interrupted")
    await expect(row.locator(".runs")).to_contain_text(f"{run['run_id'][:8]} {run['status']}")
    link = row.locator("a")
    await expect(link).to_have_attribute("href", f"/ui?thread={waiting['thread_id']}")

    await tab.select_option("#thread-status", "idle")  # the same team, no idle thread
    await tab.click("#thread-search button[type=submit]")
    await expect(rows).to_have_count(0)
    await tab.fill("#thread-metadata", json.dumps({"team": "other"}))
    await tab.click("#thread-search button[type=submit]")
    await expect(tab.locator(f"#threads tr[data-thread='{other['thread_id']}']")).to_be_visible()
    async with httpx.AsyncClient(base_url=api.url, timeout=60) as http:  # nothing left waiting
        done = await http.post(
            f"/threads/{waiting['thread_id']}/runs/wait",
            json={
                "assistant_id": "gated",
                "command": {"resume": {"decisions": [{"type": "reject"}]}},
            },
        )
        assert done.status_code == 200, done.text

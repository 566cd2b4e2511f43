"""The page to watch and steer runs (``GET /ui``) in a real browser: Debian's headless
``chromium`` driven by Playwright (never a downloaded browser), against ``loopline serve
api`` and every service as its own process, the model the scripted OpenAI-compatible
server streaming its replies piece by piece.

One run of an agent with a todo list, context editing and an approval gate: the todo
list appears as the todos service accepted it, the approval is answered by a click, the
tool's result and the context edits show, and the answer's text grows in the page as its
tokens arrive. Other runs answer the approval with edited arguments, a rejection and
a response in the tool's place. Screenshots of
the first, waiting and done, are kept (``tests/artifacts/page-approval.png`` and
``page.png``, and in the test's tmp dir).

Without chromium or Playwright the tests skip and say why, unless CI (``CI`` or
``LOOPLINE_TEST_BROWSER`` set) asks for them: then they fail.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain.agents.middleware import HumanInTheLoopMiddleware

from loopline import create_agent
from loopline.api.app import create_app
from loopline.api.settings import Tenancy
from loopline.client import Client
from loopline.middleware import ClearToolUsesEdit, ContextEditingMiddleware, TodoListMiddleware
from loopline.testing.processes import GatewayProcess
from loopline.testing.scripted import Reply, ScriptedOpenAIServer, ScriptedToolCall
from services.settings import Settings
from tests import tooling
from tests.support import REPO_ROOT, ServiceProcesses, unique_prefix

CHROMIUM = os.environ.get("LOOPLINE_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = REPO_ROOT / "tests" / "artifacts"
ANSWER = (
    "Both todos are done: the sum of two and three is five, and this answer streams "
    "into the page a few words at a time."
)
PLANNED = [
    {"content": "Add the numbers", "status": "in_progress"},
    {"content": "Report the sum", "status": "pending"},
]
DONE = [{"content": t["content"], "status": "completed"} for t in PLANNED]
TURNS = [
    Reply(tool_calls=(ScriptedToolCall("write_todos", {"todos": PLANNED}),)),
    Reply(tool_calls=(ScriptedToolCall("big_output", {"n": 800}),)),
    Reply(tool_calls=(ScriptedToolCall("big_output", {"n": 800}),)),
    Reply(tool_calls=(ScriptedToolCall("add", {"a": 2, "b": 3}),)),
    Reply(tool_calls=(ScriptedToolCall("write_todos", {"todos": DONE}),)),
    Reply(content=ANSWER),
]

RECORD_ANSWER_TEXTS = """() => {
  window.answerTexts = [];
  new MutationObserver(() => {
    const shown = document.querySelectorAll(".msg.ai .text");
    if (shown.length) window.answerTexts.push(shown[shown.length - 1].textContent);
  }).observe(document.getElementById("messages"),
             {childList: true, subtree: true, characterData: true});
}"""


def chromium_or_skip() -> str:
    """Chromium's path; a clear skip without it (or Playwright), a failure when CI asks."""
    missing = None
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        missing = "Playwright is not installed (pip install -e '.[test]')"
    if missing is None and not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        missing = f"no chromium at {CHROMIUM} (apt-get install -y chromium)"
    if missing is None:
        return CHROMIUM
    if os.environ.get("CI") or os.environ.get("LOOPLINE_TEST_BROWSER"):
        pytest.fail(f"the browser tests were asked for: {missing}")
    pytest.skip(missing)


@pytest.fixture(scope="module")
def chromium() -> str:
    return chromium_or_skip()


@pytest.fixture(scope="module")
def scripted() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(TURNS, chunk_delay=0.04) as server:
        yield server


@pytest.fixture(scope="module")
def gateway(
    chromium: str, redis_url: str, scripted: ScriptedOpenAIServer
) -> Iterator[GatewayProcess]:
    """Every service and ``loopline serve api`` as processes, the agent ``planner``
    deployed."""
    env = {"OPENAI_BASE_URL": scripted.url, "OPENAI_API_KEY": "test"}
    with ServiceProcesses(redis_url, unique_prefix(), env=env) as procs:
        asyncio.run(_deploy(procs))
        with GatewayProcess(procs.redis_url, procs.prefix) as api:
            yield api


async def _deploy(procs: ServiceProcesses) -> None:
    planner = create_agent(
        "gpt-4o-mini",
        tools=[tooling.add, tooling.big_output],
        middleware=[
            TodoListMiddleware(),
            ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=300, keep=1)]),
            HumanInTheLoopMiddleware(interrupt_on={"add": True}),
        ],
        redis_url=procs.redis_url,
        settings=Settings(prefix=procs.prefix),
    )
    async with Client(procs.redis_url, procs.prefix) as client:
        await client.deploy(planner, name="planner")


@pytest.fixture
async def browser_page(chromium: str, gateway: GatewayProcess) -> AsyncIterator[Any]:
    """A fresh tab on the page, with the ``planner`` agent picked; fails the test on
    any script error in the page."""
    from playwright.async_api import async_playwright, expect

    errors: list[str] = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            tab = await browser.new_page(viewport={"width": 1280, "height": 860})
            tab.on("pageerror", lambda exc: errors.append(str(exc)))
            await tab.goto(f"{gateway.url}/ui?assistant=planner")
            await expect(tab.locator("#assistant")).to_have_value("planner")
            yield tab
        finally:
            await browser.close()
    assert errors == []


async def _todos(tab: Any) -> list[dict[str, str]]:
    shown: list[dict[str, str]] = await tab.locator("#todos li").evaluate_all(
        "items => items.map(li => ({content: li.textContent, status: li.dataset.status}))"
    )
    return shown


async def _send(tab: Any, prompt: str) -> Any:
    """Type the prompt, send it, and wait for the approval the ``add`` call asks for."""
    from playwright.async_api import expect

    await tab.fill("#prompt", prompt)
    await tab.click("#send")
    approval = tab.locator(".approval[data-tool=add]")
    await expect(approval).to_be_visible(timeout=60_000)
    await expect(tab.locator("#status")).to_have_attribute("data-status", "waiting")
    return approval


def _keep(tab_png: Path) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    kept = ARTIFACTS / tab_png.name
    shutil.copyfile(tab_png, kept)
    print(f"screenshot: {kept} (and {tab_png})")
    return kept


async def test_a_run_streams_into_the_page_and_an_approval_is_answered_by_a_click(
    browser_page: Any, gateway: GatewayProcess, tmp_path: Path
) -> None:
    from playwright.async_api import expect

    tab = browser_page
    await tab.evaluate(RECORD_ANSWER_TEXTS)
    approval = await _send(tab, "plan and add")

    # mid-run: the list the todos service accepted, the steps so far, the gated call
    assert await _todos(tab) == PLANNED
    await expect(tab.locator(".call[data-tool=big_output] .result")).to_have_count(2)
    await expect(approval.locator("textarea.args")).to_have_value('{\n "a": 2,\n "b": 3\n}')
    allowed = await approval.locator("button").evaluate_all("bs => bs.map(b => b.dataset.decision)")
    assert allowed == ["approve", "edit", "reject", "respond"]  # interrupt_on={"add": True}
    await tab.screenshot(path=str(tmp_path / "page-approval.png"), full_page=True)
    _keep(tmp_path / "page-approval.png")

    await approval.locator("button[data-decision=approve]").click()
    await expect(tab.locator("#status")).to_have_attribute("data-status", "done", timeout=60_000)

    await expect(tab.locator(".call[data-tool=add] .result")).to_have_text("→ 5")
    await expect(tab.locator(".msg.ai .text").last).to_have_text(ANSWER)
    assert await _todos(tab) == DONE
    edits = tab.locator("#edits li")
    assert await edits.count() >= 1
    await expect(edits.first).to_contain_text("clear_tool_uses cleared")
    await expect(tab.locator("#approvals-panel")).to_be_hidden()

    # the answer grew in place, token by token, before it was whole
    texts: list[str] = await tab.evaluate("window.answerTexts")
    growing = sorted({t for t in texts if t and ANSWER.startswith(t) and t != ANSWER}, key=len)
    assert len(growing) >= 5, growing

    # what the page shows is the thread's state on the server
    thread_id = await tab.locator("#thread-id").text_content()
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        state = (await http.get(f"/threads/{thread_id}/state")).json()
    assert state["interrupts"] == [] and state["next"] == []
    assert state["values"]["messages"][-1]["content"] == ANSWER

    await tab.screenshot(path=str(tmp_path / "page.png"), full_page=True)
    _keep(tmp_path / "page.png")


async def test_an_approval_is_answered_with_edited_arguments(browser_page: Any) -> None:
    from playwright.async_api import expect

    tab = browser_page
    approval = await _send(tab, "plan and add, edited")
    await approval.locator("textarea.args").fill('{"a": 20, "b": 22}')
    await approval.locator("button[data-decision=edit]").click()
    await expect(tab.locator("#status")).to_have_attribute("data-status", "done", timeout=60_000)
    result = tab.locator(".call[data-tool=add] .result")
    # LangChain's note to the model that a human replaced the call, then the tool's answer
    await expect(result).to_contain_text('Executed instead: add with arguments {"a": 20, "b": 22}')
    await expect(result).to_have_text(re.compile(r"Tool response:\s*42$"))
    await expect(tab.locator(".msg.ai .text").last).to_have_text(ANSWER)


@pytest.mark.parametrize(
    ("decision", "shown"),
    [
        ("reject", "→ User rejected the tool call for `add` with reason: not now"),
        ("respond", "→ not now"),  # the human answers for the tool, which does not run
    ],
)
async def test_an_approval_is_rejected_or_answered_with_a_message(
    browser_page: Any, decision: str, shown: str
) -> None:
    from playwright.async_api import expect

    tab = browser_page
    approval = await _send(tab, f"plan and add, {decision}")
    await approval.locator("input.message").fill("not now")
    await approval.locator(f"button[data-decision={decision}]").click()
    await expect(tab.locator("#status")).to_have_attribute("data-status", "done", timeout=60_000)
    await expect(tab.locator(".call[data-tool=add] .result")).to_have_text(shown)
    await expect(tab.locator(".msg.ai .text").last).to_have_text(ANSWER)


async def test_a_thread_opened_by_its_address_shows_its_waiting_approval(
    chromium: str, gateway: GatewayProcess
) -> None:
    """A run started elsewhere (plain HTTP) and stopped at its approval: the page opened
    on the thread shows the conversation, the todos and the approval, and a click ends it."""
    from playwright.async_api import async_playwright, expect

    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
        thread_id = (await http.post("/threads", json={})).json()["thread_id"]
        body = {
            "assistant_id": "planner",
            "input": {"messages": [{"role": "user", "content": "hi"}]},
        }
        waited = (await http.post(f"/threads/{thread_id}/runs/wait", json=body)).json()
    assert waited["__interrupt__"]
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            tab = await browser.new_page()
            await tab.goto(f"{gateway.url}/ui?assistant=planner&thread={thread_id}")
            approval = tab.locator(".approval[data-tool=add]")
            await expect(approval).to_be_visible()
            await expect(tab.locator(".msg.human .text")).to_have_text("hi")
            assert await _todos(tab) == PLANNED
            await approval.locator("button[data-decision=approve]").click()
            done = tab.locator("#status")
            await expect(done).to_have_attribute("data-status", "done", timeout=60_000)
            await expect(tab.locator(".call[data-tool=add] .result")).to_have_text("→ 5")
            assert await _todos(tab) == DONE
        finally:
            await browser.close()


@pytest.mark.fast
def test_the_page_follows_the_api_rules_for_who_may_open_it() -> None:
    """No keys: the page, like the API, is for this machine only. With keys its files
    (no data in them) are served to anyone; its data route wants the key."""
    from starlette.testclient import TestClient

    url = "redis://127.0.0.1:1/0"  # never reached: no route here touches Redis
    open_locally = create_app(url, Tenancy({}, "pfx"))
    remote = TestClient(open_locally)  # its client is "testclient": not this machine
    assert remote.get("/ui").status_code == 403
    assert remote.get("/ui/page.js").status_code == 403
    assert remote.get("/ui/api/threads/t/runs/r/activity").status_code == 403

    local = TestClient(open_locally, client=("127.0.0.1", 50000))
    page, script = local.get("/ui"), local.get("/ui/page.js")
    assert page.status_code == 200 and 'id="approvals"' in page.text
    assert page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert script.status_code == 200 and "command: { resume }" in script.text
    assert local.get("/ui/nothing.js").status_code == 404
    assert local.get("/", follow_redirects=False).headers["location"] == "/ui"

    keyed = TestClient(create_app(url, Tenancy({"k1": "pfx"}, "pfx")))
    assert keyed.get("/ui").status_code == 200
    assert keyed.get("/ui/api/threads/t/runs/r/activity").status_code == 401

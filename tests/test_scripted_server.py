"""The scripted server must be indistinguishable from OpenAI for the real client stack.

Everything goes through the real ``langchain_openai.ChatOpenAI`` (and so ``openai`` and
``httpx``), because a fake that only satisfies a hand-written client would not catch
protocol drift that breaks the actual agents.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from loopline import lifetime
from loopline.demo import DEMO_TURNS
from loopline.testing.processes import free_port
from loopline.testing.scripted import (
    Reply,
    ScriptedOpenAIServer,
    ScriptedToolCall,
    load_script,
)

REPO_ROOT = Path(__file__).resolve().parents[1]


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return f"result for {query}"


TOOL_TURNS = (
    Reply(
        content="",
        tool_calls=(
            ScriptedToolCall(name="lookup", args={"query": "alpha"}),
            ScriptedToolCall(name="lookup", args={"query": "beta"}, id="call_custom"),
        ),
        prompt_tokens=42,
        completion_tokens=7,
    ),
    Reply(content="alpha and beta are both fine.", prompt_tokens=100, completion_tokens=9),
)


def _model(server: ScriptedOpenAIServer, **kwargs: Any) -> ChatOpenAI:
    return ChatOpenAI(
        model="gpt-4o-mini", base_url=server.url, api_key="test", max_retries=0, **kwargs
    )


@pytest.fixture
def tool_server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(TOOL_TURNS) as server:
        yield server


@pytest.mark.fast
def test_tool_call_roundtrip(tool_server: ScriptedOpenAIServer) -> None:
    llm = _model(tool_server).bind_tools([lookup])
    history: list[BaseMessage] = [HumanMessage("check alpha and beta")]

    first = llm.invoke(history)
    assert isinstance(first, AIMessage)
    assert [(c["name"], c["args"], c["id"]) for c in first.tool_calls] == [
        ("lookup", {"query": "alpha"}, "call_0_0_lookup"),
        ("lookup", {"query": "beta"}, "call_custom"),
    ]
    assert first.response_metadata["finish_reason"] == "tool_calls"

    history.append(first)
    for call in first.tool_calls:
        assert call["id"] is not None
        history.append(ToolMessage(lookup.invoke(call["args"]), tool_call_id=call["id"]))
    second = llm.invoke(history)
    assert second.content == "alpha and beta are both fine."
    assert second.tool_calls == []

    bodies = tool_server.chat_requests()
    assert len(bodies) == 2
    assert bodies == tool_server.requests
    for body in bodies:
        assert body["model"] == "gpt-4o-mini"
        assert [t["function"]["name"] for t in body["tools"]] == ["lookup"]
    msgs = bodies[1]["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "tool"]
    assert [tc["id"] for tc in msgs[1]["tool_calls"]] == ["call_0_0_lookup", "call_custom"]
    assert json.loads(msgs[1]["tool_calls"][1]["function"]["arguments"]) == {"query": "beta"}
    assert [m["tool_call_id"] for m in msgs[2:]] == ["call_0_0_lookup", "call_custom"]
    assert msgs[2]["content"] == "result for alpha"

    tool_server.reset()
    assert tool_server.chat_requests() == []


@pytest.mark.fast
def test_usage_metadata(tool_server: ScriptedOpenAIServer) -> None:
    llm = _model(tool_server)
    first = llm.invoke("hi")
    assert isinstance(first, AIMessage)
    assert first.usage_metadata is not None
    assert first.usage_metadata["input_tokens"] == 42
    assert first.usage_metadata["output_tokens"] == 7
    assert first.usage_metadata["total_tokens"] == 49
    assert first.response_metadata["model_name"] == "gpt-4o-mini"


@pytest.mark.fast
def test_default_usage_estimate_and_exhausted_script() -> None:
    with ScriptedOpenAIServer([Reply(content="abcdefgh")]) as server:
        history: list[BaseMessage] = [HumanMessage("hello")]
        msg = _model(server).invoke(history)
        assert msg.usage_metadata is not None
        body = server.requests[0]
        assert msg.usage_metadata["input_tokens"] == len(json.dumps(body["messages"])) // 4
        assert msg.usage_metadata["output_tokens"] == len("abcdefgh") // 4 + 1
        # Beyond the script the last tool-free reply is repeated.
        again = _model(server).invoke([*history, msg, HumanMessage("more")])
        assert again.content == "abcdefgh"
    with ScriptedOpenAIServer(TOOL_TURNS[:1]) as server:
        history = [HumanMessage("x"), AIMessage("y")]
        assert _model(server).invoke(history).content == "done"
    with ScriptedOpenAIServer() as server:
        assert _model(server).invoke("x").content == "ok"


@pytest.mark.fast
def test_responder() -> None:
    def respond(body: dict[str, Any]) -> Reply:
        return Reply(content=f"echo: {body['messages'][-1]['content']}")

    with ScriptedOpenAIServer(responder=respond) as server:
        assert _model(server).invoke("ping").content == "echo: ping"
    with pytest.raises(ValueError):
        ScriptedOpenAIServer(TOOL_TURNS, responder=respond)


@pytest.mark.fast
async def test_concurrent_conversations_do_not_serialise() -> None:
    with ScriptedOpenAIServer(TOOL_TURNS, latency=0.2) as server:
        llm = _model(server).bind_tools([lookup])
        started = time.perf_counter()
        results = await asyncio.gather(
            *(llm.ainvoke([HumanMessage(f"conversation {i}")]) for i in range(20))
        )
        elapsed = time.perf_counter() - started
    assert elapsed < 2.0, elapsed
    assert len(server.requests) == 20
    for result in results:
        assert isinstance(result, AIMessage)
        assert [c["args"] for c in result.tool_calls] == [{"query": "alpha"}, {"query": "beta"}]


@pytest.mark.fast
def test_streaming(tool_server: ScriptedOpenAIServer) -> None:
    llm = _model(tool_server, streaming=True, stream_usage=True).bind_tools([lookup])
    history: list[BaseMessage] = [HumanMessage("go")]
    first = llm.invoke(history)
    assert isinstance(first, AIMessage)
    assert [(c["name"], c["args"], c["id"]) for c in first.tool_calls] == [
        ("lookup", {"query": "alpha"}, "call_0_0_lookup"),
        ("lookup", {"query": "beta"}, "call_custom"),
    ]
    assert first.usage_metadata is not None
    assert first.usage_metadata["total_tokens"] == 49
    assert tool_server.requests[0]["stream"] is True

    history.append(first)
    history += [ToolMessage("r", tool_call_id=c["id"] or "") for c in first.tool_calls]
    chunks = list(llm.stream(history))
    assert len(chunks) > 3  # content arrived in several deltas
    assert "".join(str(c.content) for c in chunks) == "alpha and beta are both fine."

    final = llm.invoke(history)
    assert final.content == "alpha and beta are both fine."


@pytest.mark.fast
def test_raw_stream_format(tool_server: ScriptedOpenAIServer) -> None:
    payload = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    resp = httpx.post(f"{tool_server.url}/chat/completions", json=payload)
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    events = [line[len("data: ") :] for line in resp.text.splitlines() if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert all("usage" not in c for c in chunks)


@pytest.mark.fast
def test_http_errors_and_models(tool_server: ScriptedOpenAIServer) -> None:
    with httpx.Client() as client:
        bad = client.post(
            f"{tool_server.url}/chat/completions",
            content=b"{not json",
            headers={"Content-Type": "application/json"},
        )
        assert bad.status_code == 400
        assert bad.json()["error"]["type"] == "invalid_request_error"
        assert bad.json()["error"]["message"]

        missing = client.get(f"{tool_server.url}/nope")
        assert missing.status_code == 404
        assert "error" in missing.json()
        assert client.post(f"{tool_server.url}/embeddings", json={}).status_code == 404

        models = client.get(f"{tool_server.url}/models")
        assert models.status_code == 200
        assert models.json()["object"] == "list"

        # The /v1 prefix is optional.
        root = tool_server.url.removesuffix("/v1")
        ok = client.post(
            f"{root}/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}
        )
        assert ok.status_code == 200
        assert ok.json()["object"] == "chat.completion"
        assert ok.json()["choices"][0]["message"]["content"] is None
        assert ok.json()["id"].startswith("chatcmpl-")
    assert tool_server.requests == [{"messages": [{"role": "user", "content": "x"}]}]


@pytest.mark.fast
def test_stop_is_prompt_with_open_keepalive_connection() -> None:
    server = ScriptedOpenAIServer().start()
    with httpx.Client() as client:
        assert client.get(f"{server.url}/models").status_code == 200
        started = time.perf_counter()
        server.stop()
        assert time.perf_counter() - started < 2.0
        with pytest.raises(httpx.HTTPError):
            client.get(f"{server.url}/models")


@pytest.mark.fast
def test_demo_turns_shape() -> None:
    """The one demo script (``loopline demo``, and the server's default): a plan and two
    lookups at once, a todo list brought to completion, then an answer."""
    first = DEMO_TURNS[0]
    names = [c.name for c in first.tool_calls]
    assert names == ["write_todos", "lookup", "lookup"]
    statuses = [t["status"] for t in first.tool_calls[0].args["todos"]]
    assert statuses == ["in_progress", "pending"]
    todo_calls = [c for r in DEMO_TURNS for c in r.tool_calls if c.name == "write_todos"]
    assert len(todo_calls) >= 2
    assert {t["status"] for t in todo_calls[-1].args["todos"]} == {"completed"}
    assert all(r.tool_calls for r in DEMO_TURNS[:-1])
    assert DEMO_TURNS[-1].content and not DEMO_TURNS[-1].tool_calls


def _start_cli(*args: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = lifetime.spawn(
        [sys.executable, "-m", "loopline.testing.scripted", "--port", str(port), *args],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 15
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"CLI exited early: {proc.communicate()}")
        try:
            if httpx.get(f"{url}/models", timeout=0.5).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("CLI server did not come up")
        time.sleep(0.05)


def _stop_cli(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cli_demo_script() -> None:
    proc, url = _start_cli()
    try:
        llm = ChatOpenAI(model="gpt-4o-mini", base_url=url, api_key="test", max_retries=0)
        msg = llm.invoke("plan something")
        assert [c["name"] for c in msg.tool_calls] == ["write_todos", "lookup", "lookup"]
    finally:
        _stop_cli(proc)


def test_cli_script_file(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                {"content": "", "tool_calls": [{"name": "lookup", "args": {"query": "q"}}]},
                {"content": "finished"},
            ]
        )
    )
    assert load_script(script)[0].tool_calls[0].args == {"query": "q"}
    proc, url = _start_cli("--script", str(script))
    try:
        llm = ChatOpenAI(model="gpt-4o-mini", base_url=url, api_key="test", max_retries=0)
        first = llm.invoke("go")
        assert first.tool_calls[0]["args"] == {"query": "q"}
        assert (
            llm.invoke(
                [HumanMessage("go"), first, ToolMessage("r", tool_call_id="call_0_0_lookup")]
            ).content
            == "finished"
        )
    finally:
        _stop_cli(proc)

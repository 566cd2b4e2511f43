"""Todo tracking and context editing behaviours beyond the wire-parity scenario."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents.middleware import ClearToolUsesEdit as LcClearToolUsesEdit
from langchain.agents.middleware import ContextEditingMiddleware as LcContextEditingMiddleware
from langchain.agents.middleware.types import ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from contracts import HumanMessage as LlHumanMessage
from contracts import TodosUpdated, ToolCall
from loopline.agentfile import agent_from_dict
from loopline.client import Client
from loopline.middleware import (
    ClearToolUsesEdit,
    ContextEditingMiddleware,
    TodoListMiddleware,
    to_spec,
)
from loopline.testing.scripted import (
    Reply,
    ScriptedOpenAIServer,
    ScriptedToolCall,
)
from services.agent_view import system_message
from services.todos.logic import parse_todos
from tests.support import REPO_ROOT, ServiceProcesses, unique_prefix

GOOD = {"todos": [{"content": "a", "status": "pending"}]}
INVALID = [
    {"todos": [{"content": "a", "status": "blocked"}]},
    {"todos": [{"status": "pending"}]},
    {"todos": "not a list"},
    {},
]

SCRIPTS = {
    "invalid": [
        Reply(tool_calls=(ScriptedToolCall("write_todos", GOOD),)),
        Reply(tool_calls=(ScriptedToolCall("write_todos", INVALID[0]),)),
        Reply(tool_calls=(ScriptedToolCall("write_todos", INVALID[1]),)),
        Reply(content="kept the first list"),
    ],
    "edits": [
        Reply(tool_calls=(ScriptedToolCall("big_output", {"n": 800}),)),
        Reply(tool_calls=(ScriptedToolCall("big_output", {"n": 800}),)),
        Reply(tool_calls=(ScriptedToolCall("big_output", {"n": 800}),)),
        Reply(content="edited"),
    ],
}


@pytest.fixture(scope="module")
def stack(redis_url: str, scripted: ScriptedOpenAIServer) -> Iterator[ServiceProcesses]:
    env = {"OPENAI_BASE_URL": scripted.url, "OPENAI_API_KEY": "test"}
    with ServiceProcesses(redis_url, unique_prefix(), env=env) as procs:
        yield procs


@pytest.mark.fast
@pytest.mark.parametrize("args", INVALID)
def test_invalid_todo_lists_answer_with_an_error(args: dict[str, Any]) -> None:
    answer = parse_todos(ToolCall(id="c1", name="write_todos", args=args))
    assert not isinstance(answer, list)
    assert answer.status == "error"
    assert str(answer.content).startswith("Error invoking tool 'write_todos' with kwargs")


async def test_an_invalid_list_leaves_the_stored_list_unchanged(
    stack: ServiceProcesses, scripted: ScriptedOpenAIServer
) -> None:
    spec, _ = agent_from_dict({"model": "m", "middleware": [{"type": "TodoListMiddleware"}]})
    async with Client(stack.redis_url, stack.prefix) as client:
        task_id = await client.submit(spec, [LlHumanMessage(content=f"invalid {uuid.uuid4()}")])
        await client.wait(task_id)
        todos = await client.todos(task_id)
        log = [e async for _, e in client.events(task_id, follow=False)]
        messages = await client.messages(task_id)
    assert todos == GOOD["todos"]
    assert [e.todos[0].status for e in log if isinstance(e, TodosUpdated)] == ["pending"]
    errors = [m for m in messages if m.type == "tool" and m.status == "error"]
    assert len(errors) == 2
    assert "status" in errors[0].text() and "content" in errors[1].text()


async def test_edits_are_published_and_watchable(
    stack: ServiceProcesses, scripted: ScriptedOpenAIServer
) -> None:
    spec, _ = agent_from_dict(
        {
            "model": "m",
            "tools": ["tests.tooling:big_output"],
            "middleware": [
                {
                    "type": "ContextEditingMiddleware",
                    "edits": [{"type": "ClearToolUsesEdit", "trigger": 300, "keep": 1}],
                }
            ],
        }
    )
    async with Client(stack.redis_url, stack.prefix) as client:
        task_id = await client.submit(spec, [LlHumanMessage(content=f"edits {uuid.uuid4()}")])
        await client.wait(task_id)
    env = {**os.environ, "REDIS_URL": stack.redis_url, "LOOPLINE_PREFIX": stack.prefix}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "loopline",
            "watch",
            "edits",
            "--from-start",
            "--no-follow",
            "--json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
    )
    assert done.returncode == 0, done.stderr
    edits = [json.loads(line) for line in done.stdout.splitlines()]
    edits = [e for e in edits if e["task_id"] == task_id]
    assert [e["step"] for e in edits] == [3, 4]
    assert [len(e["cleared_tool_call_ids"]) for e in edits] == [1, 2]
    for e in edits:
        assert e["type"] == "ContextEdited" and e["strategy"] == "clear_tool_uses"
        assert e["tokens_after"] < e["tokens_before"] and e["cleared_inputs"] is False
    # the model saw the placeholder at step 3 and 4
    seen = [r for r in scripted.chat_requests() if "edits" in r["messages"][0]["content"]]
    assert "[cleared]" not in json.dumps(seen[1]) and "[cleared]" in json.dumps(seen[2])


@pytest.mark.fast
def test_todo_prompt_without_a_system_prompt_matches_langchain() -> None:
    """With no system prompt LangChain sends the todo prompt alone, as one text block."""
    from langchain.agents.middleware import TodoListMiddleware as LcTodoListMiddleware

    spec, _ = agent_from_dict({"model": "m", "middleware": [{"type": "TodoListMiddleware"}]})
    ours = system_message(spec)
    captured: list[Any] = []
    request = ModelRequest(model=None, messages=[], system_message=None)  # type: ignore[arg-type]
    LcTodoListMiddleware().wrap_model_call(
        request, lambda r: captured.append(r.system_message) or ModelResponse(result=[])
    )
    assert ours is not None and ours.content == captured[0].content


@pytest.mark.fast
def test_the_engine_is_a_plain_library_on_langchain_messages() -> None:
    messages: list[Any] = [HumanMessage("hi", id="h")]
    for i in range(6):
        messages.append(
            AIMessage("", id=f"a{i}", tool_calls=[{"id": f"c{i}", "name": "t", "args": {"i": i}}])
        )
        messages.append(ToolMessage("x" * 400, tool_call_id=f"c{i}", name="t", id=f"t{i}"))
    edit = {"trigger": 200, "keep": 2, "clear_tool_inputs": True}
    ours = ContextEditingMiddleware(edits=[ClearToolUsesEdit(**edit)]).edit(messages)

    captured: list[Any] = []
    LcContextEditingMiddleware(edits=[LcClearToolUsesEdit(**edit)]).wrap_model_call(
        ModelRequest(model=None, messages=messages, system_message=None),  # type: ignore[arg-type]
        lambda r: captured.append(r.messages) or ModelResponse(result=[]),
    )
    assert ours == captured[0]
    assert sum(1 for m in ours if m.content == "[cleared]") == 4
    assert messages[2].content == "x" * 400  # the input list is untouched


@pytest.mark.fast
def test_langchain_instances_convert_with_their_parameters() -> None:
    from langchain.agents.middleware import TodoListMiddleware as LcTodoListMiddleware

    spec = to_spec(
        LcContextEditingMiddleware(
            edits=[LcClearToolUsesEdit(trigger=10, keep=1, exclude_tools=("a",))],
            token_count_method="model",
        )
    )
    assert spec.params["token_count_method"] == "model"
    assert spec.params["edits"][0]["trigger"] == 10
    assert spec.params["edits"][0]["exclude_tools"] == ["a"]
    custom = to_spec(LcTodoListMiddleware(system_prompt="plan!"))
    assert custom.params == {"system_prompt": "plan!"}
    assert TodoListMiddleware.from_spec(custom).system_prompt == "plan!"

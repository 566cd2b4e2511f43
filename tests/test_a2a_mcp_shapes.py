"""The pure parts of ``/mcp`` and ``/a2a``: an agent's name as an MCP tool name, a thread's
messages as A2A history tagged by task, the answer of a turn, and A2A 0.3's shape of a
1.0 answer. The routes themselves, through the official clients, are in
``test_gateway_mcp_a2a``."""

from __future__ import annotations

from typing import Any

import pytest

from loopline.api.a2a_rpc import spec_format
from loopline.api.a2a_tasks import A2AMessage, history, input_messages, reply_parts
from loopline.api.mcp import tool_name
from loopline.api.records import RunRecord

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(
    ("agent", "tool"),
    [
        ("agent", "agent"),
        ("each-gated", "each-gated"),
        ("  my research   agent ", "my_research_agent"),
        ("résumé/v2.1", "rsumv2.1"),
        ("x" * 200, "x" * 128),
    ],
)
def test_an_agent_name_as_a_tool_name(agent: str, tool: str) -> None:
    assert tool_name(agent) == tool


def _human(text: str, message_id: str) -> dict[str, Any]:
    return {"type": "human", "content": text, "id": message_id}


def _ai(content: Any, message_id: str, **more: Any) -> dict[str, Any]:
    return {"type": "ai", "content": content, "id": message_id, **more}


def _run(run_id: str, first_input: str, **metadata: Any) -> RunRecord:
    return RunRecord(
        run_id=run_id,
        task_id=run_id,
        thread_id="ctx",
        assistant_id="agent",
        input_ids=[first_input],
        metadata=metadata,
    )


THREAD = [
    {"type": "system", "content": "be brief", "id": "s"},
    _human("one", "h1"),
    _ai("", "a0", tool_calls=[{"name": "add", "args": {}, "id": "c1"}]),
    {"type": "tool", "content": "5", "id": "t1", "tool_call_id": "c1", "name": "add"},
    _ai([{"type": "text", "text": "answer "}, {"type": "text", "text": "one"}], "a1"),
    _human("two", "h2"),
    _ai("answer two", "a2"),
]
RUNS = [_run("r1", "h1"), _run("r2", "h2")]


def test_history_tags_each_message_with_the_task_whose_run_brought_it() -> None:
    shown = history(THREAD, "ctx:r2", "ctx", RUNS, None, "context")
    assert [(m["role"], m["taskId"]) for m in shown] == [
        ("ROLE_USER", "ctx:r1"),
        ("ROLE_AGENT", "ctx:r1"),  # the tool's result, as data
        ("ROLE_AGENT", "ctx:r1"),
        ("ROLE_USER", "ctx:r2"),
        ("ROLE_AGENT", "ctx:r2"),
    ]
    tool = shown[1]["parts"]
    assert tool == [
        {
            "kind": "data",
            "data": {"tool_results": [{"toolCallId": "c1", "content": "5", "name": "add"}]},
        }
    ]
    assert shown[2]["parts"] == [{"kind": "text", "text": "answer one"}]  # blocks joined
    assert [m["messageId"] for m in shown] == ["h1", "t1", "a1", "h2", "a2"]


def test_history_scope_and_length() -> None:
    task_only = history(THREAD, "ctx:r2", "ctx", RUNS, None, "task")
    assert [m["messageId"] for m in task_only] == ["h2", "a2"]
    assert [m["messageId"] for m in history(THREAD, "ctx:r2", "ctx", RUNS, 2, "context")] == [
        "h2",
        "a2",
    ]
    assert history(THREAD, "ctx:r2", "ctx", RUNS, 0, "context") == []


def test_a_resume_run_belongs_to_the_task_it_answered() -> None:
    resumed = RunRecord(
        run_id="r3",
        task_id="r2",
        thread_id="ctx",
        assistant_id="agent",
        metadata={"a2a": {"task_id": "ctx:r2"}},
        input_ids=["h3"],
    )
    thread = [*THREAD, _human("three", "h3")]
    shown = history(thread, "ctx:r2", "ctx", [*RUNS, resumed], None, "task")
    assert [m["messageId"] for m in shown] == ["h2", "a2", "h3"]


def test_the_answer_is_the_last_ai_text_of_the_turn() -> None:
    assert reply_parts({"messages": THREAD}) == [{"kind": "text", "text": "answer two"}]
    asked = {"messages": [*THREAD[:6], _ai("", "a3", tool_calls=[{"name": "add"}])]}
    assert reply_parts(asked) == [{"kind": "text", "text": ""}]


def test_text_parts_become_input_messages_with_the_message_id() -> None:
    message = A2AMessage.model_validate(
        {"messageId": "m", "role": "user", "parts": [{"text": "a"}, {"kind": "text", "text": "b"}]}
    )
    assert input_messages(message) == [
        {"role": "human", "content": "a", "id": "m"},
        {"role": "human", "content": "b", "id": "m-1"},
    ]


def test_a_1_0_answer_in_the_0_3_shape() -> None:
    answer = {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "task": {
                "status": {"state": "TASK_STATE_INPUT_REQUIRED"},
                "history": [{"role": "ROLE_USER", "parts": [{"kind": "text", "text": "hi"}]}],
            }
        },
    }
    assert spec_format(answer) == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "status": {"state": "input-required"},
            "history": [{"role": "user", "parts": [{"kind": "text", "text": "hi"}]}],
        },
    }

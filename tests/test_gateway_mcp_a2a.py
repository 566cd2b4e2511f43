"""``/mcp`` and ``/a2a/{assistant_id}`` of ``loopline serve api`` through the official
clients: the ``mcp`` SDK's streamable HTTP client (tools listed, an agent called as a
tool) and the ``a2a-sdk`` client (agent card discovery, ``SendMessage`` and
``GetTask`` in A2A 1.0; ``message/send``, ``message/stream`` and ``tasks/get`` through
its A2A 0.3 transport), with the services as processes and the scripted model (the
fixtures of ``test_http_gateway``, the same agents and script).

What LangGraph's own server (``langgraph dev``, langgraph-api 0.16.7 in memory) answered
to the same clients, for ``create_agent(ChatOpenAI(...), tools=[add, hang])`` with and
without ``HumanInTheLoopMiddleware(interrupt_on={"add": True})`` and the same scripted
replies, is kept below as data (``REFERENCE_*``), with ids and times replaced by
placeholders (``normal``). Where loopline answers otherwise on purpose, the test says so.
"""

from __future__ import annotations

import ast
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import httpx2
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.types import (
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskState,
)
from a2a.utils.errors import UnsupportedOperationError
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Value
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from loopline.testing.processes import GatewayProcess, ServiceProcesses
from tests import test_http_gateway as shared
from tests.test_http_gateway import ANSWER

# the deployment and gateway of the HTTP gateway's tests (agents agent, gated, ...)
scripted = shared.scripted
deployment = shared.deployment
gateway = shared.gateway

AGENTS = ["planner", "each-gated", "gated", "agent"]
"""The deployed agents, newest first (the order of ``/assistants/search``)."""

# -- what langgraph dev answered ---------------------------------------------------------

# `tools/list`, the tool of the assistant "agent" (as the mcp client's model dumps it)
REFERENCE_TOOL = {
    "name": "agent",
    "title": "agent",
    "description": "Tool based on the agent assistant",
    "input_schema": {
        "properties": {
            "messages": {
                "type": "string",
                "title": "Messages",
                "description": "The user message to send to the agent.",
            }
        },
        "required": ["messages"],
        "title": "InputSchema",
        "type": "object",
    },
    "annotations": {
        "read_only_hint": False,
        "destructive_hint": False,
        "idempotent_hint": False,
        "open_world_hint": True,
    },
}
REFERENCE_PROTOCOL = "2025-11-25"  # what the mcp 2.x client settles on with it

HUMAN_KEYS = ["content", "additional_kwargs", "response_metadata", "type", "name", "id"]
AI_KEYS = [*HUMAN_KEYS, "tool_calls", "invalid_tool_calls", "usage_metadata"]
# `tools/call` of "agent" with {"messages": "hello"}: the text is the repr of the final
# values; here each message's type, content, tool calls and keys (``shape``)
REFERENCE_CALL = {
    "messages": [
        {"type": "human", "content": "hello", "keys": HUMAN_KEYS},
        {"type": "ai", "content": ANSWER, "tool_calls": [], "keys": AI_KEYS},
    ]
}
# `tools/call` of "gated" with {"messages": "gated"}: the run stops at the interrupt
REFERENCE_CALL_GATED = {
    "messages": [
        {"type": "human", "content": "gated", "keys": HUMAN_KEYS},
        {
            "type": "ai",
            "content": "",
            "tool_calls": [
                {"name": "add", "args": {"a": 2, "b": 3}, "id": "call_0_0_add", "type": "tool_call"}
            ],
            "keys": AI_KEYS,
        },
    ],
    "__interrupt__": [
        {
            "value": {
                "action_requests": [
                    {
                        "name": "add",
                        "args": {"a": 2, "b": 3},
                        "description": "Tool execution requires approval\n\nTool: add\n"
                        "Args: {'a': 2, 'b': 3}",
                    }
                ],
                "review_configs": [
                    {
                        "action_name": "add",
                        "allowed_decisions": ["approve", "edit", "reject", "respond"],
                    }
                ],
            },
            "id": "<id>",
            "response_schema": None,
        }
    ],
}
# raw JSON-RPC to /mcp: (status, body)
REFERENCE_MCP_RAW = {
    "ping": (200, '{"jsonrpc":"2.0","id":1,"result":{}}'),
    "unknown_method": (
        200,
        '{"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"Method not found: '
        'resources/list"}}',
    ),
    "no_accept": (
        400,
        '{"error": "Accept header must include application/json or text/event-stream"}',
    ),
    "no_jsonrpc": (
        400,
        '{"error": "Invalid JSON-RPC message. Missing or invalid jsonrpc version."}',
    ),
    "notification": (202, ""),
    "call_without_name": (
        200,
        '{"jsonrpc":"2.0","id":5,"error":{"code":-32602,"message":"Unknown tool: None"}}',
    ),
    "bad_json": (400, '{"error": "Invalid JSON"}'),
    "get": (405, ""),
    "delete": (404, ""),
}

HISTORY_SCOPE = {
    "uri": "https://langchain.com/a2a/extensions/history-scope/v1",
    "description": "Choose task-only or full-context response history",
    "required": False,
    "params": {
        "header": "LangGraph-A2A-History-Scope",
        "values": ["context", "task"],
        "default": "context",
        "methods": ["SendMessage", "GetTask", "ListTasks"],
    },
}
MODES = ["application/json", "text/plain"]
# GET /a2a/{id}/.well-known/agent-card.json of "agent" (its UUID and host as <...>)
REFERENCE_CARD = {
    "name": "agent",
    "description": "agent assistant",
    "url": "<base>/a2a/<assistant>",
    "supportedInterfaces": [
        {"url": "<base>/a2a/<assistant>", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
    ],
    "capabilities": {
        "streaming": True,
        "pushNotifications": False,
        "stateTransitionHistory": False,
        "extensions": [HISTORY_SCOPE],
    },
    "defaultInputModes": MODES,
    "defaultOutputModes": MODES,
    "skills": [
        {
            "id": "<assistant>-main",
            "name": "agent Capabilities",
            "description": "agent assistant",
            "tags": ["assistant", "langgraph"],
            "examples": [],
            "inputModes": MODES,
            "outputModes": MODES,
            "metadata": {
                "inputSchema": {
                    "required": ["messages"],
                    "properties": ["messages"],
                    "supportsA2A": True,
                }
            },
        }
    ],
    "version": "<version>",
}


def _history(*entries: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "messageId": "<messageId>",
            "contextId": "<contextId>",
            "taskId": "<taskId>",
            "role": role,
            "parts": [part],
        }
        for role, part in entries
    ]


def _task(state: str, history: list[Any], artifacts: list[Any] | None = None) -> dict[str, Any]:
    task: dict[str, Any] = {
        "id": "<id>",
        "contextId": "<contextId>",
        "status": {"state": state, "timestamp": "<timestamp>"},
    }
    if artifacts is not None:
        task["artifacts"] = artifacts
    task["history"] = history
    return {"task": task}


def _answer_artifact(text: str) -> dict[str, Any]:
    return {
        "artifactId": "<artifactId>",
        "name": "Assistant Response",
        "description": "Response from assistant <assistant>",
        "parts": [{"text": text}],
    }


# SendMessage "hello" to "agent" (the a2a-sdk 1.x client, not streaming)
REFERENCE_SEND = [
    _task(
        "TASK_STATE_COMPLETED",
        _history(("ROLE_USER", {"text": "hello"}), ("ROLE_AGENT", {"text": ANSWER})),
        [_answer_artifact(ANSWER)],
    )
]
# GetTask of that task
REFERENCE_GET = {
    "id": "<id>",
    "contextId": "<contextId>",
    "status": {
        "state": "TASK_STATE_COMPLETED",
        "message": {
            "messageId": "<messageId>",
            "taskId": "<taskId>",
            "role": "ROLE_AGENT",
            "parts": [{"text": "Task completed successfully"}],
        },
        "timestamp": "<timestamp>",
    },
    "history": _history(("ROLE_USER", {"text": "hello"}), ("ROLE_AGENT", {"text": ANSWER})),
}
# the same client streaming (SendStreamingMessage): the task first, then events the 1.x
# client reads as empty (LangGraph's server sends them unwrapped, as it does for 0.3)
REFERENCE_STREAM_FIRST = _task("TASK_STATE_SUBMITTED", _history(("ROLE_USER", {"text": "hello"})))
# SendMessage "gated" to "gated": the task asks for input, the interrupt as an artifact
REFERENCE_GATED = [
    _task(
        "TASK_STATE_INPUT_REQUIRED",
        _history(("ROLE_USER", {"text": "gated"})),
        [
            {
                "artifactId": "<artifactId>",
                "name": "Interrupt",
                "description": "Agent requires input to continue",
                "parts": [
                    {
                        "data": {
                            "value": {
                                "review_configs": [
                                    {
                                        "allowed_decisions": [
                                            "approve",
                                            "edit",
                                            "reject",
                                            "respond",
                                        ],
                                        "action_name": "add",
                                    }
                                ],
                                "action_requests": [
                                    {
                                        "description": "Tool execution requires approval\n\n"
                                        "Tool: add\nArgs: {'a': 2, 'b': 3}",
                                        "args": {"b": 3.0, "a": 2.0},
                                        "name": "add",
                                    }
                                ],
                            },
                            "id": "<id>",
                        }
                    }
                ],
            }
        ],
    )
]
# then a data part {"resume": {"decisions": [{"type": "approve"}]}} to that task
REFERENCE_GATED_RESUMED = [
    _task(
        "TASK_STATE_COMPLETED",
        _history(
            ("ROLE_USER", {"text": "gated"}),
            (
                "ROLE_AGENT",
                {
                    "data": {
                        "tool_results": [
                            {
                                "status": "success",
                                "content": "5",
                                "name": "add",
                                "toolCallId": "call_0_0_add",
                            }
                        ]
                    }
                },
            ),
            ("ROLE_AGENT", {"text": "2 + 3 is 5."}),
        ),
        [_answer_artifact("2 + 3 is 5.")],
    )
]
# raw `message/stream` (A2A 0.3's name): its first frame, one `working` frame (the
# reply so far), its last two frames
LEGACY_IDS = {"messageId": "<messageId>", "taskId": "<taskId>", "contextId": "<contextId>"}
REFERENCE_LEGACY_STREAM_FIRST = {
    "jsonrpc": "2.0",
    "id": 1,
    "result": {
        "kind": "task",
        "id": "<id>",
        "contextId": "<contextId>",
        "history": [
            {"kind": "message", "role": "user", "parts": [{"kind": "text", "text": "hello"}]}
            | LEGACY_IDS
        ],
        "status": {"state": "submitted", "timestamp": "<timestamp>"},
    },
}
REFERENCE_LEGACY_STREAM_LAST = [
    {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "taskId": "<taskId>",
            "contextId": "<contextId>",
            "kind": "artifact-update",
            "artifact": {
                "artifactId": "<artifactId>",
                "name": "Assistant Response",
                "description": "Response from assistant <assistant>",
                "parts": [{"kind": "text", "text": ANSWER}],
            },
            "append": False,
            "lastChunk": True,
        },
    },
    {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "taskId": "<taskId>",
            "contextId": "<contextId>",
            "kind": "status-update",
            "status": {"state": "completed", "timestamp": "<timestamp>"},
            "final": True,
        },
    },
]
# raw `message/stream` of "gated" to "gated": the task, the interrupt, input-required
INTERRUPT_VALUE = {
    "action_requests": [
        {
            "name": "add",
            "args": {"a": 2, "b": 3},
            "description": "Tool execution requires approval\n\nTool: add\nArgs: {'a': 2, 'b': 3}",
        }
    ],
    "review_configs": [
        {"action_name": "add", "allowed_decisions": ["approve", "edit", "reject", "respond"]}
    ],
}
REFERENCE_LEGACY_GATED_STREAM_LAST = [
    {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "taskId": "<taskId>",
            "contextId": "<contextId>",
            "kind": "artifact-update",
            "artifact": {
                "artifactId": "<artifactId>",
                "name": "Interrupt",
                "description": "Agent requires input to continue",
                "parts": [{"kind": "data", "data": {"id": "<id>", "value": INTERRUPT_VALUE}}],
            },
        },
    },
    {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "taskId": "<taskId>",
            "contextId": "<contextId>",
            "kind": "status-update",
            "status": {"state": "input-required", "timestamp": "<timestamp>"},
            "final": True,
        },
    },
]
# `tasks/cancel` of a task whose run sleeps in a tool, then `tasks/get` of it, then
# `tasks/cancel` again
REFERENCE_CANCEL = {
    "jsonrpc": "2.0",
    "id": 1,
    "result": {
        "kind": "task",
        "id": "<id>",
        "contextId": "<contextId>",
        "status": {
            "state": "canceled",
            "timestamp": "<timestamp>",
            "message": {
                "kind": "message",
                "role": "agent",
                "parts": [{"kind": "text", "text": "Task was canceled"}],
                "messageId": "<messageId>",
                "taskId": "<taskId>",
            },
        },
    },
}
REFERENCE_CANCELLED_GET = {
    "jsonrpc": "2.0",
    "id": 1,
    "result": {
        "kind": "task",
        "id": "<id>",
        "contextId": "<contextId>",
        "status": {"state": "canceled", "timestamp": "<timestamp>"},
        "history": [
            {"kind": "message", "role": "user", "parts": [{"kind": "text", "text": "slow"}]}
            | LEGACY_IDS
        ],
    },
}
REFERENCE_CANCEL_AGAIN = {
    "jsonrpc": "2.0",
    "id": 1,
    "error": {"code": -32002, "message": "Task is not cancelable in its current state"},
}


# ListTasks of a context where "one" then "two" were sent (two tasks), newest first; then
# with pageSize=1, historyLength=1; then of a context that has none
def _listed(first: str, *more: str) -> dict[str, Any]:
    task = _task("TASK_STATE_COMPLETED", [])["task"]
    history = [("ROLE_USER", first), ("ROLE_AGENT", f"answer to {first}")]
    history += [
        (role, text)
        for m in more
        for role, text in (("ROLE_USER", m), ("ROLE_AGENT", f"answer to {m}"))
    ]
    task["history"] = _history(*((role, {"text": text}) for role, text in history))
    return task


REFERENCE_LIST = {"tasks": [_listed("one", "two"), _listed("one")], "pageSize": 2, "totalSize": 2}
REFERENCE_LIST_PAGE = {
    "tasks": [{**_listed("one"), "history": _history(("ROLE_AGENT", {"text": "answer to two"}))}],
    "nextPageToken": "1",
    "pageSize": 1,
    "totalSize": 2,
}
REFERENCE_LIST_NONE: dict[str, Any] = {}
# SendMessage "approve" (text) to the task of "gated" that waits for its decisions
REFERENCE_TEXT_RESUME = [
    {
        "task": {
            "id": "<id>",
            "contextId": "<contextId>",
            "status": {
                "state": "TASK_STATE_FAILED",
                "message": {
                    "messageId": "<messageId>",
                    "contextId": "<contextId>",
                    "taskId": "<taskId>",
                    "role": "ROLE_AGENT",
                    "parts": [{"text": "Error executing assistant: TypeError"}],
                },
            },
        }
    }
]
REFERENCE_TEXT_RESUME_GET_STATUS = {
    "state": "TASK_STATE_FAILED",
    "timestamp": "<timestamp>",
    "message": {
        "messageId": "<messageId>",
        "taskId": "<taskId>",
        "role": "ROLE_AGENT",
        "parts": [{"text": "Task failed with status: error"}],
    },
}
# raw JSON-RPC to /a2a/{id}: (status, body); the assistant's UUID as <assistant>
REFERENCE_A2A_RAW = {
    "get_missing_task": (
        200,
        '{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"Task not found: nope:nope"}}',
    ),
    "unknown_method": (
        200,
        '{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found: '
        'tasks/resubscribe"}}',
    ),
    "unknown_assistant": (
        200,
        '{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Assistant \'<assistant>\' '
        'not found"}}',
    ),
    "no_message": (
        200,
        '{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Missing or invalid '
        "'message' in params\"}}",
    ),
    "no_message_id": (
        200,
        '{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Missing required '
        "'messageId' in message\"}}",
    ),
    "no_parts": (
        200,
        '{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Message must contain at '
        'least one part"}}',
    ),
    "bad_jsonrpc": (
        200,
        '{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"Invalid JSON-RPC message: '
        'missing or invalid jsonrpc version"}}',
    ),
    "resume_without_task": (
        200,
        '{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"contextId and taskId are '
        'required when resuming a task"}}',
    ),
    "negative_history": (
        200,
        '{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"historyLength must be a '
        'non-negative integer"}}',
    ),
    "bad_json": (
        200,
        '{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Invalid JSON payload"}}',
    ),
    "bad_accept": (400, '{"error":"Accept header must include application/json"}'),
}
# a part of an unknown kind: LangGraph's server names the three it takes (-32005)
REFERENCE_BAD_PART = (
    -32005,
    "Unsupported part type. A2A agents support 'text', 'data', and 'file' parts only.",
)

IDS = {"id", "contextId", "taskId", "artifactId", "messageId", "timestamp"}


def normal(value: Any) -> Any:
    """``value`` with its ids and times as placeholders (``<key>``) and the assistant in
    an artifact's description as ``<assistant>``."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key in IDS and isinstance(item, str):
                out[key] = f"<{key}>"
            elif key == "description" and str(item).startswith("Response from assistant "):
                out[key] = "Response from assistant <assistant>"
            else:
                out[key] = normal(item)
        return out
    if isinstance(value, list):
        return [normal(v) for v in value]
    return value


def shape(text: str) -> dict[str, Any]:
    """A ``tools/call`` answer's repr of the final values: each message's type, content,
    tool calls and keys; the rest normalised."""
    values = ast.literal_eval(text)
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key != "messages":
            out[key] = normal(value)
            continue
        out[key] = [
            {k: m[k] for k in ("type", "content", "tool_calls") if k in m} | {"keys": list(m)}
            for m in value
        ]
    return out


# -- MCP -----------------------------------------------------------------------------------


# the mcp client's task group must end in the task that began it: one client per test,
# opened and closed in its body (not in a fixture, whose teardown is another task)


async def test_mcp_lists_every_agent_as_a_tool(gateway: GatewayProcess) -> None:
    async with McpClient(f"{gateway.url}/mcp") as mcp:
        await _lists_every_agent(mcp)


async def _lists_every_agent(mcp: McpClient) -> None:
    assert mcp.protocol_version == REFERENCE_PROTOCOL
    assert mcp.server_info is not None and mcp.server_info.name == "loopline"
    listed = (await mcp.list_tools()).model_dump(mode="json", exclude_none=True)
    assert [t["name"] for t in listed["tools"]] == AGENTS
    assert "next_cursor" not in listed  # one page
    for tool in listed["tools"]:
        name = tool["name"]
        expected = {**REFERENCE_TOOL, "name": name, "title": name}
        assert tool == expected | {"description": f"Tool based on the {name} assistant"}


async def test_mcp_calls_an_agent_as_a_tool(gateway: GatewayProcess) -> None:
    async with McpClient(f"{gateway.url}/mcp") as mcp:
        await _calls_an_agent(mcp)


async def _calls_an_agent(mcp: McpClient) -> None:
    called = await mcp.call_tool("agent", {"messages": "hello"})
    assert not called.is_error
    assert shape(called.content[0].text) == REFERENCE_CALL  # type: ignore[union-attr]
    gated = await mcp.call_tool("gated", {"messages": "gated"})
    assert not gated.is_error  # the run stopped at its interrupt, which the values show
    assert shape(gated.content[0].text) == REFERENCE_CALL_GATED  # type: ignore[union-attr]


async def test_mcp_errors_as_langgraph_answers_them(gateway: GatewayProcess) -> None:
    async with McpClient(f"{gateway.url}/mcp") as mcp:
        await _errors(mcp)


async def _errors(mcp: McpClient) -> None:
    with pytest.raises(MCPError) as unknown:
        await mcp.call_tool("nobody", {"messages": "hello"})
    assert (unknown.value.error.code, unknown.value.error.message) == (
        -32602,
        "Unknown tool: nobody",
    )
    # input the agent cannot take: a tool error (isError) for the model to correct, as
    # LangGraph's server answers (its text, "OpenAIAPIError", is the model's failure on
    # an empty conversation; loopline says what is wrong before running)
    bad = await mcp.call_tool("agent", {"wrong": 1})
    assert bad.is_error
    assert 'input must be an object with "messages"' in bad.content[0].text  # type: ignore[union-attr]


async def test_mcp_raw_messages_as_langgraph_answers_them(gateway: GatewayProcess) -> None:
    accept = {"Accept": "application/json, text/event-stream"}

    def rpc(i: int, method: str, **params: Any) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": i, "method": method, "params": params}

    async with httpx.AsyncClient(base_url=gateway.url) as http:
        got = {}
        for name, body, headers in [
            ("ping", rpc(1, "ping"), accept),
            ("unknown_method", rpc(2, "resources/list"), accept),
            ("no_accept", rpc(3, "ping"), {"Accept": "text/html"}),
            ("no_jsonrpc", {"id": 4, "method": "ping"}, accept),
            ("notification", {"jsonrpc": "2.0", "method": "notifications/initialized"}, accept),
            ("call_without_name", rpc(5, "tools/call"), accept),
        ]:
            answer = await http.post("/mcp", json=body, headers=headers)
            got[name] = (answer.status_code, answer.text)
        answer = await http.post("/mcp", content=b"{not json", headers=accept)
        got["bad_json"] = (answer.status_code, answer.text)
        got["get"] = ((r := await http.get("/mcp")).status_code, r.text)
        got["delete"] = ((r := await http.delete("/mcp")).status_code, r.text)
        assert got == REFERENCE_MCP_RAW
        # what loopline does not act on is refused, where LangGraph's server ignores it
        task = rpc(6, "tools/call", name="agent", arguments={"messages": "x"}, task={"ttl": 1})
        refused = (await http.post("/mcp", json=task, headers=accept)).json()
        assert refused["error"]["code"] == -32602
        assert refused["error"]["message"].startswith("task: not supported")


async def test_mcp_and_a2a_take_the_callers_tenant(deployment: ServiceProcesses) -> None:
    """With API keys, ``/mcp`` and ``/a2a`` serve the agents of the key's tenant, and a
    caller without a key gets 401, as every other route."""
    env = {"LOOPLINE_API_KEYS": f"key-main={deployment.prefix}"}
    with GatewayProcess(deployment.redis_url, deployment.prefix, env=env) as api:
        # the mcp client speaks httpx2; the key rides on the client it is given
        async with httpx2.AsyncClient(headers={"x-api-key": "key-main"}) as keyed:
            transport = streamable_http_client(f"{api.url}/mcp", http_client=keyed)
            async with McpClient(transport) as mcp:
                assert [t.name for t in (await mcp.list_tools()).tools] == AGENTS
        async with httpx.AsyncClient(base_url=api.url) as http:
            accept = {"Accept": "application/json, text/event-stream"}
            ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
            assert (await http.post("/mcp", json=ping, headers=accept)).status_code == 401
            assert (await http.get("/a2a/agent")).status_code == 401
            card = await http.get("/a2a/agent", headers={"x-api-key": "key-main"})
            assert card.json()["name"] == "agent"


# -- A2A -----------------------------------------------------------------------------------


def _message(text: str | None = None, data: Any = None, **ids: str) -> Message:
    part = Part(text=text) if text is not None else Part(data=ParseDict(data, Value()))
    return Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[part], **ids)


async def _client(url: str, *, streaming: bool, legacy: bool = False) -> Client:
    """The a2a-sdk client for the agent at ``url``, from its card (discovered at
    ``{url}/.well-known/agent-card.json``); ``legacy``: its A2A 0.3 transport
    (``message/send``, ``message/stream``, ``tasks/get``)."""
    async with httpx.AsyncClient() as http:
        card = await A2ACardResolver(http, url).get_agent_card()
    if legacy:
        card.supported_interfaces[0].protocol_version = "0.3"
    return ClientFactory(ClientConfig(streaming=streaming)).create(card)


async def _send(client: Client, message: Message) -> list[dict[str, Any]]:
    return [
        MessageToDict(e) async for e in client.send_message(SendMessageRequest(message=message))
    ]


async def test_a2a_agent_card(gateway: GatewayProcess) -> None:
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        cards = [
            await http.get("/a2a/agent/.well-known/agent-card.json"),
            await http.get("/a2a/agent/.well-known/agent.json"),
            await http.get("/a2a/agent"),
            await http.get("/.well-known/agent-card.json", params={"assistant_id": "agent"}),
        ]
        unknown = await http.get("/a2a/nobody/.well-known/agent-card.json")
    assert {c.status_code for c in cards} == {200}
    assert all(c.json() == cards[0].json() for c in cards)
    card = json.loads(
        cards[0].text.replace(gateway.url, "<base>").replace("/a2a/agent", "/a2a/<assistant>")
    )
    assert card.pop("version")
    card["skills"][0]["id"] = card["skills"][0]["id"].replace("agent-main", "<assistant>-main")
    assert card == {k: v for k, v in REFERENCE_CARD.items() if k != "version"}
    assert unknown.status_code == 400
    assert unknown.json() == {"error": {"code": -32602, "message": "Assistant 'nobody' not found"}}


async def test_a2a_send_and_get_a_task(gateway: GatewayProcess) -> None:
    client = await _client(f"{gateway.url}/a2a/agent", streaming=False)
    sent = await _send(client, _message("hello"))
    assert normal(sent) == REFERENCE_SEND
    task = sent[0]["task"]
    assert task["history"][0]["messageId"]  # the client's message id comes back
    assert task["id"].startswith(f"{task['contextId']}:")
    got = MessageToDict(await client.get_task(GetTaskRequest(id=task["id"])))
    assert normal(got) == REFERENCE_GET
    assert got["history"] == task["history"]
    await client.close()


async def test_a2a_a_second_message_in_a_context_is_a_new_task(gateway: GatewayProcess) -> None:
    client = await _client(f"{gateway.url}/a2a/agent", streaming=False)
    first = (await _send(client, _message("one")))[0]["task"]
    second = (await _send(client, _message("two", context_id=first["contextId"])))[0]["task"]
    assert second["contextId"] == first["contextId"] and second["id"] != first["id"]
    tasks = [m["taskId"] for m in second["history"]]
    texts = [m["parts"][0]["text"] for m in second["history"]]
    assert texts == ["one", "answer to one", "two", "answer to two"]
    assert tasks == [first["id"], first["id"], second["id"], second["id"]]
    await client.close()


async def test_a2a_list_a_contexts_tasks(gateway: GatewayProcess) -> None:
    client = await _client(f"{gateway.url}/a2a/agent", streaming=False)
    first = (await _send(client, _message("one")))[0]["task"]
    second = (await _send(client, _message("two", context_id=first["contextId"])))[0]["task"]
    context = first["contextId"]
    listed = MessageToDict(await client.list_tasks(ListTasksRequest(context_id=context)))
    assert normal(listed) == REFERENCE_LIST
    assert [t["id"] for t in listed["tasks"]] == [second["id"], first["id"]]
    assert [m["taskId"] for m in listed["tasks"][0]["history"]] == [first["id"]] * 2 + [
        second["id"]
    ] * 2
    paged = ListTasksRequest(context_id=context, page_size=1, history_length=1)
    assert normal(MessageToDict(await client.list_tasks(paged))) == REFERENCE_LIST_PAGE
    done = ListTasksRequest(context_id=context, page_size=1, page_token="1")
    assert [t["id"] for t in MessageToDict(await client.list_tasks(done))["tasks"]] == [first["id"]]
    nothing = ListTasksRequest(context_id=str(uuid.uuid4()))
    assert MessageToDict(await client.list_tasks(nothing)) == REFERENCE_LIST_NONE
    working = ListTasksRequest(context_id=context, status=TaskState.TASK_STATE_WORKING)
    assert MessageToDict(await client.list_tasks(working)) == {}
    await client.close()


async def test_a2a_stream(gateway: GatewayProcess) -> None:
    client = await _client(f"{gateway.url}/a2a/agent", streaming=True)
    events = await _send(client, _message("hello"))
    assert normal(events[0]) == REFERENCE_STREAM_FIRST
    # as from LangGraph's server, the 1.x client reads the updates as empty events
    assert len(events) >= 3 and all(e == {} for e in events[1:])
    await client.close()


async def test_a2a_legacy_client_sends_streams_and_gets(gateway: GatewayProcess) -> None:
    """The a2a-sdk's A2A 0.3 transport: ``message/send``, ``message/stream``,
    ``tasks/get``, answered in 0.3's shape and read back by the client."""
    client = await _client(f"{gateway.url}/a2a/agent", streaming=False, legacy=True)
    sent = await _send(client, _message("hello"))
    assert normal(sent) == REFERENCE_SEND
    got = MessageToDict(await client.get_task(GetTaskRequest(id=sent[0]["task"]["id"])))
    assert normal(got) == REFERENCE_GET
    await client.close()
    client = await _client(f"{gateway.url}/a2a/agent", streaming=True, legacy=True)
    events = await _send(client, _message("hello"))
    await client.close()
    assert normal(events[0]) == REFERENCE_STREAM_FIRST
    working = [e["statusUpdate"] for e in events[1:-2]]
    assert working and {w["status"]["state"] for w in working} == {"TASK_STATE_WORKING"}
    assert working[-1]["status"]["message"]["parts"] == [{"text": ANSWER}]
    assert events[-2]["artifactUpdate"]["artifact"]["parts"] == [{"text": ANSWER}]
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


def _legacy(method: str, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def _legacy_message(text: str) -> dict[str, Any]:
    parts = [{"kind": "text", "text": text}]
    return {"role": "user", "parts": parts, "messageId": str(uuid.uuid4()), "kind": "message"}


async def _frames(http: httpx.AsyncClient, agent: str, text: str) -> AsyncIterator[Any]:
    """The JSON-RPC answers of a raw ``message/stream``, as they come."""
    body = _legacy("message/stream", message=_legacy_message(text))
    headers = {"Accept": "text/event-stream"}
    async with http.stream("POST", f"/a2a/{agent}", json=body, headers=headers) as answer:
        assert answer.headers["content-type"].startswith("text/event-stream")
        async for line in answer.aiter_lines():
            if line.startswith("data: "):
                yield json.loads(line.removeprefix("data: "))


async def test_a2a_raw_legacy_stream(gateway: GatewayProcess) -> None:
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        frames = [f async for f in _frames(http, "agent", "hello")]
    assert normal(frames[0]) == REFERENCE_LEGACY_STREAM_FIRST
    assert normal(frames[-2:]) == REFERENCE_LEGACY_STREAM_LAST
    replies = [f["result"]["status"]["message"]["parts"][0]["text"] for f in frames[1:-2]]
    assert replies and replies[-1] == ANSWER
    assert all(ANSWER.startswith(r) for r in replies)  # the reply so far, growing
    assert {f["result"]["status"]["state"] for f in frames[1:-2]} == {"working"}


async def test_a2a_raw_legacy_stream_stops_at_an_interrupt(gateway: GatewayProcess) -> None:
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        frames = [f async for f in _frames(http, "gated", "gated")]
    first = json.loads(json.dumps(REFERENCE_LEGACY_STREAM_FIRST).replace('"hello"', '"gated"'))
    assert normal(frames[0]) == first
    assert normal(frames[1:]) == REFERENCE_LEGACY_GATED_STREAM_LAST


async def test_a2a_cancel_a_running_task(gateway: GatewayProcess) -> None:
    """``tasks/cancel`` while the run sleeps in a tool: the task is ``canceled``, the
    stream ends, a second cancel is refused. LangGraph's server ends that stream with an
    empty answer and ``completed``; loopline ends it ``canceled``, as ``tasks/get``
    (of both) says."""
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
        frames = _frames(http, "agent", "slow")
        first = await anext(frames)
        task_id = first["result"]["id"]
        accept = {"Accept": "application/json"}

        async def call(method: str) -> Any:
            body = _legacy(method, id=task_id)
            return normal((await http.post("/a2a/agent", json=body, headers=accept)).json())

        assert await call("tasks/cancel") == REFERENCE_CANCEL
        rest = [f async for f in frames]
        assert rest[-1]["result"]["status"]["state"] == "canceled"
        assert rest[-1]["result"]["final"] is True
        assert await call("tasks/get") == REFERENCE_CANCELLED_GET
        assert await call("tasks/cancel") == REFERENCE_CANCEL_AGAIN


async def test_a2a_interrupt_and_resume(gateway: GatewayProcess) -> None:
    client = await _client(f"{gateway.url}/a2a/gated", streaming=False)
    asked = await _send(client, _message("gated"))
    assert normal(asked) == REFERENCE_GATED
    task = asked[0]["task"]
    got = MessageToDict(await client.get_task(GetTaskRequest(id=task["id"])))
    assert got["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    approve = {"resume": {"decisions": [{"type": "approve"}]}}
    ids = {"task_id": task["id"], "context_id": task["contextId"]}
    resumed = await _send(client, _message(data=approve, **ids))
    assert normal(resumed) == REFERENCE_GATED_RESUMED
    assert resumed[0]["task"]["id"] == task["id"]  # the same task goes on
    got = MessageToDict(await client.get_task(GetTaskRequest(id=task["id"])))
    assert got["status"]["state"] == "TASK_STATE_COMPLETED"
    await client.close()


async def test_a2a_text_that_cannot_answer_an_interrupt_fails_the_task(
    gateway: GatewayProcess,
) -> None:
    """Text sent to a task that waits for input is its answer (``command.resume``); for
    HumanInTheLoopMiddleware, whose answer is ``{"decisions": [...]}``, the run fails and
    so does the task, on both servers, with the node's ``TypeError``."""
    client = await _client(f"{gateway.url}/a2a/gated", streaming=False)
    task = (await _send(client, _message("gated")))[0]["task"]
    ids = {"task_id": task["id"], "context_id": task["contextId"]}
    failed = await _send(client, _message("approve", **ids))
    assert normal(failed) == REFERENCE_TEXT_RESUME  # the node's TypeError named, as there
    got = MessageToDict(await client.get_task(GetTaskRequest(id=task["id"])))
    assert normal(got["status"]) == REFERENCE_TEXT_RESUME_GET_STATUS
    with pytest.raises(UnsupportedOperationError, match="A terminal task cannot accept"):
        await _send(client, _message(data={"resume": {"decisions": [{"type": "approve"}]}}, **ids))
    await client.close()


async def test_a2a_errors_as_langgraph_answers_them(gateway: GatewayProcess) -> None:
    message = {"role": "user", "parts": [{"kind": "text", "text": "hi"}], "messageId": "m-1"}

    def rpc(method: str, **params: Any) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}

    cases: dict[str, tuple[str, Any]] = {
        "get_missing_task": ("agent", rpc("tasks/get", id="nope:nope")),
        "unknown_method": ("agent", rpc("tasks/resubscribe", id="x")),
        "unknown_assistant": ("nobody", rpc("message/send", message=message)),
        "no_message": ("agent", rpc("message/send")),
        "no_message_id": ("agent", rpc("message/send", message={**message, "messageId": None})),
        "no_parts": ("agent", rpc("message/send", message={**message, "parts": []})),
        "bad_jsonrpc": ("agent", {"id": 1, "method": "message/send"}),
        "resume_without_task": (
            "agent",
            rpc("message/send", message={**message, "parts": [{"data": {"resume": 1}}]}),
        ),
        "negative_history": (
            "agent",
            rpc("message/send", message=message, configuration={"historyLength": -1}),
        ),
    }
    accept = {"Accept": "application/json"}
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        got = {}
        for name, (agent, body) in cases.items():
            answer = await http.post(f"/a2a/{agent}", json=body, headers=accept)
            got[name] = (answer.status_code, answer.text.replace("nobody", "<assistant>"))
        answer = await http.post("/a2a/agent", content=b"{bad", headers=accept)
        got["bad_json"] = (answer.status_code, answer.text)
        sent = rpc("message/send", message=message)
        answer = await http.post("/a2a/agent", json=sent, headers={"Accept": "text/html"})
        got["bad_accept"] = (answer.status_code, answer.text)
        assert got == REFERENCE_A2A_RAW

        async def error_of(body: Any) -> tuple[int, str]:
            found = (await http.post("/a2a/agent", json=body, headers=accept)).json()["error"]
            return found["code"], found["message"]

        weird = {**message, "parts": [{"kind": "weird"}]}
        code, text = await error_of(rpc("message/send", message=weird))
        assert code == REFERENCE_BAD_PART[0] and text.startswith("Unsupported part type.")
        # not implemented by loopline, refused rather than ignored (LangGraph's server
        # serves file parts and every context's tasks, and ignores a push notification
        # config)
        file_part = {**message, "parts": [{"kind": "file", "file": {"uri": "http://x/a"}}]}
        assert await error_of(rpc("message/send", message=file_part)) == (
            -32005,
            "file parts are not supported by this gateway",
        )
        push = {"pushNotificationConfig": {"url": "http://x"}}
        assert (await error_of(rpc("message/send", message=message, configuration=push)))[
            0
        ] == -32003
        assert await error_of(rpc("tasks/cancel", id="nope:nope")) == (
            -32001,
            "Task not found: nope:nope",
        )
        code, text = await error_of(rpc("ListTasks"))
        assert code == -32602 and text.startswith("contextId is required")
        extra = {**message, "referenceTaskIds": ["x"]}
        code, text = await error_of(rpc("message/send", message=extra))
        assert code == -32602 and text.startswith("message.referenceTaskIds: not supported")
        both = {**message, "parts": [{"text": "yes"}, {"data": {"resume": 1}}]}
        assert await error_of(rpc("message/send", message=both)) == (
            -32602,
            "send a resume data part without text parts",
        )
        other = {**message, "parts": [{"kind": "data", "data": {"city": "Paris"}}]}
        code, text = await error_of(rpc("message/send", message=other))
        assert code == -32602 and "other than" in text

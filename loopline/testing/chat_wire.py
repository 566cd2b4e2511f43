"""The OpenAI chat-completions wire format, as the scripted server speaks it: parsing a
request body, and a scripted reply as one completion or as a stream of SSE chunks.

Kept apart from the HTTP server so the payloads (what the real ``openai`` client must
accept byte for byte) read in one place.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any, cast

from contracts.replies import Reply, ScriptedToolCall

DEFAULT_MODEL = "scripted"
STREAM_PIECE = 8  # characters per streamed delta, small enough that clients must reassemble


class BadRequest(Exception):
    """Raised while parsing a request; mapped to an OpenAI-style 400."""


def parse_request(raw: bytes) -> dict[str, Any]:
    """The request's JSON body, checked as far as a chat-completions server checks it."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"Could not parse request body as JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise BadRequest("Request body must be a JSON object")
    if not isinstance(body.get("messages"), list):
        raise BadRequest("'messages' is a required property and must be an array")
    return cast(dict[str, Any], body)


def call_id(call: ScriptedToolCall, turn: int, index: int) -> str:
    """The call's own id, else one derived from its place: reruns give the same ids."""
    return call.id if call.id is not None else f"call_{turn}_{index}_{call.name}"


def _tool_calls_json(reply: Reply, turn: int) -> list[dict[str, Any]]:
    return [
        {
            "id": call_id(call, turn, i),
            "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.args)},
        }
        for i, call in enumerate(reply.tool_calls)
    ]


def _usage(reply: Reply, body: dict[str, Any]) -> dict[str, int]:
    prompt = reply.prompt_tokens
    if prompt is None:
        prompt = len(json.dumps(body.get("messages", []))) // 4
    completion = reply.completion_tokens
    if completion is None:
        completion = len(reply.content) // 4 + 1
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _finish_reason(reply: Reply) -> str:
    return "tool_calls" if reply.tool_calls else "stop"


def completion(
    completion_id: str, model: str, reply: Reply, turn: int, body: dict[str, Any]
) -> dict[str, Any]:
    """The reply as one ``chat.completion`` object (a request without ``stream``)."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": reply.content if reply.content or not reply.tool_calls else None,
    }
    if reply.tool_calls:
        message["tool_calls"] = _tool_calls_json(reply, turn)
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": _finish_reason(reply),
            }
        ],
        "usage": _usage(reply, body),
    }


class _Chunks:
    """``chat.completion.chunk`` frames of one streamed completion."""

    def __init__(self, completion_id: str, model: str, include_usage: bool) -> None:
        self.completion_id = completion_id
        self.model = model
        self.include_usage = include_usage
        self.created = int(time.time())

    def frame(
        self,
        delta: dict[str, Any] | None,
        finish: str | None = None,
        usage: dict[str, int] | None = None,
    ) -> str:
        payload: dict[str, Any] = {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": (
                []
                if delta is None
                else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
            ),
        }
        if self.include_usage:
            payload["usage"] = usage
        return f"data: {json.dumps(payload)}\n\n"


def stream_events(
    completion_id: str,
    model: str,
    reply: Reply,
    turn: int,
    body: dict[str, Any],
    include_usage: bool,
) -> Iterator[str]:
    """The reply as SSE events, content and tool-call arguments cut in small pieces."""
    chunks = _Chunks(completion_id, model, include_usage)
    yield chunks.frame({"role": "assistant", "content": ""})
    content = reply.content
    for start in range(0, len(content), STREAM_PIECE):
        yield chunks.frame({"content": content[start : start + STREAM_PIECE]})
    for i, call in enumerate(reply.tool_calls):
        head = {
            "index": i,
            "id": call_id(call, turn, i),
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        yield chunks.frame({"tool_calls": [head]})
        arguments = json.dumps(call.args)
        for start in range(0, len(arguments), STREAM_PIECE):
            piece = arguments[start : start + STREAM_PIECE]
            yield chunks.frame({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
    yield chunks.frame({}, _finish_reason(reply))
    if include_usage:
        yield chunks.frame(None, usage=_usage(reply, body))
    yield "data: [DONE]\n\n"

"""The reply-script format: what a scripted model answers, turn by turn.

Two scripted models read it: the OpenAI-compatible server of ``loopline.testing.scripted``
(tests, benchmarks, the demo, docker compose's demo profile) and the in-consumer ``fake``
chat model of the model service (``services.model.fake``, for benchmarks that must measure
loopline rather than HTTP). It lives here, below both, because a service never imports
``loopline``. Pure data: reading a script file is the caller's business.

The JSON form is a list of turns::

    [{"content": "...", "tool_calls": [{"name": "lookup", "args": {...}, "id": "..."}],
      "prompt_tokens": 42, "completion_tokens": 7}, ...]

where every key of a turn, and ``id`` of a call, may be left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Reply", "ScriptedToolCall", "replies_from_json"]


@dataclass(frozen=True)
class ScriptedToolCall:
    """One tool call the scripted model will emit.

    ``id`` may be left out: a deterministic one is derived from the turn and position so
    repeated runs produce byte-identical conversations.
    """

    name: str
    args: dict[str, Any]
    id: str | None = None


@dataclass(frozen=True)
class Reply:
    """One scripted assistant turn.

    Token counts can be pinned so tests of accounting/budget logic get exact numbers;
    left as ``None`` they are estimated from the payload sizes.
    """

    content: str = ""
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


def _tool_call(turn: int, index: int, call: Any) -> ScriptedToolCall:
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise ValueError(f"turn {turn} tool_calls[{index}] needs a string 'name'")
    args = call.get("args", {})
    if not isinstance(args, dict):
        raise ValueError(f"turn {turn} tool_calls[{index}].args must be an object")
    call_id = call.get("id")
    return ScriptedToolCall(
        name=call["name"], args=args, id=str(call_id) if call_id is not None else None
    )


def _optional_int(value: Any) -> int | None:
    return int(value) if value is not None else None


def replies_from_json(data: Any) -> tuple[Reply, ...]:
    """Build replies from the JSON script format (parsed), so compose files and agent
    specs need no Python."""
    if not isinstance(data, list):
        raise ValueError("script must be a JSON list of turns")
    replies: list[Reply] = []
    for t, turn in enumerate(data):
        if not isinstance(turn, dict):
            raise ValueError(f"turn {t} must be an object")
        calls = [_tool_call(t, i, call) for i, call in enumerate(turn.get("tool_calls") or [])]
        replies.append(
            Reply(
                content=str(turn.get("content") or ""),
                tool_calls=tuple(calls),
                prompt_tokens=_optional_int(turn.get("prompt_tokens")),
                completion_tokens=_optional_int(turn.get("completion_tokens")),
            )
        )
    return tuple(replies)

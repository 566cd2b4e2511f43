"""``RateLimitMiddleware``: requests and tokens per minute per model, enforced across every
replica of the model consumer through Redis (LangChain has no such middleware).

A sliding window per model: before a call, a Lua script admits it only if the window holds
fewer than ``requests_per_minute`` calls and its tokens plus the call's estimate stay
within ``tokens_per_minute``; else the call waits until the oldest entry leaves the window.
Admission reserves the estimate (the prompt at four characters a token, plus the model's
``max_tokens`` when set), so calls in flight count before they report; after the call, the
reservation is replaced by its actual usage (the reply's ``usage_metadata``). Check and
reservation are one script, so replicas never over-admit together. With an estimate below
the actual usage (no ``max_tokens``), a window can exceed the limit by that difference; a
single call larger than the limit is admitted into an empty window.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware

from contracts.agent import MiddlewareSpec

# KEYS: requests zset, tokens zset. ARGV: now, window, rpm (0 = none), tpm (0 = none), id,
# estimate (tokens). Returns 0 when admitted (and recorded), else the seconds to wait.
_ADMIT = """
local now, window = tonumber(ARGV[1]), tonumber(ARGV[2])
local rpm, tpm = tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
local wait = 0
if rpm > 0 and redis.call('ZCARD', KEYS[1]) >= rpm then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  wait = math.max(wait, tonumber(oldest[2]) + window - now)
end
if tpm > 0 then
  local used = 0
  for _, member in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
    used = used + tonumber(string.match(member, ':(%d+)$'))
  end
  if used > 0 and used + tonumber(ARGV[6]) > tpm then
    local oldest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    wait = math.max(wait, tonumber(oldest[2]) + window - now)
  end
end
if wait > 0 then return tostring(wait) end
redis.call('ZADD', KEYS[1], now, ARGV[5])
redis.call('EXPIRE', KEYS[1], math.ceil(window) + 1)
if tpm > 0 then
  redis.call('ZADD', KEYS[2], now, ARGV[5] .. ':' .. ARGV[6])
  redis.call('EXPIRE', KEYS[2], math.ceil(window) + 1)
end
return '0'
"""

# KEYS: tokens zset. ARGV: id, estimate, actual. The reservation becomes the actual usage,
# at the time of admission (it leaves the window when the reservation would have).
_SETTLE = """
local member = ARGV[1] .. ':' .. ARGV[2]
local at = redis.call('ZSCORE', KEYS[1], member)
if not at then return 0 end
redis.call('ZREM', KEYS[1], member)
redis.call('ZADD', KEYS[1], at, ARGV[1] .. ':' .. ARGV[3])
return 1
"""


def estimate_tokens(request: Any) -> int:
    """A call's tokens before it runs: its prompt at four characters a token, plus the
    completion the model may write (``max_tokens``) when set."""
    chars = sum(len(str(getattr(m, "content", ""))) for m in request.messages)
    system = getattr(request, "system_message", None)
    if system is not None:
        chars += len(str(system.content))
    limit = getattr(request.model, "max_tokens", None)
    return chars // 4 + 1 + (int(limit) if isinstance(limit, int) else 0)


_redis: Any = None
_prefix = "loopline"


def configure(redis: Any, prefix: str) -> None:
    """Called by the model consumer at start: the Redis shared by all its replicas."""
    global _redis, _prefix
    _redis, _prefix = redis, prefix


class RateLimitMiddleware(AgentMiddleware):
    """Hold model calls so that all replicas together stay within the limits."""

    def __init__(
        self,
        *,
        requests_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
        window_seconds: float = 60.0,
        key: str | None = None,
    ) -> None:
        super().__init__()
        if not requests_per_minute and not tokens_per_minute:
            raise ValueError("set requests_per_minute and/or tokens_per_minute")
        self.requests_per_minute = requests_per_minute
        self.tokens_per_minute = tokens_per_minute
        self.window_seconds = window_seconds
        self.key = key

    runs_in_any_mode = True
    """loopline's own: its async hook runs for sync runs (``invoke``) too."""

    def to_spec(self) -> MiddlewareSpec:
        params = {
            "requests_per_minute": self.requests_per_minute,
            "tokens_per_minute": self.tokens_per_minute,
            "window_seconds": self.window_seconds,
            "key": self.key,
        }
        return MiddlewareSpec(
            type="RateLimitMiddleware", params={k: v for k, v in params.items() if v is not None}
        )

    def _keys(self, model: Any) -> list[str]:
        name = self.key or str(getattr(model, "model_name", None) or type(model).__name__)
        return [
            f"{_prefix}:ratelimit:{{{name}}}:requests",
            f"{_prefix}:ratelimit:{{{name}}}:tokens",
        ]

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        if _redis is None:  # outside a model consumer (e.g. a plain LangChain agent)
            return await handler(request)
        keys = self._keys(request.model)
        call_id = uuid.uuid4().hex
        estimate = estimate_tokens(request) if self.tokens_per_minute else 0
        while True:
            wait = float(
                await _redis.eval(
                    _ADMIT,
                    2,
                    *keys,
                    time.time(),
                    self.window_seconds,
                    self.requests_per_minute or 0,
                    self.tokens_per_minute or 0,
                    call_id,
                    estimate,
                )
            )
            if wait <= 0:
                break
            await asyncio.sleep(min(wait, self.window_seconds) + 0.01)
        response = await handler(request)
        if self.tokens_per_minute:
            used = 0
            for message in getattr(response, "result", [response]):
                usage = getattr(message, "usage_metadata", None) or {}
                used += int(usage.get("total_tokens", 0))
            if used:  # a reply without usage keeps its estimate
                await _redis.eval(_SETTLE, 1, keys[1], call_id, estimate, used)
        return response

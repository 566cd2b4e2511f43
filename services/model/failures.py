"""How a failed model call reads in its task's failure reason.

The OpenAI client's own message for a server it cannot reach is ``Connection error.``,
which says neither where it tried nor why: the reason names the request (method and URL:
the endpoint the operator configured for the model) and the innermost cause (a name
that does not resolve, a refused connection, a timeout)."""

from __future__ import annotations

from typing import Any


def failure_text(exc: BaseException) -> str:
    """``Type: message``, and for an HTTP call the request and its root cause."""
    text = f"{type(exc).__name__}: {exc}"
    request = _request_of(exc)
    if request is None:
        return text
    where = f"{request.method} {request.url}"
    root = _root_cause(exc)
    if root is not exc and str(root):
        where += f": {type(root).__name__}: {root}"
    return f"{text} ({where})"


def _request_of(exc: BaseException) -> Any:
    """The httpx request an OpenAI or httpx error carries, else None (httpx raises
    RuntimeError for an error made without one)."""
    try:
        request = getattr(exc, "request", None)
    except RuntimeError:
        return None
    return request if hasattr(request, "url") and hasattr(request, "method") else None


def _root_cause(exc: BaseException) -> BaseException:
    seen = {id(exc)}
    found = exc
    while True:
        nxt = found.__cause__ or found.__context__
        if nxt is None or id(nxt) in seen:
            return found
        seen.add(id(nxt))
        found = nxt

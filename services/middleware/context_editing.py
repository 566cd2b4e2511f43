"""LangChain's ``ContextEditingMiddleware`` and ``ClearToolUsesEdit``, same parameters and
defaults, plus an ``include_tools`` allow-list.

In a running agent the context consumer applies the edits to the model's view on every
step (the stored transcript keeps the full output). The same engine is usable as a plain
library: ``ContextEditingMiddleware(...).edit(messages)`` on LangChain or loopline messages.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from contracts.agent import MiddlewareSpec
from contracts.messages import MESSAGE_TYPES, Message, from_langchain, to_langchain

DEFAULT_TOOL_PLACEHOLDER = "[cleared]"


@dataclass(slots=True)
class ClearToolUsesEdit:
    """Clear older tool results once the conversation is over ``trigger`` tokens."""

    trigger: int = 100_000
    """Token count that triggers the edit (strictly above)."""

    clear_at_least: int = 0
    """Minimum number of tokens to reclaim when the edit runs (0: clear all candidates)."""

    keep: int = 3
    """Number of most recent tool results that are never cleared."""

    clear_tool_inputs: bool = False
    """Also clear the originating tool call's arguments on the AI message."""

    exclude_tools: Sequence[str] = ()
    """Tool names whose results are never cleared."""

    placeholder: str = DEFAULT_TOOL_PLACEHOLDER
    """Text that replaces a cleared tool result."""

    include_tools: Sequence[str] | None = None
    """loopline extension: only these tools' results may be cleared (None: all)."""

    type: str = field(default="ClearToolUsesEdit", init=False, repr=False)

    def to_params(self) -> dict[str, Any]:
        params = asdict(self)
        params["exclude_tools"] = list(self.exclude_tools)
        if self.include_tools is not None:
            params["include_tools"] = list(self.include_tools)
        return params

    def engine_edit(self) -> Any:
        from services.editing.engine import ClearToolUses

        return ClearToolUses(
            trigger=self.trigger,
            clear_at_least=self.clear_at_least,
            keep=self.keep,
            clear_tool_inputs=self.clear_tool_inputs,
            exclude_tools=tuple(self.exclude_tools),
            placeholder=self.placeholder,
            include_tools=None if self.include_tools is None else tuple(self.include_tools),
        )


def _edit_from_params(params: Any) -> ClearToolUsesEdit:
    if isinstance(params, ClearToolUsesEdit):
        return params
    if hasattr(params, "trigger") and hasattr(params, "placeholder"):  # LangChain's class
        return ClearToolUsesEdit(
            trigger=params.trigger,
            clear_at_least=params.clear_at_least,
            keep=params.keep,
            clear_tool_inputs=params.clear_tool_inputs,
            exclude_tools=tuple(params.exclude_tools),
            placeholder=params.placeholder,
        )
    if not isinstance(params, dict):
        raise TypeError(f"an edit must be ClearToolUsesEdit or a dict, not {params!r}")
    kind = params.get("type", "ClearToolUsesEdit")
    if kind != "ClearToolUsesEdit":
        raise ValueError(f"unknown context edit type {kind!r}; supported: ClearToolUsesEdit")
    args = {k: v for k, v in params.items() if k != "type"}
    for key in ("exclude_tools", "include_tools"):
        if args.get(key) is not None:
            args[key] = tuple(args[key])
    return ClearToolUsesEdit(**args)


class ContextEditingMiddleware:
    """Prune tool results from the model's view when the context grows too large."""

    spec_type = "ContextEditingMiddleware"

    def __init__(
        self,
        *,
        edits: Iterable[ClearToolUsesEdit | dict[str, Any]] | None = None,
        token_count_method: Literal["approximate", "model"] = "approximate",
        token_counter: Callable[[Sequence[Any]], int] | dict[str, str] | None = None,
    ) -> None:
        """``token_counter``: LangChain's custom count of a message list (then
        ``token_count_method`` is ignored, as in LangChain); it travels to the context
        service by import path (``{"callable": "package.module:name"}`` in a spec), or
        embedded as a ``local:`` reference."""
        if token_count_method not in ("approximate", "model"):
            raise ValueError(
                f"token_count_method must be 'approximate' or 'model', not {token_count_method!r}"
            )
        if token_counter is not None and not (
            callable(token_counter) or isinstance(token_counter, dict)
        ):
            raise TypeError(f"token_counter must be a function, not {token_counter!r}")
        self.edits = [_edit_from_params(e) for e in (edits or (ClearToolUsesEdit(),))]
        self.token_count_method = token_count_method
        self.token_counter = token_counter

    def to_spec(self) -> MiddlewareSpec:
        """The spec; a ``token_counter`` function stays an object here, turned into its
        reference by ``services.spec.middleware.to_spec`` (and back by its ``from_spec``)."""
        params: dict[str, Any] = {
            "edits": [e.to_params() for e in self.edits],
            "token_count_method": self.token_count_method,
        }
        if self.token_counter is not None:
            params["token_counter"] = self.token_counter
        return MiddlewareSpec(type=self.spec_type, params=params)

    def counter(self, model: str) -> Any:
        """The token counter the edits use: the custom one, else the method's."""
        from services.editing.counting import ListCounter, make_counter

        if self.token_counter is None:
            return make_counter(self.token_count_method, model)
        if not callable(self.token_counter):
            raise TypeError(
                "token_counter is a reference: build the middleware with "
                "services.spec.middleware.from_spec, which imports it"
            )
        return ListCounter(self.token_counter)

    @classmethod
    def from_spec(cls, spec: MiddlewareSpec) -> ContextEditingMiddleware:
        return cls(**spec.params)

    def edit(
        self,
        messages: Sequence[Any],
        *,
        system_message: Any = None,
        model: str = "gpt-4o-mini",
    ) -> list[Any]:
        """The model's view of ``messages`` after the edits, as LangChain computes it.

        Messages may be ``langchain_core`` messages (returned as such) or loopline's.
        ``system_message`` and ``model`` matter only for ``token_count_method="model"``.
        """
        from services.editing.engine import base_tokens_for, edit_context

        as_langchain = bool(messages) and not isinstance(messages[0], MESSAGE_TYPES)
        ours: list[Message] = [
            m if isinstance(m, MESSAGE_TYPES) else from_langchain(m) for m in messages
        ]
        system: Message | None = None
        if system_message is not None:
            system = (
                system_message
                if isinstance(system_message, MESSAGE_TYPES)
                else from_langchain(system_message)
            )
        counter = self.counter(model)
        result = edit_context(
            ours,
            [e.engine_edit() for e in self.edits],
            counter,
            base_tokens=base_tokens_for(counter, system),
        )
        if as_langchain:
            return [to_langchain(m) for m in result.messages]
        return list(result.messages)

"""LangChain's ``ContextEditingMiddleware`` and ``ClearToolUsesEdit``, which the services
also run natively, plus an ``include_tools`` allow-list.

The classes are LangChain's own (subclasses), so in-process they behave exactly as
LangChain's (``wrap_model_call`` edits the request's messages). In a running agent the
context consumer applies the edits to the model's view on every step with loopline's
engine, which counts each message once (the stored transcript keeps the full output).
The same engine is usable as a plain library:
``ContextEditingMiddleware(...).edit(messages)`` on LangChain or loopline messages.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal

from langchain.agents.middleware.context_editing import (
    DEFAULT_TOOL_PLACEHOLDER,
    ContextEdit,
    TokenCounter,
)
from langchain.agents.middleware.context_editing import (
    ClearToolUsesEdit as LcClearToolUsesEdit,
)
from langchain.agents.middleware.context_editing import (
    ContextEditingMiddleware as LcContextEditingMiddleware,
)
from langchain_core.messages import AIMessage as LcAIMessage
from langchain_core.messages import AnyMessage
from langchain_core.messages import ToolMessage as LcToolMessage

from contracts.agent import MiddlewareSpec
from contracts.messages import MESSAGE_TYPES, Message, from_langchain, to_langchain

__all__ = [
    "DEFAULT_TOOL_PLACEHOLDER",
    "ClearToolUsesEdit",
    "ContextEditingMiddleware",
    "NotPortable",
]


class NotPortable(ValueError):
    """The middleware holds an edit the services do not implement: it runs in-process
    only (embedded), as LangChain's."""


@dataclass(slots=True)
class ClearToolUsesEdit(LcClearToolUsesEdit):
    """Clear older tool results once the conversation is over ``trigger`` tokens."""

    include_tools: Sequence[str] | None = None
    """loopline extension: only these tools' results may be cleared (None: all)."""

    def apply(self, messages: list[AnyMessage], *, count_tokens: TokenCounter) -> None:
        """LangChain's strategy; ``include_tools`` excludes every other tool."""
        if self.include_tools is None:
            LcClearToolUsesEdit.apply(self, messages, count_tokens=count_tokens)
            return
        others = _tool_names(messages) - set(self.include_tools)
        narrowed = LcClearToolUsesEdit(
            **{f.name: getattr(self, f.name) for f in fields(LcClearToolUsesEdit)}
        )
        narrowed.exclude_tools = (*self.exclude_tools, *sorted(others))
        narrowed.apply(messages, count_tokens=count_tokens)

    def to_params(self) -> dict[str, Any]:
        params: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        params["exclude_tools"] = list(self.exclude_tools)
        if self.include_tools is not None:
            params["include_tools"] = list(self.include_tools)
        return {**params, "type": "ClearToolUsesEdit"}

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


def _tool_names(messages: Sequence[Any]) -> set[str]:
    """Every name a tool result can be matched by, as LangChain's edit matches it."""
    names = {m.name for m in messages if isinstance(m, LcToolMessage) and m.name}
    for message in messages:
        if isinstance(message, LcAIMessage):
            names.update(call["name"] for call in message.tool_calls)
    return names


def _edit_from_params(params: Any) -> Any:
    """An edit as the services run it: loopline's ``ClearToolUsesEdit`` for LangChain's or
    a spec's dict; any other ``ContextEdit`` stays as given (it runs in-process only)."""
    if isinstance(params, ClearToolUsesEdit):
        return params
    if type(params) is LcClearToolUsesEdit:
        return ClearToolUsesEdit(
            **{f.name: getattr(params, f.name) for f in fields(LcClearToolUsesEdit)}
        )
    if not isinstance(params, dict):
        if callable(getattr(params, "apply", None)):
            return params
        raise TypeError(f"an edit must be a ContextEdit or a dict, not {params!r}")
    kind = params.get("type", "ClearToolUsesEdit")
    if kind != "ClearToolUsesEdit":
        raise ValueError(f"unknown context edit type {kind!r}; supported: ClearToolUsesEdit")
    args = {k: v for k, v in params.items() if k != "type"}
    for key in ("exclude_tools", "include_tools"):
        if args.get(key) is not None:
            args[key] = tuple(args[key])
    return ClearToolUsesEdit(**args)


class ContextEditingMiddleware(LcContextEditingMiddleware[Any, Any]):
    """Prune tool results from the model's view when the context grows too large."""

    spec_type = "ContextEditingMiddleware"

    token_counter: TokenCounter | dict[str, str] | None  # type: ignore[assignment]
    """A function, or (in a spec, before ``from_spec`` imports it) its reference."""

    def __init__(
        self,
        *,
        edits: Iterable[ContextEdit | dict[str, Any]] | None = None,
        token_count_method: Literal["approximate", "model"] = "approximate",
        token_counter: Callable[[Sequence[Any]], int] | dict[str, str] | None = None,
    ) -> None:
        """LangChain's parameters; ``edits`` may also be dicts (an agent file's). A
        ``token_counter`` (LangChain's custom count of a message list, then
        ``token_count_method`` is ignored) travels to the context service by import path
        (``{"callable": "package.module:name"}`` in a spec), or embedded as a ``local:``
        reference."""
        if token_count_method not in ("approximate", "model"):
            raise ValueError(
                f"token_count_method must be 'approximate' or 'model', not {token_count_method!r}"
            )
        if token_counter is not None and not (
            callable(token_counter) or isinstance(token_counter, dict)
        ):
            raise TypeError(f"token_counter must be a function, not {token_counter!r}")
        super().__init__(
            edits=[_edit_from_params(e) for e in (edits or (ClearToolUsesEdit(),))],
            token_count_method=token_count_method,
        )
        self.token_counter = token_counter

    def to_spec(self) -> MiddlewareSpec:
        """The spec; a ``token_counter`` function stays an object here, turned into its
        reference by ``services.spec.middleware.to_spec`` (and back by its ``from_spec``)."""
        self.engine_edits()  # refuses an edit the context service does not implement
        params: dict[str, Any] = {
            "edits": [e.to_params() for e in self.edits],  # type: ignore[attr-defined]
            "token_count_method": self.token_count_method,
        }
        if self.token_counter is not None:
            params["token_counter"] = self.token_counter
        return MiddlewareSpec(type=self.spec_type, params=params)

    def engine_edits(self) -> list[Any]:
        """The edits as loopline's engine runs them (``ClearToolUsesEdit`` only)."""
        foreign = [e for e in self.edits if not isinstance(e, ClearToolUsesEdit)]
        if foreign:
            raise NotPortable(
                f"the context service implements ClearToolUsesEdit only, not {foreign[0]!r}"
            )
        return [e.engine_edit() for e in self.edits]  # type: ignore[attr-defined]

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
            self.engine_edits(),
            counter,
            base_tokens=base_tokens_for(counter, system),
        )
        if as_langchain:
            return [to_langchain(m) for m in result.messages]
        return list(result.messages)

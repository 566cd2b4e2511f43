"""LangGraph's read and send of the state from inside a node: what its Pregel loop puts in
a task's config under ``CONFIG_KEY_READ`` (the current values of the state's channels,
with ``fresh=True`` the task's own writes applied through the keys' reducers) and
``CONFIG_KEY_SEND`` (writes ``[(channel, value)]`` the task makes besides its return
value). deepagents' ``StateBackend`` keeps its files this way, from tools and from
middleware hooks alike. Here the state is the task's when the node runs (a tool call, a
before/after hook, the model call's ``wrap_model_call`` chain), and the writes it sends
join the state with its own update, before it, as LangGraph applies a task's writes in
order.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from services.spec.channels import StateChannels


@dataclass
class StateAccess:
    """One call's read and send. ``values``: the state at tool time (messages included);
    None where the tool does not read the state (then no read is given)."""

    channels: StateChannels
    values: Mapping[str, Any] | None = None
    writes: list[tuple[str, Any]] = field(default_factory=list)

    def read(self, select: str | Sequence[str], fresh: bool = False) -> Any:
        """LangGraph's ``local_read``: one channel's value (None when empty), or the
        non-empty ones of a list of channels."""
        values: Mapping[str, Any] = self.values or {}
        if fresh and self.writes:
            keys = [select] if isinstance(select, str) else list(select)
            mine = [(k, v) for k, v in self.writes if k in keys]
            values = {**values, **self.channels.apply(values, mine)}
        if isinstance(select, str):
            return values.get(select)
        return {k: values[k] for k in select if k in values}

    def send(self, writes: Sequence[tuple[str, Any]]) -> None:
        """The node's writes to state channels; LangGraph's own (an ``interrupt()``'s
        ``__resume__``, a ``Send``'s ``__pregel_tasks``) are not the state's and stay
        out."""
        from langgraph._internal._constants import RESERVED

        self.writes.extend(
            (str(k), v) for k, v in writes if k not in RESERVED and not str(k).startswith("__")
        )

    def configurable(self) -> dict[str, Any]:
        """The entries of the call's ``config["configurable"]`` LangGraph names."""
        from langgraph._internal._constants import CONFIG_KEY_READ, CONFIG_KEY_SEND

        found: dict[str, Any] = {CONFIG_KEY_SEND: self.send}
        if self.values is not None:
            found[CONFIG_KEY_READ] = self.read
        return found


@contextmanager
def in_config(access: StateAccess) -> Iterator[None]:
    """The running node's config (LangGraph's ``get_config()``: the ambient one) with
    ``access``'s read and send, as a Pregel task's config has them."""
    from langchain_core.runnables.config import var_child_runnable_config

    current: dict[str, Any] = dict(var_child_runnable_config.get() or {})
    current["configurable"] = {**(current.get("configurable") or {}), **access.configurable()}
    token = var_child_runnable_config.set(current)  # type: ignore[arg-type]
    try:
        yield
    finally:
        var_child_runnable_config.reset(token)


def access_of(runtime: Any) -> StateAccess | None:
    """The call's ``StateAccess``, from its ``ToolRuntime``'s config (None: none given)."""
    from langgraph._internal._constants import CONFIG_KEY_SEND

    config = getattr(runtime, "config", None) or {}
    send = (config.get("configurable") or {}).get(CONFIG_KEY_SEND)
    found = getattr(send, "__self__", None)
    return found if isinstance(found, StateAccess) else None

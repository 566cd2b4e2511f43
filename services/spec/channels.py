"""How a state update joins the task's state, as LangGraph's channels join it.

LangChain's ``create_agent`` builds its graph's channels from the agent's ``state_schema``
and its middleware's (``langchain.agents.factory._resolve_schemas``): a key declared with
a reducer (``Annotated[list[str], operator.add]``) is a ``BinaryOperatorAggregate`` that
folds every update into the value it has (and starts from the empty value of its type,
``[]`` for a list, so the key is in the state before anything wrote it); any other key
is a ``LastValue``, which one update replaces and two updates in one superstep (two
parallel tool calls, two ``wrap_model_call`` commands) refuse with LangGraph's
``InvalidUpdateError``. loopline keeps a task's state keys (its ``extra``, stored as
``services.spec.statecodec`` encodes them) and applies every update through these same
channel objects, wherever it lands: the input, the hooks of the loop, the model
service's ``wrap_model_call`` commands, the join of a step's tool calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, get_type_hints

from services.spec.schemas import MESSAGES
from services.spec.statecodec import CORE_CODEC, StateCodec

Writes = Iterable[tuple[str, Any]]
"""One superstep's updates, key and value, in the order LangGraph applies them (the
order of its tasks: a step's tool calls in call order)."""


@dataclass(frozen=True)
class StateChannels:
    """The channels of an agent's state keys besides ``messages`` (LangGraph's
    ``BaseChannel`` objects, used as prototypes: each update works on a copy)."""

    channels: Mapping[str, Any] = field(default_factory=dict)
    codec: StateCodec = CORE_CODEC
    """How the keys' values travel and are stored (``services.spec.statecodec``), with
    the classes the agent's schemas name allowed."""

    @property
    def reducers(self) -> frozenset[str]:
        """The keys declared with a reducer."""
        from langgraph.channels.binop import BinaryOperatorAggregate

        return frozenset(
            k for k, c in self.channels.items() if isinstance(c, BinaryOperatorAggregate)
        )

    def initial(self) -> dict[str, Any]:
        """The keys a new thread's state has before anything wrote them: each reducer's
        empty value (``[]``, ``0``, ``{}``), where its type makes one."""
        found: dict[str, Any] = {}
        for key, channel in self.channels.items():
            fresh = channel.copy()
            if fresh.is_available():
                found[key] = fresh.get()
        return found

    def apply(self, state: Mapping[str, Any], writes: Writes) -> dict[str, Any]:
        """``state`` with one superstep's writes applied: a reducer key folds them in
        order, another key takes its one value (LangGraph's ``InvalidUpdateError`` for
        two); a key no schema declares takes the last one."""
        from langgraph._internal._typing import MISSING

        by_key: dict[str, list[Any]] = {}
        for key, value in writes:
            by_key.setdefault(key, []).append(value)
        merged = dict(state)
        for key, values in by_key.items():
            channel = self.channels.get(key)
            if channel is None:
                merged[key] = values[-1]
                continue
            current = channel.from_checkpoint(merged.get(key, MISSING))
            current.update(values)
            merged[key] = current.get()
        return merged

    def updated(self, state: Mapping[str, Any], writes: Writes) -> dict[str, Any]:
        """The keys one superstep's writes set, with the values they now have."""
        writes = list(writes)
        merged = self.apply(state, writes)
        return {key: merged[key] for key, _ in writes}


NO_CHANNELS = StateChannels()


def channels_of(state_schema: Any, instances: Iterable[Any]) -> StateChannels:
    """The channels of the state LangChain's agent would have with this ``state_schema``
    (None: ``AgentState``) and these middleware instances, merged as its factory merges
    them (middleware first, the agent's own schema last, so it wins a conflict)."""
    from langchain.agents.factory import _resolve_schemas
    from langchain.agents.middleware.types import AgentState
    from langgraph.channels.base import BaseChannel
    from langgraph.graph.state import _get_channel

    schemas: list[type] = [getattr(m, "state_schema", AgentState) for m in instances]
    schemas.append(state_schema if state_schema is not None else AgentState)
    resolved, _, _ = _resolve_schemas(schemas)
    channels: dict[str, Any] = {}
    for key, hint in get_type_hints(resolved, include_extras=True).items():
        if key == MESSAGES:
            continue
        channel = _get_channel(key, hint)
        if isinstance(channel, BaseChannel):
            channels[key] = channel
    return StateChannels(channels, StateCodec((resolved, *schemas), channels))

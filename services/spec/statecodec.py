"""A task's state values as they travel and are stored: what JSON holds stays JSON (so an
event stays small and readable, and the Lua scripts that look at JSON keep working), any
other value LangGraph's checkpoint serializer carries (a message, a pydantic model, a
dataclass, a set, a delta channel's snapshot) travels as a small envelope
``{"__lg__": [type, base64]}`` of ``JsonPlusSerializer.dumps_typed``, and is decoded back
to the same Python object wherever hooks, tools and results see state.

Decoding is LangGraph's strict msgpack mode: only the serializer's safe types (LangChain's
messages among them) and the classes the agent's own state schemas name (LangGraph's
``build_serde_allowlist``, as ``StateGraph.compile`` builds it) are rebuilt; an envelope
naming any other class yields its raw data, never an instance, so what a producer puts on
the bus cannot make a service build a class of its choosing.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from services.spec.jsonable import first_unstorable

ENVELOPE = "__lg__"
"""The one key of an encoded value's envelope."""

OVERWRITE = "__overwrite__"
"""LangGraph's JSON form of ``Overwrite(value)`` (``langgraph._internal._constants``)."""

DECODED_TYPES = frozenset({"msgpack", "null", "bytes", "bytearray"})
"""The serializer's formats an envelope may name: never ``pickle`` nor ``json`` (whose
reviver would rebuild LangChain-serializable objects outside the allow-list)."""


class StateValueError(ValueError):
    """A state value the serializer cannot carry, or an envelope it cannot read."""


def _is_envelope(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and len(value) == 1
        and isinstance(value.get(ENVELOPE), list)
        and len(value[ENVELOPE]) == 2
    )


def _plain_json(value: Any) -> bool:
    """Whether JSON gives ``value`` back as it is, and it cannot be read as an envelope."""
    if first_unstorable(value, "") is not None:
        return False
    return not _holds_envelope_key(value)


def _holds_envelope_key(value: Any) -> bool:
    if isinstance(value, dict):
        return ENVELOPE in value or any(_holds_envelope_key(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_holds_envelope_key(v) for v in value)
    return False


@dataclass(frozen=True)
class StateCodec:
    """Encodes and decodes one agent's state values. ``schemas`` and ``channels``: the
    agent's state schemas and channels, whose named classes the decoder allows beside the
    serializer's own safe types. The allow-list is built on the first value JSON cannot
    hold, not with the codec: building it walks every schema (about a millisecond per
    agent and process), which an agent whose state is all JSON never needs."""

    schemas: tuple[Any, ...] = ()
    channels: Mapping[str, Any] = field(default_factory=dict, compare=False)
    _serde: Any = field(default=None, repr=False, compare=False)

    @property
    def allowed(self) -> frozenset[tuple[str, ...]]:
        """The ``(module, name)`` classes the agent's schemas name."""
        if not self.schemas:
            return frozenset()
        return allowed_classes(self.schemas, self.channels)

    @property
    def serde(self) -> Any:
        if self._serde is None:
            from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

            # an explicit allow-list is LangGraph's strict mode, whatever the environment
            made = JsonPlusSerializer(allowed_msgpack_modules=tuple(self.allowed))
            object.__setattr__(self, "_serde", made)
        return self._serde

    def encode_value(self, value: Any) -> Any:
        """``value`` as JSON: itself when JSON holds it, else its envelope. LangGraph's
        ``Overwrite`` (a reducer key replaced, not folded) in the form its channels read
        as the same: ``{"__overwrite__": value}``."""
        from langgraph.types import Overwrite

        if isinstance(value, Overwrite):
            return {OVERWRITE: self.encode_value(value.value)}
        if _plain_json(value):
            return value
        try:
            kind, data = self.serde.dumps_typed(value)
        except Exception as exc:  # ormsgpack's encode error: a live object, say
            raise StateValueError(
                f"{type(value).__name__} cannot be stored in the state: LangGraph's "
                f"checkpoint serializer cannot carry it ({exc})"
            ) from exc
        return {ENVELOPE: [kind, base64.b64encode(data).decode("ascii")]}

    def decode_value(self, value: Any) -> Any:
        """The Python value an encoded one stands for."""
        if isinstance(value, dict) and len(value) == 1 and OVERWRITE in value:
            return {OVERWRITE: self.decode_value(value[OVERWRITE])}
        if not _is_envelope(value):
            return value
        kind, data = value[ENVELOPE]
        if kind not in DECODED_TYPES or not isinstance(data, str):
            raise StateValueError(f"a state value's envelope names format {kind!r}")
        return self.serde.loads_typed((kind, base64.b64decode(data)))

    def encode(self, state: Mapping[str, Any]) -> dict[str, Any]:
        return {key: self.encode_value(value) for key, value in state.items()}

    def decode(self, state: Mapping[str, Any]) -> dict[str, Any]:
        return {key: self.decode_value(value) for key, value in state.items()}

    def encode_pairs(self, writes: Iterable[tuple[str, Any]]) -> list[tuple[str, Any]]:
        return [(key, self.encode_value(value)) for key, value in writes]

    def decode_pairs(self, writes: Iterable[tuple[str, Any]]) -> list[tuple[str, Any]]:
        return [(key, self.decode_value(value)) for key, value in writes]

    def dumps(self, state: Mapping[str, Any]) -> str:
        """The state keys as the task's hash stores them (JSON text)."""
        return json.dumps(self.encode(state))

    def loads(self, raw: str | bytes | None) -> dict[str, Any]:
        """The state keys from the task's hash ("" or None: none)."""
        return self.decode(json.loads(raw)) if raw else {}


def allowed_classes(
    schemas: Iterable[Any], channels: Mapping[str, Any]
) -> frozenset[tuple[str, ...]]:
    """The classes LangGraph allows its strict serializer for a graph with these state
    schemas and channels (``StateGraph.compile``'s ``build_serde_allowlist``)."""
    from langgraph._internal._serde import build_serde_allowlist

    return frozenset(build_serde_allowlist(schemas=list(schemas), channels=dict(channels)))


CORE_CODEC = StateCodec()
"""For state read without its agent's schemas: the safe types only (messages included)."""

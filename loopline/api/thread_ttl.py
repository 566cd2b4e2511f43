"""The operator's thread TTL: LangGraph's ``checkpointer.ttl`` setting of
``langgraph.json``, given in ``LOOPLINE_API_THREAD_TTL`` in the shapes LangGraph's server
reads from ``LANGGRAPH_THREAD_TTL``: a number of minutes, or the setting as JSON::

    {"strategy": "delete", "default_ttl": 43200, "sweep_interval_minutes": 60,
     "sweep_limit": 1000}

Expiry is opt-in, as on LangGraph's server: without the setting a thread lasts until it
is deleted, unless its creator gave it a ``ttl``. ``default_ttl`` (minutes) is the TTL of
a thread the gateway creates without one (``POST /threads``, a run that creates its
thread); ``sweep_interval_minutes`` how often each replica sweeps
(``loopline.api.thread_sweep``; ``LOOPLINE_THREAD_SWEEP_S`` otherwise) and
``sweep_limit`` the most threads one sweep deletes. Of the strategies only ``delete`` is
implemented: ``keep_latest`` prunes a thread's older checkpoints, which loopline does not
store (it folds them from the runs' logs), so it is refused when the gateway starts
rather than taken for ``delete``.
"""

from __future__ import annotations

import functools
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_SWEEP_LIMIT = 100
"""The most expired threads one sweep deletes when the setting gives no ``sweep_limit``
(the rest go at the next)."""


class ThreadTTLPolicy(BaseModel):
    """LangGraph's ``ThreadTTLConfig``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    strategy: Literal["delete", "keep_latest"] = "delete"
    default_ttl: float | None = Field(None, gt=0)
    """Minutes from its creation until a thread created without a ``ttl`` is deleted;
    None: such threads last until deleted."""
    sweep_interval_minutes: float | None = Field(None, gt=0)
    sweep_limit: int = Field(DEFAULT_SWEEP_LIMIT, ge=1)

    @field_validator("strategy")
    @classmethod
    def _deletes(cls, value: str) -> str:
        if value != "delete":
            raise ValueError(
                f"strategy {value!r} is not implemented (supported: 'delete'): loopline "
                "keeps no checkpoints to prune, it folds them from the runs' logs"
            )
        return value

    def sweep_s(self, otherwise: float) -> float:
        """Seconds between sweeps: the setting's, else ``otherwise``."""
        if self.sweep_interval_minutes is None:
            return otherwise
        return self.sweep_interval_minutes * 60

    def default_expiry(self, now: float) -> float | None:
        """When a thread created at ``now`` without a ``ttl`` expires (epoch seconds)."""
        return None if self.default_ttl is None else now + self.default_ttl * 60


class BadThreadTTL(ValueError):
    """``LOOPLINE_API_THREAD_TTL`` is not LangGraph's ``checkpointer.ttl`` setting."""


class _Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LOOPLINE_API_", extra="ignore")

    thread_ttl: str = ""
    """Minutes, or LangGraph's ``checkpointer.ttl`` as JSON; empty: no default TTL."""


@functools.cache
def policy() -> ThreadTTLPolicy:
    """The operator's policy, read once from ``LOOPLINE_API_THREAD_TTL``."""
    return parse_policy(_Settings().thread_ttl)


def parse_policy(text: str) -> ThreadTTLPolicy:
    """A number of minutes (LangGraph: the ``delete`` strategy with that default TTL)
    or the setting as JSON; empty: none."""
    text = text.strip()
    if not text:
        return ThreadTTLPolicy()
    try:
        if text.startswith("{"):
            return ThreadTTLPolicy.model_validate(json.loads(text))
        return ThreadTTLPolicy(default_ttl=float(text))
    except (ValueError, ValidationError) as exc:
        raise BadThreadTTL(
            "LOOPLINE_API_THREAD_TTL must be minutes (e.g. 43200) or LangGraph's "
            'checkpointer.ttl setting as JSON, e.g. {"strategy": "delete", '
            f'"default_ttl": 43200, "sweep_interval_minutes": 60}}: {exc}'
        ) from exc

"""The deployment store's options (``LOOPLINE_STORE``), in the shape of the ``store`` key
of LangGraph's ``langgraph.json``, so an operator moving a deployment over copies it::

    LOOPLINE_STORE='{"ttl": {"default_ttl": 1440, "refresh_on_read": true,
                             "sweep_interval_minutes": 5},
                     "index": {"embed": "openai:text-embedding-3-small", "dims": 1536,
                               "fields": ["$"]}}'

``ttl``: LangGraph's ``TTLConfig`` (minutes). ``index``: LangGraph's ``IndexConfig``; its
``embed`` is a provider string (``openai:text-embedding-3-small``, LangChain's
``init_embeddings``), a file and a name (``./embeddings.py:embed``, as LangGraph's server
reads it) or an importable ``module:name``; the name is an ``Embeddings`` or a function
from texts to vectors. Every process of a deployment reads the same variable, so a tool's
``put`` and the gateway's search agree on what is indexed and when it expires.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings
    from langgraph.store.base import IndexConfig, TTLConfig


class StoreTTL(BaseModel):
    """LangGraph's ``TTLConfig``: when items expire and whether reading renews them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    default_ttl: float | None = Field(default=None, gt=0)
    """Minutes an item lives after its last write (or read, with ``refresh_on_read``)
    when its ``put`` gives no ``ttl``; None: items without a ``ttl`` never expire."""
    refresh_on_read: bool = True
    """A ``get`` or ``search`` renews the TTL of what it returns (a call's own
    ``refresh_ttl`` overrides it), as LangGraph's default."""
    sweep_interval_minutes: float | None = Field(default=None, gt=0)
    """How often the gateway deletes expired items for good. Expired items are never
    returned either way; the sweep frees their memory."""

    def as_langgraph(self) -> TTLConfig:
        config: TTLConfig = {"refresh_on_read": self.refresh_on_read}
        if self.default_ttl is not None:
            config["default_ttl"] = self.default_ttl
        return config


class StoreIndex(BaseModel):
    """LangGraph's ``IndexConfig``: what is embedded for ``search(query=...)``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    embed: str
    dims: int = Field(gt=0)
    fields: list[str] | None = None
    """JSON paths of the texts to embed (LangGraph's syntax); None: the whole value."""

    def embeddings(self) -> Embeddings:
        from langgraph.store.base import ensure_embeddings

        return ensure_embeddings(_resolve_embed(self.embed))

    def as_langgraph(self) -> IndexConfig:
        return {"dims": self.dims, "embed": self.embeddings(), "fields": self.fields or ["$"]}


class StoreConfig(BaseModel):
    """``LOOPLINE_STORE``: the ``store`` object of ``langgraph.json``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttl: StoreTTL | None = None
    index: StoreIndex | None = None


class BadEmbed(ValueError):
    """``LOOPLINE_STORE``'s ``index.embed`` names nothing that embeds."""


def _resolve_embed(embed: str) -> Any:
    """A provider string is left to LangChain's ``init_embeddings`` (through LangGraph's
    ``ensure_embeddings``); ``file.py:name`` and ``module:name`` are loaded here."""
    where, sep, name = embed.rpartition(":")
    if not sep or not where or not name:
        raise BadEmbed(
            f"index.embed {embed!r}: expected provider:model, file.py:name or module:name"
        )
    if where.endswith(".py"):
        return getattr(_load_file(Path(where)), name)
    from langchain.embeddings.base import _BUILTIN_PROVIDERS

    if where in _BUILTIN_PROVIDERS:
        return embed
    try:
        return getattr(importlib.import_module(where), name)
    except (ImportError, AttributeError) as exc:
        raise BadEmbed(f"index.embed {embed!r}: {exc}") from exc


def _load_file(path: Path) -> Any:
    if not path.is_file():
        raise BadEmbed(f"index.embed: no file {path}")
    spec = importlib.util.spec_from_file_location(f"loopline_store_embed_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise BadEmbed(f"index.embed: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

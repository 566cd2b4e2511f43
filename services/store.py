"""The store of this process's deployment: ``services.runtime.Runtime`` says where it is
at start; the ``RedisStore`` (``services.redis_store``, which imports LangGraph's store)
is built when a hook or tool first asks, so a process that never uses it never loads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from services.redis_store import RedisStore
    from services.store_config import StoreConfig

_where: tuple[str, str, StoreConfig | None] | None = None
_shared: RedisStore | None = None


def install(url: str, prefix: str, config: StoreConfig | None = None) -> None:
    """The deployment whose store hooks and tools of this process get."""
    global _where, _shared
    if _where != (url, prefix, config):
        _where, _shared = (url, prefix, config), None


def shared() -> RedisStore | None:
    """The deployment's store (None outside a service process)."""
    global _shared
    if _shared is None and _where is not None:
        from services.redis_store import RedisStore

        _shared = RedisStore(*_where)
    return _shared

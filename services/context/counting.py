"""The token counters live in ``services.editing.counting`` (the model service and the
middleware use them too); this name stays for ``benchmarks/context_editing.py`` and the
image build (``deploy/Dockerfile`` seeds the offline tiktoken cache through it)."""

from services.editing.counting import ModelCounter, install_offline_tiktoken_cache

__all__ = ["ModelCounter", "install_offline_tiktoken_cache"]

"""The context-editing engine lives in ``services.editing.engine`` (the model service and
the middleware use it too); this name stays for ``benchmarks/context_editing.py``."""

from services.editing.engine import ClearToolUses, apply_edits, base_tokens_for, edit_context

__all__ = ["ClearToolUses", "apply_edits", "base_tokens_for", "edit_context"]

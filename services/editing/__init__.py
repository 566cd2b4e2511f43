"""Context editing as a pure engine: which tool results the model should not see, and the
per-message token counts that decide it. Below every service: the context service decides
the edits, the model service replays them, and ``ContextEditingMiddleware`` runs them as
a plain library."""

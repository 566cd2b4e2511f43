"""What ``invoke`` returns: LangChain's result dict, plus the task that made it.

LangChain's ``create_agent`` returns the graph's output state as a plain dict, and
programs compare it as one (``result == {"messages": [...]}``). loopline's result has
exactly those keys; the task behind it (to resume, watch or look up) is its ``task_id``
attribute, and ``result["task_id"]`` still reads it (``__missing__``: a lookup of a key
the dict does not hold), so the key never shows among the state's.
"""

from __future__ import annotations

from typing import Any


class AgentResult(dict[str, Any]):
    """The output state as LangChain gives it; ``task_id``: the loopline task's id."""

    def __init__(self, task_id: str, /, **state: Any) -> None:
        super().__init__(**state)
        self.task_id = task_id

    def __missing__(self, key: str) -> Any:
        if key == "task_id":
            return self.task_id
        raise KeyError(key)

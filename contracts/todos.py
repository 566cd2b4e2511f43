"""The todo list that ``write_todos`` maintains (LangChain's ``Todo``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

TodoStatus = Literal["pending", "in_progress", "completed"]
TODO_STATUSES: tuple[TodoStatus, ...] = ("pending", "in_progress", "completed")


class Todo(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    content: str
    status: TodoStatus

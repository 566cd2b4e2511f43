"""loopline: LLM agents as an event-driven pipeline on Redis Streams."""

from loopline.agent import Agent, create_agent, subscribe
from loopline.client import Client
from loopline.errors import TaskFailedError
from loopline.user_errors import install as _show_user_errors_in_one_line
from services.spec.toolbox import idempotent

_show_user_errors_in_one_line()

__all__ = ["Agent", "Client", "TaskFailedError", "create_agent", "idempotent", "subscribe"]

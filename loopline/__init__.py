"""loopline: LLM agents as an event-driven pipeline on Redis Streams."""

from loopline.agent import Agent, create_agent, subscribe
from loopline.client import Client
from loopline.errors import TaskFailedError
from services.spec.toolbox import idempotent

__all__ = ["Agent", "Client", "TaskFailedError", "create_agent", "idempotent", "subscribe"]

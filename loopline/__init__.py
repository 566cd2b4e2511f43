"""loopline: LLM agents as an event-driven pipeline on Redis Streams."""

from loopline.agent import Agent, create_agent, subscribe
from loopline.client import Client, TaskFailedError

__all__ = ["Agent", "Client", "TaskFailedError", "create_agent", "subscribe"]

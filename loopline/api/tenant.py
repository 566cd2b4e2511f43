"""One tenant (prefix) as the gateway serves it: a ``loopline.Client`` on its bus, its
thread reader, the gateway's records, its store, and the deployed agents' specs it reads."""

from __future__ import annotations

from typing import Any

from contracts.agent import AgentSpec, DeployedAgent
from loopline.api.assistants import Assistants, AssistantVersion
from loopline.api.records import Records
from loopline.api.wire import BadRequest
from loopline.client import Client
from loopline.threads import ThreadReader
from services import deployed
from services.redis_store import RedisStore
from services.settings import Settings


class NotFound(LookupError):
    """No such assistant, thread or run (404)."""


class Tenant:
    def __init__(self, url: str, prefix: str, settings: Settings) -> None:
        self.prefix = prefix
        self.client = Client(url, prefix, settings.max_event_bytes)
        self.names = self.client.names
        self.redis = self.client.redis
        self.settings = settings
        self.records = Records(self.redis, self.names, settings.retention_s, settings.thread_ttl_s)
        self.registrations = deployed.Registrations(self.redis, self.names)
        self.assistants = Assistants(self.redis, self.names)
        self.store = RedisStore(url, prefix, settings.store)
        """The deployment's store, the one hooks and tools of this prefix see."""
        self._specs: dict[str, AgentSpec] = {}

    @property
    def threads(self) -> ThreadReader:
        return self.client.threads()

    async def close(self) -> None:
        await self.registrations.stop()
        await self.client.close()

    async def assistant(self, assistant_id: str) -> DeployedAgent:
        """The deployed agent an ``assistant_id`` runs: an assistant created over HTTP's
        graph, or the agent it names (``NAME`` or ``NAME@VERSION``)."""
        agent, _ = await self.configured(assistant_id)
        return agent

    async def configured(self, assistant_id: str) -> tuple[DeployedAgent, AssistantVersion | None]:
        """The deployed agent an ``assistant_id`` runs, with the configuration (the
        latest version) of an assistant created over HTTP, None for a deployed agent's."""
        created = await self.assistants.get(assistant_id)
        if created is not None:
            return await self.deployed_agent(created.latest.graph_id), created.latest
        return await self.deployed_agent(assistant_id), None

    async def deployed_agent(self, assistant_id: str) -> DeployedAgent:
        """The deployed agent a name names (``NAME`` or ``NAME@VERSION``)."""
        self.registrations.start()  # listens from the first lookup on: kept from then
        try:
            found = await self.registrations.lookup(assistant_id)
        except deployed.BadAgentRef as exc:
            raise BadRequest(f"Invalid assistant: {assistant_id!r}: {exc}") from exc
        if found is None:
            raise NotFound(f"Assistant {assistant_id!r} not found (see `loopline agents list`)")
        return found

    async def spec_of_task(self, task_id: str) -> AgentSpec | None:
        """The spec a task runs (stored once per agent id by the loop)."""
        agent_id: Any = await self.redis.hget(self.names.task_state(task_id), "agent")
        if not agent_id:
            return None
        key = agent_id.decode() if isinstance(agent_id, bytes) else str(agent_id)
        if key not in self._specs:
            raw: Any = await self.redis.get(self.names.agent(key))
            if raw is None:
                return None
            self._specs[key] = AgentSpec.model_validate_json(raw)
        return self._specs[key]

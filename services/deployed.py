"""The registry of deployed agents: the operator's agents by name and version, the only
agents the services run (unless LOOPLINE_ALLOW_INLINE_AGENTS=true).

One Redis hash (``Names.deployed``), so every change is one script on one key (a Redis
Cluster too) and the right to change it is one ACL key pattern: a producer that may not
write it cannot register anything. A registration is checked in full before it is stored
(``check_deployable``); deploying an unchanged registration again returns the stored
version, a changed one becomes the next version; ``NAME`` means the latest.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis
from pydantic import ValidationError
from redis.exceptions import NoPermissionError

from contracts.agent import OVERRIDABLE, AgentSpec, DeployedAgent, parse_agent_ref
from contracts.streams import Names
from services.errors import ConfigurationError
from services.spec.endpoints import endpoint_problem
from services.spec.validation import InvalidSpec, check_deployable
from services.subscription import ChannelListener

# KEYS[1] the registry; ARGV: name, digest, body, the channel that announces changes.
# Returns the version (new or unchanged) and whether it is new. A new version is
# announced first (the latest moves): a user who may not announce it deploys nothing.
_DEPLOY = """
local latest = redis.call('HGET', KEYS[1], ARGV[1])
if latest then
  local current = redis.call('HGET', KEYS[1], ARGV[1] .. '@' .. latest)
  if current and cjson.decode(current)['digest'] == ARGV[2] then
    return {tonumber(latest), 0}
  end
end
redis.call('PUBLISH', ARGV[4], ARGV[1])
local version = redis.call('HINCRBY', KEYS[1], ARGV[1] .. '#seq', 1)
redis.call('HSET', KEYS[1], ARGV[1] .. '@' .. version, ARGV[3], ARGV[1], version)
return {version, 1}
"""

# KEYS[1] the registry; ARGV: name, version ('' for every version), the channel that
# announces changes. Returns the versions removed; the latest becomes the highest version
# left. The announcement comes first: a user who may not publish it removes nothing.
_REMOVE = """
redis.call('PUBLISH', ARGV[3], ARGV[2] == '' and ARGV[1] or (ARGV[1] .. '@' .. ARGV[2]))
local prefix = ARGV[1] .. '@'
local removed, left = {}, 0
for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
  if string.sub(field, 1, #prefix) == prefix then
    local version = tonumber(string.sub(field, #prefix + 1))
    if ARGV[2] == '' or version == tonumber(ARGV[2]) then
      redis.call('HDEL', KEYS[1], field)
      table.insert(removed, version)
    elseif version > left then
      left = version
    end
  end
end
if left > 0 then
  redis.call('HSET', KEYS[1], ARGV[1], left)
else
  redis.call('HDEL', KEYS[1], ARGV[1], ARGV[1] .. '#seq')
end
return removed
"""


class NotDeployed(ConfigurationError):
    """No such agent (or version) in the registry."""


class BadAgentRef(ConfigurationError, ValueError):
    """A reference that is neither ``NAME`` nor ``NAME@VERSION``."""


def _ref(ref: str) -> tuple[str, int | None]:
    try:
        return parse_agent_ref(ref)
    except ValueError as exc:
        raise BadAgentRef(str(exc)) from exc


class RegistryDenied(ConfigurationError):
    """This Redis user may not read or write the registry; ``str()`` says what is missing."""


def _denied(names: Names, action: str, exc: NoPermissionError) -> RegistryDenied:
    return RegistryDenied(
        f"cannot {action}: this Redis user has no permission on the agent registry "
        f"{names.deployed} ({str(exc).splitlines()[0]}); deploy agents as the operator "
        "(`loopline deploy AGENT_FILE`) and submit tasks naming them"
    )


def registration(
    spec: AgentSpec,
    *,
    name: str | None = None,
    overridable: Sequence[str] | None = None,
    max_steps: int | None = None,
    check_here: bool = True,
) -> DeployedAgent:
    """The registration of a spec (version 1 until stored), checked in full here, where
    it is registered. ``check_here=False`` (a client registering an agent file it read
    as data, ``loopline run --agent`` on a deployment) checks only what needs no code:
    names, overrides, a model given by name; the services import and check the rest
    where its tasks start and run, and a task that cannot run ends with the reason."""
    agent_name = name or spec.name
    try:
        parse_agent_ref(agent_name)
    except ValueError as exc:
        raise InvalidSpec(str(exc)) from exc
    allowed = list(OVERRIDABLE if overridable is None else overridable)
    unknown = sorted(set(allowed) - set(OVERRIDABLE))
    if unknown:
        raise InvalidSpec(
            f"cannot allow overriding {', '.join(unknown)}: a task may override only "
            f"{', '.join(OVERRIDABLE)}"
        )
    if check_here:
        check_deployable(spec)
    else:
        problem = endpoint_problem(spec.model)
        if problem:
            raise InvalidSpec(problem)
    payload: dict[str, Any] = {
        "spec": spec.model_dump(mode="json"),
        "overridable": sorted(allowed),
        "max_steps": max_steps,
    }
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]
    return DeployedAgent(
        name=agent_name,
        version=1,
        spec=spec,
        overridable=sorted(allowed),
        max_steps=max_steps,
        digest=digest,
        deployed_at=time.time(),
    )


async def deploy(
    redis: aioredis.Redis, names: Names, agent: DeployedAgent
) -> tuple[DeployedAgent, bool]:
    """Store a registration (from ``registration``); returns it with its version and
    whether that version is new."""
    body = agent.model_dump_json(exclude={"version"})
    try:
        reply: Any = await redis.eval(
            _DEPLOY, 1, names.deployed, agent.name, agent.digest, body, names.registry_changes
        )
    except NoPermissionError as exc:
        raise _denied(names, f"register agent {agent.name!r}", exc) from exc
    version, new = int(reply[0]), bool(int(reply[1]))
    if new:
        return agent.model_copy(update={"version": version}), True
    stored = await lookup(redis, names, f"{agent.name}@{version}")
    return (stored or agent.model_copy(update={"version": version})), False


async def lookup(redis: aioredis.Redis, names: Names, ref: str) -> DeployedAgent | None:
    """The registration ``NAME`` (latest) or ``NAME@VERSION`` names; None when there is
    none. ``BadAgentRef`` (a ValueError) for a reference that is neither form."""
    name, version = _ref(ref)
    try:
        if version is None:
            latest = await redis.hget(names.deployed, name)
            if latest is None:
                return None
            version = int(latest)
        raw = await redis.hget(names.deployed, f"{name}@{version}")
    except NoPermissionError as exc:
        raise _denied(names, f"read agent {ref!r}", exc) from exc
    return None if raw is None else _parse(raw, version)


def _parse(raw: bytes | str, version: int) -> DeployedAgent:
    return DeployedAgent.model_validate({**json.loads(raw), "version": version})


async def all_versions(redis: aioredis.Redis, names: Names) -> list[DeployedAgent]:
    """Every stored version of every agent, by name then version."""
    try:
        fields: dict[Any, Any] = await redis.hgetall(names.deployed)
    except NoPermissionError as exc:
        raise _denied(names, "list agents", exc) from exc
    found: list[DeployedAgent] = []
    for field, raw in fields.items():
        text = field.decode() if isinstance(field, bytes) else str(field)
        _, sep, version = text.partition("@")
        if sep and version.isdigit():
            found.append(_parse(raw, int(version)))
    return sorted(found, key=lambda a: (a.name, a.version))


async def latest_versions(redis: aioredis.Redis, names: Names) -> list[DeployedAgent]:
    latest: dict[str, DeployedAgent] = {}
    for agent in await all_versions(redis, names):
        latest[agent.name] = agent  # sorted by version: the last one wins
    return list(latest.values())


async def remove(redis: aioredis.Redis, names: Names, ref: str) -> list[int]:
    """Remove ``NAME`` (every version) or ``NAME@VERSION``; the versions removed."""
    name, version = _ref(ref)
    try:
        reply: Any = await redis.eval(
            _REMOVE,
            1,
            names.deployed,
            name,
            "" if version is None else str(version),
            names.registry_changes,
        )
    except NoPermissionError as exc:
        raise _denied(names, f"remove agent {ref!r}", exc) from exc
    removed = sorted(int(v) for v in reply)
    if not removed:
        raise NotDeployed(f"no deployed agent {ref!r} (see `loopline agents list`)")
    return removed


def run_spec(
    agent: DeployedAgent,
    overrides: dict[str, Any],
    max_steps: int | None,
    *,
    limited: bool = False,
) -> tuple[AgentSpec, int | None]:
    """The spec a task of a deployed agent runs, with the overrides its registration
    allows, and its step limit; ValueError naming what is not allowed. ``max_steps``:
    the task's own field, an override like the others; ``limited``: the task sets its
    step limit another way (``TaskSubmitted.recursion_limit``), which overrides
    ``max_steps`` too."""
    sets_limit = max_steps is not None or limited
    asked = set(overrides) | ({"max_steps"} if sets_limit else set())
    unknown = sorted(asked - set(OVERRIDABLE))
    if unknown:
        raise ValueError(
            f"unknown override {', '.join(unknown)}: a task may override only "
            f"{', '.join(OVERRIDABLE)}"
        )
    denied = sorted(asked - set(agent.overridable))
    if denied:
        allowed = ", ".join(agent.overridable) or "nothing"
        raise ValueError(
            f"agent {agent.ref} does not allow overriding {', '.join(denied)} (allowed: {allowed})"
        )
    steps = max_steps if max_steps is not None else overrides.get("max_steps", agent.max_steps)
    if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool) or steps < 1):
        raise ValueError(f"override max_steps must be a positive integer, got {steps!r}")
    update: dict[str, Any] = {
        k: overrides[k] for k in ("system_prompt", "context") if k in overrides
    }
    if not update:
        return agent.spec, steps
    try:
        if "system_prompt" in update:
            update["system_message"] = None  # the prompt given replaces the message
        spec = AgentSpec.model_validate({**agent.spec.model_dump(), **update})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"override {where} of agent {agent.ref}: {first['msg']}") from exc
    return spec, steps


class Registrations(ChannelListener):
    """Deployed agents as this process read them, kept until a change is announced on
    ``Names.registry_changes`` (``deploy`` and ``remove`` announce every change before
    making it): ``NAME@VERSION`` never changes but can be removed, ``NAME`` (the latest)
    moves with each new version. While this process may have missed an announcement (see
    ``ChannelListener``) every lookup reads Redis."""

    MAX_KEPT = 1000

    def __init__(self, redis: aioredis.Redis, names: Names, *, enabled: bool = True) -> None:
        super().__init__(redis, names.registry_changes, enabled=enabled)
        self.names = names
        self._kept: dict[str, DeployedAgent] = {}
        self._changes = 0  # announcements heard: a read that spans one keeps nothing

    async def lookup(self, ref: str) -> DeployedAgent | None:
        """As ``lookup``: the registration ``ref`` names, None when there is none."""
        found = self._kept.get(ref) if self.listening else None
        if found is not None:
            return found
        changes = self._changes
        found = await lookup(self.redis, self.names, ref)
        if found is not None and self.listening and changes == self._changes:
            if len(self._kept) >= self.MAX_KEPT:
                self._kept.clear()
            self._kept[ref] = found
        return found

    def heard(self, data: str) -> None:
        self._changes += 1
        try:
            name, version = _ref(data)
        except ValueError:  # not a reference: forget everything rather than guess
            self._kept.clear()
            return
        if version is not None:  # that version removed: the latest may have moved too
            self._kept.pop(data, None)
            self._kept.pop(name, None)
        else:
            self._kept = {r: a for r, a in self._kept.items() if a.name != name}

    async def caught_up(self) -> None:
        self._changes += 1
        self._kept.clear()  # a change may have been missed while not listening

"""``loopline doctor``: is this deployment fit to run agents, and what to fix if not.

Each check reads what it needs (Redis's ``INFO``, ``CONFIG GET`` where the user may,
``ACL WHOAMI``, the consumer registry, the deployed agents; an HTTP ``GET /models`` of
each model endpoint) and says ``ok``, ``warn`` (works, but will hurt: no persistence, the
default Redis user) or ``fail`` (tasks will not run or will be lost), with the fix.

Endpoints and tool imports are checked as this process resolves them (its
``OPENAI_BASE_URL``, ``LOOPLINE_MODELS``, ``PYTHONPATH`` and ``LOOPLINE_ALLOWED_MODULES``):
run it where the services run (``docker compose exec model loopline doctor``) to see
what they see; the detail line says so.
"""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from contracts.agent import DeployedAgent
from contracts.streams import SERVICES, Names
from services.errors import ConfigurationError
from services.secrets import redact_url

Level = Literal["ok", "warn", "fail"]

MIN_REDIS = (6, 2)
"""XAUTOCLAIM (reclaiming a dead consumer's entries) came with Redis 6.2."""
ENDPOINT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Check:
    name: str
    level: Level
    detail: str
    fix: str = ""

    def as_row(self) -> list[str]:
        return [self.name, self.level.upper() if self.level == "fail" else self.level,
                self.detail, self.fix]  # fmt: skip


Checker = Callable[[aioredis.Redis, Names], Awaitable[list[Check]]]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def _config(redis: aioredis.Redis, name: str) -> str | None:
    """A server setting, or None when this user may not read settings (ACL)."""
    try:
        found: Any = await redis.config_get(name)
    except ResponseError:
        return None
    return _text(found.get(name, "")) if found else None


async def check_redis_server(redis: aioredis.Redis, names: Names) -> list[Check]:
    """The server's kind and version, persistence and eviction policy."""
    info: Any = await redis.info()
    kind = "valkey" if info.get("valkey_version") else "redis"
    version = str(info.get("valkey_version") or info.get("redis_version", "0"))
    numbers = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    checks = [
        Check("redis version", "ok", f"{kind} {version}")
        if kind == "valkey" or numbers >= MIN_REDIS
        else Check(
            "redis version",
            "fail",
            f"redis {version}: loopline needs 6.2 or newer (XAUTOCLAIM)",
            "upgrade Redis to 7",
        )
    ]
    aof = str(info.get("aof_enabled", "0")) == "1"
    save = await _config(redis, "save")
    if aof:
        checks.append(Check("persistence", "ok", "AOF on (appendonly yes)"))
    elif save:
        checks.append(
            Check(
                "persistence",
                "warn",
                f"RDB snapshots only (save {save}): a crash loses what came after the last one",
                "set appendonly yes (appendfsync everysec)",
            )
        )
    else:
        checks.append(
            Check(
                "persistence",
                "warn",
                "no AOF" + ("" if save is None else ", no snapshots")
                + ": a Redis restart loses every task and event",
                "set appendonly yes (appendfsync everysec)",
            )
        )  # fmt: skip
    policy = str(info.get("maxmemory_policy", "?"))
    limit = int(info.get("maxmemory", 0) or 0)
    shown = f"maxmemory-policy {policy}, maxmemory {info.get('maxmemory_human', limit)}"
    if policy == "noeviction":
        checks.append(Check("memory policy", "ok", shown))
    else:
        checks.append(
            Check(
                "memory policy",
                "fail",
                f"{shown}: Redis may evict streams and task keys, and tasks vanish",
                "set maxmemory-policy noeviction (a full Redis then refuses writes)",
            )
        )
    return checks


async def check_acl_user(redis: aioredis.Redis, names: Names) -> list[Check]:
    try:
        user = _text(await redis.execute_command("ACL", "WHOAMI"))  # type: ignore[no-untyped-call]
    except ResponseError:
        return [Check("redis user", "ok", "ACL WHOAMI not allowed: a restricted user")]
    if user == "default":
        return [
            Check(
                "redis user",
                "warn",
                "the default user: every client may do everything",
                "give each role its own user: `loopline acl --prefix "
                f"{names.prefix}` (README: Security)",
            )
        ]
    return [Check("redis user", "ok", f"{user}")]


async def check_services(redis: aioredis.Redis, names: Names) -> list[Check]:
    """Each service has a live consumer (from the consumer registry and stream groups)."""
    from loopline.status import collect

    report = await collect(redis, names, tasks=False)
    checks = []
    for service in SERVICES:
        info = report["services"][service]
        live = int(info["live"])
        lag = sum(int(s["lag"] or 0) for s in info["streams"])
        if live:
            checks.append(Check(f"service {service}", "ok", f"{live} consumer(s), lag {lag}"))
        else:
            checks.append(
                Check(
                    f"service {service}",
                    "fail",
                    f"no live consumer (lag {lag}): tasks that need it wait",
                    f"start it: `loopline serve {service}` (or `loopline up` for all)",
                )
            )
    return checks


async def check_agents(redis: aioredis.Redis, names: Names) -> list[Check]:
    """Every deployed agent's tools and middleware import here, and its model has an
    endpoint here."""
    from services import deployed

    try:
        agents = await deployed.latest_versions(redis, names)
    except ConfigurationError as exc:
        return [Check("deployed agents", "warn", str(exc))]
    if not agents:
        return [
            Check(
                "deployed agents",
                "ok",
                "none deployed yet",
                "deploy one: `loopline deploy AGENT_FILE` (or `loopline run --agent FILE`)",
            )
        ]
    checks = [await asyncio.to_thread(_agent_check, agent) for agent in agents]
    return checks + await asyncio.to_thread(_endpoint_checks, agents)


def _agent_check(agent: DeployedAgent) -> Check:
    from services.spec.validation import InvalidSpec, check_deployable

    try:
        check_deployable(agent.spec)
    except InvalidSpec as exc:
        return Check(
            f"agent {agent.ref}",
            "fail",
            f"{exc} (as imported here)",
            "install the package where the services run (in the image), put it on "
            "PYTHONPATH, and list it in LOOPLINE_ALLOWED_MODULES",
        )
    tools = ", ".join(agent.spec.tools) or "no tools"
    return Check(f"agent {agent.ref}", "ok", f"imports here: {tools}")


def _endpoint_checks(agents: list[DeployedAgent]) -> list[Check]:
    """One check per distinct endpoint the agents' models resolve to here."""
    from services.spec import endpoints

    checks: list[Check] = []
    seen: set[str] = set()
    for agent in agents:
        model = agent.spec.model
        if endpoints.is_fake(model):
            continue
        found = endpoints.endpoint_for(model)
        if found is None:
            checks.append(
                Check(
                    f"model {model.name}",
                    "fail",
                    "no endpoint configured here",
                    "set OPENAI_BASE_URL / OPENAI_API_KEY, or name the model in "
                    "LOOPLINE_MODELS, where the model service runs",
                )
            )
            continue
        base = found.base_url or "https://api.openai.com/v1"
        if base in seen:
            continue
        seen.add(base)
        checks.append(_probe(model.name, base, found.api_key))
    return checks


def _probe(model: str, base_url: str, key: str | None) -> Check:
    """``GET {base_url}/models``: the endpoint answers (any HTTP reply counts, a 401
    says the key is wrong)."""
    request = urllib.request.Request(base_url.rstrip("/") + "/models")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    name, shown = f"model {model}", redact_url(base_url)
    try:
        with urllib.request.urlopen(request, timeout=ENDPOINT_TIMEOUT_S):
            return Check(name, "ok", f"{shown} answers")
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            return Check(name, "fail", f"{shown} refuses the key (HTTP {exc.code})",
                         "set the right OPENAI_API_KEY (or the model's api_key_env)")  # fmt: skip
        return Check(name, "ok", f"{shown} answers (HTTP {exc.code} to GET /models)")
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return Check(
            name,
            "fail",
            f"{shown} does not answer ({reason})",
            "start the server, or fix OPENAI_BASE_URL / LOOPLINE_MODELS",
        )


CHECKERS: tuple[Checker, ...] = (check_redis_server, check_acl_user, check_services, check_agents)


async def diagnose(redis: aioredis.Redis, names: Names) -> list[Check]:
    """Every check, in order; a checker that cannot run is one failed check."""
    checks: list[Check] = []
    for checker in CHECKERS:
        try:
            checks.extend(await checker(redis, names))
        except ResponseError as exc:
            name = checker.__name__.removeprefix("check_").replace("_", " ")
            checks.append(Check(name, "fail", f"Redis refused: {exc}", "see the Redis user's ACL"))
    return checks


def as_json(checks: list[Check]) -> dict[str, Any]:
    return {
        "ok": all(c.level != "fail" for c in checks),
        "checks": [asdict(c) for c in checks],
    }

"""Redis ACL users for the roles of a deployment (``loopline acl``).

A tenant is a prefix (``LOOPLINE_PREFIX``): its streams and keys all start with
``PREFIX:``, and every user below is the tenant's own (``PREFIX-ROLE``), with key patterns
inside the prefix only, so one tenant's users never read or touch another's keys.

- ``operator``: everything of the prefix, no server administration: deploys agents,
  ``status``, ``stats``, the dead letters (list, replay, drop).
- one user per service (``loop``, ``model``, ``tools``, ``context``, ``todos``): the
  consumer-group commands on its own input streams, publishing on the streams it feeds,
  the task keys (every service that applies a transition runs the state machine's
  scripts on them) and the shared bookkeeping (dead letters, errors, consumers).
- ``producer``: submits tasks, cancels and decides: all three are events on the tasks
  stream, which the loop validates (a decision only for a call that waits, a cancel only
  for a task of the prefix, a known task id refused), and it can only add to it; reads
  the task logs and states of its prefix, the public streams and the registry of
  deployed agents (which it cannot change). It cannot list keys
  (no SCAN or KEYS: those ignore key patterns), nor write any other stream or key.
- ``subscriber``: reads the public streams (todos, edits, approvals).
- ``api``: the HTTP gateway (``loopline serve api``) for the tenant: a producer's rights,
  reading the agent specs, its own records of threads, runs and assistants
  (``PREFIX:api:*``), and the store it serves (``PREFIX:store:*``).

Scripts are checked key by key: Redis refuses an EVALSHA whose declared KEYS the user
may not both read and write, and every command a script runs is checked as well, so the
state machine's scripts declare every key they touch.

Passwords never appear in the output: each user gets the SHA-256 of its password
(``#<hex>``), read from an environment variable per role (``new_passwords`` makes a set).

The ``default`` user is Redis's own: an ACL file that does not name it leaves it on with
every right, so a deployment locks it (``locked_default``): it may only PING, which the
health checks send, and a client that forgot its user reaches nothing.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from contracts.streams import SERVICES, Names

ROLES: tuple[str, ...] = ("operator", *SERVICES, "producer", "subscriber", "api")

PASSWORD_ENV = "LOOPLINE_ACL_{ROLE}_PASSWORD"
"""The default template of the variable that holds a role's password."""

CONNECTION = ("ping", "hello", "client|setname", "client|id", "select")
"""What every client sends on connecting (redis-py and the services' lean client)."""

READ_STREAMS = ("xread", "xrange", "xrevrange", "xlen", "xinfo|stream", "exists")

CONSUMER = (
    "xreadgroup", "xack", "xclaim", "xautoclaim", "xpending", "xgroup|create",
    "xgroup|createconsumer", "xgroup|delconsumer", "xinfo|groups", "xinfo|consumers",
    "xinfo|stream", "xtrim", "xadd", "xrange", "xrevrange", "xlen",
)  # fmt: skip
"""A consumer group's work: read, ack, reclaim, trim below what every group acked; and
the last entry of a task's log (a thread's run that ended, ``services.tasks.threads``)."""

SCRIPTS = ("eval", "evalsha", "script|load", "script|exists")

DATA = (
    "get", "set", "del", "exists", "expire", "ttl",
    "hset", "hsetnx", "hget", "hmget", "hgetall", "hdel", "hexists", "hkeys", "hvals",
    "hlen", "hincrby",
    "rpush", "lpush", "lpop", "lrem", "lrange", "llen", "lindex", "persist",
    "sadd", "sismember",
    "zadd", "zrem", "zrange", "zrangebyscore", "zremrangebyscore", "zcard", "zscore",
    "rename", "expireat", "time",
)  # fmt: skip
"""The data commands the services (and their scripts) run; a thread's queue of runs is a
list (``services/tasks/lua/thread_*.lua``), and a thread's keys are kept while it lives;
a thread's transcript that a write changed is kept apart while runs read it (renamed,
expiring: ``lua/thread_common.lua``)."""

PUBSUB = ("subscribe", "unsubscribe")
"""What a service listens with (stream requests, registry changes)."""

STREAM_ASKS = ("hset", "expire", "zadd", "zremrangebyscore", "publish")
"""What a client runs to ask for a task's token stream (``Client.stream_replies``)."""

CRONS_AND_WEBHOOKS = (
    "set", "hdel", "hvals", "zrem", "zrange", "zmscore", "zrangebyscore", "multi", "exec",
    *SCRIPTS,
)  # fmt: skip
"""What the gateway runs for its crons (claimed by a script) and its webhooks' leases
(``loopline.api.crons``, ``loopline.api.webhook_delivery``)."""

PRODUCER_READS = (
    "hget", "hmget", "hgetall", "hkeys", "hexists", "hlen", "get", "lrange", "llen", "lindex",
    "zrevrange",
)  # fmt: skip
"""What the client reads of a task: its state, transcript, todos, waiting calls."""


API_DATA = (
    "del", "zadd", "zrem", "zrange", "zscore", "hsetnx", "hincrby", "hdel",
    "sadd", "srem", "smembers", "exists",
)  # fmt: skip
"""What the gateway writes and lists beside a producer's rights: its records and indexes
(``loopline.api.records``, ``loopline.api.assistants``), its delayed runs
(``loopline.api.delayed_runs``) and the store's items and their expiry times."""


@dataclass(frozen=True)
class Role:
    """One user: its keys (``~`` read and write, ``%R~`` read, ``%W~`` write only) and
    its commands."""

    name: str
    keys: tuple[str, ...] = ()
    read_keys: tuple[str, ...] = ()
    write_keys: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()
    channels: tuple[str, ...] = ()
    """Pub/sub channels it may publish or subscribe to (``&``)."""
    categories: tuple[str, ...] = field(default=())
    """ACL categories and removals (``+@all``, ``-@dangerous``), before the commands."""


def _service_outputs(names: Names) -> dict[str, tuple[str, ...]]:
    """The streams each service publishes on, besides its inputs. The model and tools
    services apply a hook-free agent's transition themselves (``services.tasks.handover``),
    so they publish what the loop would: the next model request, the step's tool calls."""

    def streams(*kinds: str) -> tuple[str, ...]:  # each partition's stream of a kind
        return tuple(s for kind in kinds for s in names.work_streams(kind))

    work = streams("context", "model", "tools", "todo_calls", "loop")
    return {
        "loop": (*streams("context", "model", "tools", "todo_calls"), names.approvals),
        "model": work,
        "tools": work,
        "context": (*streams("model"), names.edits),
        "todos": (*streams("loop"), names.todos),
    }


PREFIX_PATTERN = re.compile(r"[A-Za-z0-9_.-]+")
"""A tenant's prefix: no ``:`` (so no tenant's keys fall under another's ``PREFIX:*``)
and no glob characters (the prefix is part of every key pattern)."""


def check_prefix(prefix: str) -> str:
    if not PREFIX_PATTERN.fullmatch(prefix):
        raise ValueError(
            f"prefix {prefix!r} cannot be a tenant: use letters, digits, '_', '.' or '-' "
            "(no ':', no glob characters)"
        )
    return prefix


def roles(prefix: str) -> dict[str, Role]:
    """Every role's user for the tenant ``prefix``."""
    names = Names(check_prefix(prefix))
    tasks = f"{prefix}:task:*"
    agents = f"{prefix}:agent*"  # the agent specs (and the operator's registry of them)
    public = (names.approvals, names.todos, names.edits)
    shared = (names.dlq, names.errors, names.consumers, names.partitions_key)
    outputs = _service_outputs(names)
    found: dict[str, Role] = {
        "operator": Role(
            "operator",
            keys=(f"{prefix}:*",),
            categories=("+@all", "-@dangerous", "-@admin"),
            commands=("info", "scan"),
            # deploying or removing an agent announces it (services.deployed)
            channels=(names.registry_changes,),
        )
    }
    for service in SERVICES:
        keys = [*names.inputs_of(service), *outputs[service], tasks, *shared]
        runs_the_loop = service in ("loop", "model", "tools")  # services.tasks.handover
        if runs_the_loop:  # a task that ends leaves the deadlines set, its agent kept on
            keys += [*names.deadline_sets(), agents, names.seal_key]  # services.seal
            # a run that ends writes its thread back and starts the next queued run
            # (RunDequeued on the tasks stream); hooks and tools reach the shared store
            keys += [f"{prefix}:thread:*", names.threads, *names.inputs_of("loop")]
            keys.append(f"{prefix}:store:*")
        if service in ("model", "tools"):  # RateLimitMiddleware's windows
            keys.append(f"{prefix}:ratelimit:*")
        if service == "loop":  # it trims the public streams
            keys += [names.todos, names.edits]
        reads = [] if runs_the_loop else [agents]
        channels: tuple[str, ...] = ()
        commands: tuple[str, ...] = (*CONNECTION, *CONSUMER, *SCRIPTS, *DATA)
        if service == "model":  # which tasks a client asked to stream (services.model.streaming)
            reads.append(names.stream_requested)
            channels = (names.stream_requests,)
            commands += PUBSUB
        if service == "loop":  # it looks up the deployed agent a task names, and keeps it
            reads.append(names.deployed)  # until a removal is announced
            channels = (names.registry_changes,)
            commands += PUBSUB
        found[service] = Role(
            service,
            keys=tuple(dict.fromkeys(keys)),
            read_keys=tuple(reads),
            commands=commands,
            channels=channels,
        )
    found["producer"] = Role(
        "producer",
        # its tasks, their threads, and which agents it may name
        read_keys=(
            tasks,
            f"{prefix}:thread:*",
            names.threads,
            *public,
            names.deployed,
            names.partitions_key,  # the number of partitions (Client._adopt_partitions)
        ),
        # the tasks stream, and asking for a task's token stream (Client.stream_replies)
        write_keys=(
            *dict.fromkeys((names.tasks, *names.work_streams("tasks"))),  # what it submits to
            f"{prefix}:task:*:streaming",
            names.stream_requested,
        ),
        commands=(*CONNECTION, *READ_STREAMS, "xadd", *PRODUCER_READS, *STREAM_ASKS),
        channels=(names.stream_requests,),
    )
    found["subscriber"] = Role(
        "subscriber", read_keys=public, commands=(*CONNECTION, *READ_STREAMS)
    )
    producer = found["producer"]
    found["api"] = Role(
        "api",
        # the gateway's records of threads, runs and assistants (loopline.api), and the
        # store it serves over HTTP (the one hooks and tools see)
        keys=(f"{prefix}:api:*", f"{prefix}:store:*"),
        # and the agent specs, whose state keys a thread's state shows (LangGraph's)
        read_keys=(*producer.read_keys, f"{prefix}:agent:*"),
        write_keys=producer.write_keys,
        commands=(*producer.commands, *API_DATA, *PUBSUB, *CRONS_AND_WEBHOOKS),
        # and it keeps the assistants it read until the registry announces a change
        channels=(*producer.channels, names.registry_changes),
    )
    return found


def user_name(prefix: str, role: str) -> str:
    return f"{prefix}-{role}"


def password_hash(password: str) -> str:
    return hashlib.sha256(password.encode()).hexdigest()


def rules(prefix: str, role: Role, password: str) -> list[str]:
    """The user's ACL rules, from a clean slate (``reset``)."""
    out = ["reset", "on", f"#{password_hash(password)}", "resetkeys"]
    out += [f"~{k}" for k in role.keys]
    out += [f"%R~{k}" for k in role.read_keys]
    out += [f"%W~{k}" for k in role.write_keys]
    out += ["resetchannels", *(f"&{c}" for c in role.channels), "-@all", *role.categories]
    out += [f"+{c}" for c in dict.fromkeys(role.commands)]
    return out


def setuser_lines(
    prefix: str, passwords: Mapping[str, str], only: Iterable[str] = ROLES
) -> list[str]:
    """``ACL SETUSER`` commands for the roles in ``only`` (what ``redis-cli`` reads)."""
    every = roles(prefix)
    return [
        " ".join(["ACL", "SETUSER", user_name(prefix, r), *rules(prefix, every[r], passwords[r])])
        for r in only
    ]


def aclfile_lines(
    prefix: str, passwords: Mapping[str, str], only: Iterable[str] = ROLES
) -> list[str]:
    """The same users as lines of an ACL file (``redis-server --aclfile``)."""
    every = roles(prefix)
    return [
        " ".join(["user", user_name(prefix, r), *rules(prefix, every[r], passwords[r])[1:]])
        for r in only
    ]


def passwords_from_env(
    only: Sequence[str], template: str = PASSWORD_ENV, env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Each role's password from its variable (``{ROLE}`` in ``template``: the role's
    name in capitals). Raises ``KeyError`` naming the variables that are not set."""
    source = os.environ if env is None else env
    found: dict[str, str] = {}
    missing = []
    for role in only:
        variable = template.replace("{ROLE}", role.upper())
        value = source.get(variable)
        if value:
            found[role] = value
        else:
            missing.append(variable)
    if missing:
        raise KeyError(", ".join(missing))
    return found


LOCKED_DEFAULT = ("on", "nopass", "resetkeys", "resetchannels", "-@all", "+ping")
"""The default user of a locked deployment: PING only (health checks), no key, no channel."""


def locked_default(*, aclfile: bool) -> str:
    """The line that locks Redis's ``default`` user, for an ACL file or ``redis-cli``."""
    if aclfile:
        return " ".join(["user", "default", *LOCKED_DEFAULT])
    return " ".join(["ACL", "SETUSER", "default", "reset", *LOCKED_DEFAULT])


def new_passwords(only: Sequence[str] = ROLES, template: str = PASSWORD_ENV) -> dict[str, str]:
    """A fresh random password per role, keyed by the variable that holds it (what
    ``passwords_from_env`` reads back). Hex: safe in a URL, a shell and an env file."""
    return {template.replace("{ROLE}", role.upper()): secrets.token_hex(24) for role in only}

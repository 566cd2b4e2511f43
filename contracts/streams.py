"""Every stream, consumer group and key name, in one place.

All names start with a prefix (``LOOPLINE_PREFIX``, default ``loopline``) so that several
deployments or test runs share one Redis without seeing each other. A task's keys carry
the task id as a hash tag (``{task_id}``), so multi-key scripts on one task work on a
Redis Cluster.

Wire format: every stream entry has one field, ``__data__`` (FastStream's field name),
holding the event as UTF-8 JSON. Any Redis client can publish and read events.
"""

from __future__ import annotations

import binascii
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache

DATA_FIELD = "__data__"

SAVER_SPACE_MARK = "~saver-"
"""How the thread id of a thread kept by an in-process checkpointer (``InMemorySaver``)
begins on the bus: ``~saver-<hex>/<the caller's id>`` (``loopline.threads.ThreadSpace``).
Such a saver holds the thread's record (``loopline.checkpoints``), so the services let
its working copy in Redis expire once idle for the retention time."""


def shown_thread_id(thread_key: str) -> str:
    """The caller's own id of a thread, for the texts a caller reads (a saver's space
    left out of an in-process saver's thread key)."""
    if thread_key.startswith(SAVER_SPACE_MARK):
        return thread_key.partition("/")[2]
    return thread_key


# Consumer group of each service; a service's replicas share its group.
GROUPS = {
    "loop": "loop",
    "context": "context",
    "model": "model",
    "tools": "tools",
    "todos": "todos",
}
SERVICES = tuple(GROUPS)

PARTITIONS_ENV = "LOOPLINE_PARTITIONS"
"""How many partitions each work stream is split into (0, the default: not split). Every
process of a deployment, its clients and outside producers included, must read the same
number (the services refuse to start on another: ``services.partitions``)."""

CLUSTER_SLOTS = 16384

WORK_KINDS = ("tasks", "loop", "context", "model", "tools", "todo_calls")
"""The work streams that are partitioned: each one a stream per partition."""


def partitions_from_env() -> int:
    raw = os.environ.get(PARTITIONS_ENV, "").strip()
    if not raw:
        return 0
    count = int(raw)
    if not 0 <= count <= 1024:
        raise ValueError(f"{PARTITIONS_ENV} must be between 0 and 1024, not {count}")
    return count


def key_slot(tag: str) -> int:
    """The Redis Cluster hash slot of a key whose hash tag is ``tag`` (CRC16 XMODEM, as
    Redis computes it, modulo 16384)."""
    return binascii.crc_hqx(tag.encode(), 0) % CLUSTER_SLOTS


def hash_tag(key: str) -> str | None:
    """The part of a key Redis Cluster hashes: the text inside its first ``{...}`` when
    not empty; None where the whole key is hashed."""
    start = key.find("{")
    end = key.find("}", start + 1)
    if start < 0 or end <= start + 1:
        return None
    return key[start + 1 : end]


@cache
def partition_tags(prefix: str, partitions: int) -> tuple[str, ...]:
    """The hash tag of each partition: ``PREFIX:pN`` (with ``.K`` added, the first K that
    does it) whose slot lies in the N-th of ``partitions`` equal ranges of the 16384 slots.
    A cluster whose masters own equal contiguous ranges (what ``--cluster create`` makes)
    then holds equal shares of the partitions, and moving one partition to another master
    is moving one slot."""
    tags = []
    for n in range(partitions):
        low, high = n * CLUSTER_SLOTS // partitions, (n + 1) * CLUSTER_SLOTS // partitions
        k, tag = 0, f"{prefix}:p{n}"
        while not low <= key_slot(tag) < high:
            k += 1
            tag = f"{prefix}:p{n}.{k}"
        tags.append(tag)
    return tuple(tags)


@dataclass(frozen=True)
class Names:
    """Every name of one deployment (its prefix).

    With ``partitions`` P > 0 the work streams are partitioned: a task belongs to
    partition ``crc16(task id) % P`` (``partition_of``) for its whole life, and its keys,
    the work streams it is published to and its deadline share that partition's hash tag
    (``{PREFIX:pN}``), so one script can apply its transition, publish what comes next
    and acknowledge the entry it handled, on one server as on a Redis Cluster. Without
    partitions (P = 0) a task's keys are tagged with its id and the work streams are one
    stream each, as before partitions existed.
    """

    prefix: str = "loopline"
    partitions: int = field(default_factory=partitions_from_env)

    # -- partitions --
    def partition_of(self, task_id: str) -> int:
        """The task's partition (0 without partitions)."""
        if not self.partitions:
            return 0
        return binascii.crc_hqx(task_id.encode(), 0) % self.partitions

    def partition_tag(self, n: int) -> str:
        return partition_tags(self.prefix, self.partitions)[n]

    def _partitioned(self, name: str, n: int) -> str:
        return f"{self.prefix}:{{{self.partition_tag(n)}}}:{name}"

    def work(self, kind: str, task_id: str) -> str:
        """The work stream of ``kind`` (one of ``WORK_KINDS``) that carries the task's
        events: its partition's, or the one stream without partitions."""
        plain: str = getattr(self, kind)
        if not self.partitions:
            return plain
        return self._partitioned(plain.removeprefix(f"{self.prefix}:"), self.partition_of(task_id))

    def work_streams(self, kind: str) -> tuple[str, ...]:
        """Every stream of ``kind``: one per partition (the one without partitions)."""
        plain: str = getattr(self, kind)
        if not self.partitions:
            return (plain,)
        name = plain.removeprefix(f"{self.prefix}:")
        return tuple(self._partitioned(name, n) for n in range(self.partitions))

    def deadlines_of(self, task_id: str) -> str:
        """The sorted set of deadlines the task's deadline is in (its partition's)."""
        if not self.partitions:
            return self.deadlines
        return self._partitioned("deadlines", self.partition_of(task_id))

    def deadline_sets(self) -> tuple[str, ...]:
        if not self.partitions:
            return (self.deadlines,)
        return tuple(self._partitioned("deadlines", n) for n in range(self.partitions))

    def task_tag(self, task_id: str) -> str:
        """The hash tag of the task's keys: its partition's, or its own id."""
        if not self.partitions:
            return task_id
        return self.partition_tag(self.partition_of(task_id))

    def same_slot(self, task_id: str, keys: Iterable[str]) -> bool:
        """Whether every key has the task's hash tag (one script may take them all on a
        Redis Cluster)."""
        tag = self.task_tag(task_id)
        return all(hash_tag(key) == tag for key in keys)

    # -- work streams: one producer side, one consuming service --
    @property
    def tasks(self) -> str:
        """TaskSubmitted. Published by clients; consumed by loop."""
        return f"{self.prefix}:tasks"

    @property
    def loop(self) -> str:
        """ModelResponded, ModelFailed, ToolCompleted, ToolFailed. Published by model,
        tools, todos; consumed by loop."""
        return f"{self.prefix}:loop"

    @property
    def context(self) -> str:
        """ContextRequested. Published by loop; consumed by context."""
        return f"{self.prefix}:context"

    @property
    def model(self) -> str:
        """ModelRequested. Published by context; consumed by model."""
        return f"{self.prefix}:model"

    @property
    def tools(self) -> str:
        """ToolRequested for the agent's tools. Published by loop; consumed by tools."""
        return f"{self.prefix}:tools"

    @property
    def todo_calls(self) -> str:
        """ToolRequested for ``write_todos``. Published by loop; consumed by todos."""
        return f"{self.prefix}:todo-calls"

    # -- public streams: for outside subscribers --
    @property
    def todos(self) -> str:
        """TodosUpdated, every accepted todo list. Published by todos."""
        return f"{self.prefix}:todos"

    @property
    def edits(self) -> str:
        """ContextEdited, every edit that changed the model's view. Published by context."""
        return f"{self.prefix}:edits"

    @property
    def approvals(self) -> str:
        """ApprovalRequested: tasks waiting for a human decision. Published by loop."""
        return f"{self.prefix}:approvals"

    @property
    def stream_requests(self) -> str:
        """Pub/sub channel: the id of a task whose replies a client asked to see streamed
        (``task_streaming``), published as the client asks. Model services listen."""
        return f"{self.prefix}:stream-requests"

    @property
    def stream_requested(self) -> str:
        """Sorted set: task ids whose replies a client asked to see streamed, scored by
        when the request lapses (epoch seconds): what a model service that was not yet
        listening on ``stream_requests`` loads when it starts listening."""
        return f"{self.prefix}:stream-requested"

    @property
    def registry_changes(self) -> str:
        """Pub/sub channel: ``NAME`` when a new version of it is deployed (its latest
        moves) or all its versions are removed, ``NAME@VERSION`` when that version is
        removed; published by the change. Loop services and the gateway listen (they keep
        the registrations they read)."""
        return f"{self.prefix}:registry-changes"

    @property
    def dlq(self) -> str:
        """DeadLettered: events no consumer could handle, with the reason."""
        return f"{self.prefix}:dlq"

    @property
    def errors(self) -> str:
        """Hash: "stream|entry id" -> last error of an entry that is being retried."""
        return f"{self.prefix}:errors"

    @property
    def deadlines(self) -> str:
        """Sorted set: task id scored by its deadline (epoch seconds). Loop reads it."""
        return f"{self.prefix}:deadlines"

    @property
    def consumers(self) -> str:
        """Hash: consumer name -> {service, pid, host, started} of every running consumer."""
        return f"{self.prefix}:consumers"

    @property
    def partitions_key(self) -> str:
        """String: the number of partitions the deployment's work streams are split into,
        recorded by the first service that starts (``services.app``)."""
        return f"{self.prefix}:partitions"

    @property
    def seal_key(self) -> str:
        """String: the key the services seal the tool calls they issue with
        (``services.seal``). Created by the first service that needs it; read by loop,
        model and tools, never by producers."""
        return f"{self.prefix}:seal"

    def inputs_of(self, service: str) -> tuple[str, ...]:
        """The streams a service consumes (with partitions, the loop also reads the one
        ``tasks`` stream, for producers that do not partition what they submit)."""
        kinds = {
            "loop": ("tasks", "loop"),
            "context": ("context",),
            "model": ("model",),
            "tools": ("tools",),
            "todos": ("todo_calls",),
        }[service]
        streams = tuple(s for kind in kinds for s in self.work_streams(kind))
        if service == "loop" and self.partitions:
            streams = (self.tasks, *streams)
        return streams

    # -- per-task keys (hash tag = task id) --
    def task_key(self, task_id: str, part: str) -> str:
        if not self.partitions:
            return f"{self.prefix}:task:{{{task_id}}}:{part}"
        return f"{self.prefix}:task:{{{self.task_tag(task_id)}}}:{task_id}:{part}"

    def task_of_state_key(self, key: str) -> str:
        """The task whose ``task_state`` key this is (what a SCAN for them finds), with or
        without partitions."""
        body = key.removeprefix(f"{self.prefix}:task:").removesuffix(":state")
        tag_end = body.find("}")
        after_tag = body[tag_end + 1 :]
        return after_tag.removeprefix(":") if after_tag else body[1:tag_end]

    def task_state(self, task_id: str) -> str:
        """Hash: status, step, phase, agent id, limits. Written by loop only."""
        return self.task_key(task_id, "state")

    def task_messages(self, task_id: str) -> str:
        """List: the transcript, one JSON message per entry, append-only. Loop writes.
        A run of a thread hands it over to the thread's when it ends (the key goes; the
        task's state names where it is read: ``services.tasks.threads.HANDED``)."""
        return self.task_key(task_id, "messages")

    def task_log(self, task_id: str) -> str:
        """Stream: the task's own ordered event log. Read by clients from any offset."""
        return self.task_key(task_id, "log")

    def task_logged(self, task_id: str) -> str:
        """Set: keys of events already in the log, so a redelivery never logs twice."""
        return self.task_key(task_id, "logged")

    def task_results(self, task_id: str) -> str:
        """Hash: tool call id -> tool message of the current step (the join)."""
        return self.task_key(task_id, "results")

    def task_todos(self, task_id: str) -> str:
        """String: the task's current todo list (JSON). Written by todos."""
        return self.task_key(task_id, "todos")

    def task_tokens(self, task_id: str) -> str:
        """Hash: message index:method -> token count, computed once per message."""
        return self.task_key(task_id, "tokens")

    def task_calls(self, task_id: str) -> str:
        """Hash: ``<tool call id>@<step>`` -> {state: running|done, message}: a tool runs
        at most once (``services.tasks.issued.record_field``)."""
        return self.task_key(task_id, "calls")

    def task_chunks(self, task_id: str) -> str:
        """Stream: the model's reply as it is generated (``contracts.chunks.ChunkBatch``),
        capped and expiring; written only while a client asked (``task_streaming``)."""
        return self.task_key(task_id, "chunks")

    def task_streaming(self, task_id: str) -> str:
        """Hash, set by a client before it submits: the task's replies are streamed to
        ``task_chunks``; field ``step:N`` counts the model calls (attempts) of step N.
        Expires with the chunk stream."""
        return self.task_key(task_id, "streaming")

    def task_keys(self, task_id: str) -> list[str]:
        parts = ("state", "messages", "log", "results", "logged", "todos", "tokens", "calls")
        return [self.task_key(task_id, p) for p in parts]

    # -- per-thread keys (hash tag = thread id): a conversation's state between its runs --
    def thread_key(self, thread_id: str, part: str) -> str:
        return f"{self.prefix}:thread:{{{thread_id}}}:{part}"

    def thread_state(self, thread_id: str) -> str:
        """Hash: the active run, the last run, the middleware state (``extra``),
        retention, the stop asked of the active run. Written by the thread scripts."""
        return self.thread_key(thread_id, "state")

    def thread_messages(self, thread_id: str) -> str:
        """List: the thread's transcript as its last run left it, one JSON message each.
        Also the transcript of each run that ended on the thread (its first messages):
        written only by the thread scripts, which append to it where they can."""
        return self.thread_key(thread_id, "messages")

    def thread_kept_messages(self, thread_id: str, epoch: int) -> str:
        """List: the thread's transcript as it stood at ``epoch`` before a write changed
        what was there (not only appended), kept while a run that handed its transcript
        over at that epoch lives (``lua/thread_common.lua``)."""
        return f"{self.thread_messages(thread_id)}@{epoch}"

    def thread_todos(self, thread_id: str) -> str:
        """String: the thread's todo list (JSON) as its last run left it."""
        return self.thread_key(thread_id, "todos")

    def thread_runs(self, thread_id: str) -> str:
        """Hash: task id -> queued | active | completed | failed | rejected | rolled_back."""
        return self.thread_key(thread_id, "runs")

    def thread_log(self, thread_id: str) -> str:
        """Stream: the thread's log of runs: each run's TaskSubmitted when it starts and
        its TaskCompleted / TaskFailed when it ends."""
        return self.thread_key(thread_id, "log")

    def thread_queue(self, thread_id: str) -> str:
        """List: task ids of runs waiting for the thread, next first."""
        return self.thread_key(thread_id, "queue")

    def thread_pending(self, thread_id: str) -> str:
        """Hash: task id -> TaskSubmitted (JSON) of a run that waited for the thread."""
        return self.thread_key(thread_id, "pending")

    def thread_updates(self, thread_id: str) -> str:
        """Stream: what changed the thread between its runs (``update_state``, a run from
        an earlier checkpoint), read with the runs' logs to fold the thread's
        checkpoints (``loopline.history``). Written by the client that asked."""
        return self.thread_key(thread_id, "updates")

    def thread_keys(self, thread_id: str) -> list[str]:
        parts = ("state", "messages", "todos", "runs", "log", "queue", "pending", "updates")
        return [self.thread_key(thread_id, p) for p in parts]

    # -- the HTTP gateway's records (loopline.api): LangGraph's threads and runs by id --
    def api_thread(self, thread_id: str) -> str:
        """Hash: a thread as the HTTP gateway created it (``created_at``, ``metadata``),
        before and beside the services' thread keys. Written and read by the gateway."""
        return f"{self.prefix}:api:thread:{{{thread_id}}}"

    def api_thread_runs(self, thread_id: str) -> str:
        """Sorted set: the runs the gateway started on a thread, by creation time."""
        return f"{self.prefix}:api:thread:{{{thread_id}}}:runs"

    @property
    def api_threads(self) -> str:
        """Sorted set: the threads the gateway created, by creation time (thread search
        and count walk it beside ``threads``). Written and read by the gateway."""
        return f"{self.prefix}:api:threads"

    @property
    def api_thread_expiry(self) -> str:
        """Sorted set: the threads a client gave a TTL, by when they expire (epoch
        seconds); the gateway's sweep deletes those past it. Written and read by the
        gateway."""
        return f"{self.prefix}:api:threads:expiry"

    def api_assistant(self, assistant_id: str) -> str:
        """Hash: an assistant created over HTTP (a configuration of a deployed agent):
        ``created_at``, ``updated_at``, ``latest`` (its current version), ``versions``
        (the last version number given) and one field ``v<N>`` per version (JSON).
        Written and read by the gateway."""
        return f"{self.prefix}:api:assistant:{{{assistant_id}}}"

    @property
    def api_assistants(self) -> str:
        """Sorted set: the assistants created over HTTP, by creation time."""
        return f"{self.prefix}:api:assistants"

    def api_run(self, run_id: str) -> str:
        """Hash: a run the HTTP gateway started: its task, thread, assistant, and where in
        the task's log and chunk stream it begins (a resume is a run of its own that
        continues the waiting task). Written and read by the gateway."""
        return f"{self.prefix}:api:run:{{{run_id}}}"

    # -- the gateway's crons and webhooks (loopline.api.crons, loopline.api.webhooks) ----
    @property
    def api_crons(self) -> str:
        """Hash: cron id -> the cron as the gateway shows it (JSON, without its next run
        date). Written by the gateway's cron routes; read by every gateway replica. The
        cron keys share one hash slot (``{crons}``): a claim is one script."""
        return f"{self.prefix}:api:{{crons}}"

    @property
    def api_cron_schedule(self) -> str:
        """Sorted set: cron id scored by its next run date (epoch milliseconds). A gateway
        replica fires a cron by moving its score to the next date atomically
        (``loopline.api.crons.claim``), so one replica fires each tick."""
        return f"{self.prefix}:api:{{crons}}:next"

    @property
    def api_cron_firing(self) -> str:
        """Sorted set: ``cron_id/tick_ms`` of a tick claimed whose run is not yet
        recorded, scored by when it was claimed: a replica that dies between the claim
        and the run leaves it here, and another one starts the run (same run id)."""
        return f"{self.prefix}:api:{{crons}}:firing"

    # -- runs started later (``after_seconds``; loopline.api.delayed_runs) ---------------
    @property
    def api_delayed(self) -> str:
        """Sorted set: run id of a run asked to start later, scored by when it is due
        (epoch milliseconds). A gateway replica takes one by moving its score a lease
        ahead atomically (one replica starts it; another does if that one dies), and
        removes it once the run started. The delayed keys share one hash slot."""
        return f"{self.prefix}:api:{{delayed}}"

    @property
    def api_delayed_runs(self) -> str:
        """Hash: run id -> what starts the delayed run (its thread and request, JSON).
        Written by the run's route; read and emptied by the replica that starts it."""
        return f"{self.prefix}:api:{{delayed}}:runs"

    @property
    def api_webhooks(self) -> str:
        """Sorted set: run id of a run with a webhook not yet sent, scored by when to
        look at the run again (epoch milliseconds). Written with the run; read and
        emptied by the gateway replicas' senders."""
        return f"{self.prefix}:api:webhooks"

    def api_webhook(self, run_id: str) -> str:
        """String: the webhook URL of a run (until it is sent)."""
        return f"{self.prefix}:api:webhook:{{{run_id}}}"

    def api_webhook_lease(self, run_id: str) -> str:
        """String: the gateway replica that sends the run's webhook now (expires: a
        replica that dies while sending leaves it to another)."""
        return f"{self.prefix}:api:webhook:{{{run_id}}}:lease"

    @property
    def api_saver_runs(self) -> str:
        """Sorted set: run id of a thread's run not yet written to the deployment's
        checkpointer (PostgreSQL), scored by when to look at it again (epoch
        milliseconds). Written with the run; read and emptied by the gateway replicas'
        recorders (``loopline.api.thread_saver``)."""
        return f"{self.prefix}:api:saver-runs"

    def api_saver_lease(self, run_id: str) -> str:
        """String: the gateway replica that writes the run to the checkpointer now
        (expires: a replica that dies while writing leaves it to another)."""
        return f"{self.prefix}:api:saver-run:{{{run_id}}}:lease"

    @property
    def threads(self) -> str:
        """Sorted set: thread id scored by its last change (epoch seconds), for listing."""
        return f"{self.prefix}:threads"

    def agent(self, agent_id: str) -> str:
        """String: an agent spec (JSON), stored once under its content hash."""
        return f"{self.prefix}:agent:{agent_id}"

    @property
    def deployed(self) -> str:
        """Hash, the registry of deployed agents: ``NAME`` -> its latest version,
        ``NAME@VERSION`` -> the registration (``DeployedAgent`` JSON without its version),
        ``NAME#seq`` -> the last version number given. Written by the operator
        (``loopline deploy``); read by loop."""
        return f"{self.prefix}:deployed"

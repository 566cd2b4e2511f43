"""Thread-centric streaming, as langgraph-api 0.16 serves it, over the gateway's runs:

- ``POST /threads/{id}/commands``: one protocol command, JSON in and out
  (``{"id", "method", "params"}``; ``run.start`` starts a run of the thread, made if new,
  as ``runs.create`` does; ``input.respond`` answers the interrupt the thread waits on,
  as ``command={"resume": {interrupt_id: response}}`` does). The answer is an envelope
  ``{"type": "success", "id", "result", "meta"}`` or ``{"type": "error", "id", "error",
  "message"}``.
- ``POST /threads/{id}/stream/events``: the thread's runs as protocol events
  (``protocol_events``), filtered by the body's ``channels``; it replays from the oldest
  run that has not ended (else the newest) and follows the runs that come, until the
  client leaves. ``since`` (a ``seq`` the client saw) skips what it had.
- ``GET /threads/{id}/stream`` (``threads.join_stream``): the older thread stream, every
  frame of the runs going or to come (as ``/runs/{id}/stream`` sends them) and a
  ``metadata`` ``{"status": "run_done", "run_id"}`` when one ends.

A thin layer: runs are started, answered and read through ``runs`` and ``events`` as the
other routes do; this module only translates. The WebSocket form of the protocol and its
``subscription.*`` and ``agent.getTree`` commands are not served (over HTTP a client
subscribes by opening ``stream/events``; a graph is at ``GET /assistants/{id}/graph``):
they are refused with why.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from loopline.api.events import Failed, run_items
from loopline.api.gateway import gateway_of, tenant_of
from loopline.api.protocol_events import (
    BAD_CHANNELS,
    Event,
    RunEvents,
    Subscription,
    unsupported_channels,
)
from loopline.api.records import RunRecord
from loopline.api.run_errors import run_error
from loopline.api.runs import (
    Busy,
    RunRequest,
    run_status,
    start_run,
    thread_exists,
    was_stopped,
)
from loopline.api.sse import frame, run_frames, with_heartbeats
from loopline.api.tenant import NotFound, Tenant
from loopline.api.wire import BadRequest, dumps
from loopline.conversation import waiting_interrupts

SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
PROTOCOL_MODES = ["values", "updates", "messages", "custom", "tools"]
"""The stream-mode layer's modes a protocol stream is made from."""
RUN_START_MODES = ["values", "updates", "messages-tuple", "custom"]
"""A protocol run's stream modes, for a client that joins it with ``runs.join_stream``."""
DEFAULT_STRATEGY = "enqueue"
"""langgraph-api's ``run.start`` default (a thread-centric client queues its runs)."""
STRATEGIES = ("reject", "rollback", "interrupt", "enqueue")
NEW_RUNS_POLL_S = 0.2
"""How often a thread stream looks for a new run while none is going."""
THREAD_RUNS = 1000
"""The most runs of a thread a stream looks at."""
NOT_SERVED = {
    "subscription.subscribe": "over HTTP, subscribe by opening POST /threads/{id}/stream/events",
    "subscription.unsubscribe": "over HTTP, close the stream/events connection",
    "subscription.reconnect": "over HTTP, open stream/events again with since",
    "agent.getTree": "the graph is at GET /assistants/{assistant_id}/graph",
}
THREAD_STREAM_MODES = ("lifecycle", "run_modes", "state_update")
RUN_START_PARAMS = frozenset({"assistant_id", "input", "config", "metadata", "multitaskStrategy"})
RESPOND_PARAMS = frozenset({"interrupt_id", "namespace", "response", "responses"})


# -- commands -------------------------------------------------------------------------


async def commands(request: Request) -> Response:
    """``POST /threads/{thread_id}/commands``."""
    try:
        command = json.loads(await request.body())
    except ValueError:
        return JSONResponse({"detail": "Invalid JSON body"}, status_code=400)
    cmd_id = command.get("id") if isinstance(command, dict) else None
    if not isinstance(command, dict) or not isinstance(cmd_id, int) or isinstance(cmd_id, bool):
        return _refused(cmd_id, "Protocol commands must include an integer id and string method.")
    method = command.get("method")
    if not isinstance(method, str):
        return _refused(cmd_id, "Protocol commands must include an integer id and string method.")
    given = command.get("params")
    params: dict[str, Any] = given if isinstance(given, dict) else {}
    tenant = await tenant_of(request)
    thread_id = request.path_params["thread_id"]
    if method == "run.start":
        answer = await _run_start(tenant, thread_id, cmd_id, params)
    elif method == "input.respond":
        answer = await _input_respond(tenant, thread_id, cmd_id, params)
    elif method in NOT_SERVED:
        answer = error(cmd_id, "unsupported", f"{method} is not served: {NOT_SERVED[method]}")
    else:
        answer = error(cmd_id, "unknown_command", f"Unknown protocol command: {method}")
    return JSONResponse(answer)


def _not_taken(params: dict[str, Any], taken: frozenset[str]) -> str:
    """Why a command's parameters are refused: those it does not take (some of the
    protocol's, ``langsmith_tracer``, an input's ``update`` and ``goto``, are not
    implemented here), rather than ignored; "" when none."""
    others = sorted(k for k, v in params.items() if k not in taken and v is not None)
    return f"not supported by this gateway: {', '.join(others)}" if others else ""


def _refused(cmd_id: Any, message: str) -> Response:
    return JSONResponse(error(cmd_id, "invalid_argument", message), status_code=400)


def error(cmd_id: Any, code: str, message: str) -> dict[str, Any]:
    return {"type": "error", "id": cmd_id, "error": code, "message": message}


def success(cmd_id: int, result: dict[str, Any]) -> dict[str, Any]:
    # a command connection has seen no event (the HTTP transport keeps no session)
    return {"type": "success", "id": cmd_id, "result": result, "meta": {"applied_through_seq": 0}}


async def _run_start(
    tenant: Tenant, thread_id: str, cmd_id: int, params: dict[str, Any]
) -> dict[str, Any]:
    assistant_id = params.get("assistant_id")
    if not isinstance(assistant_id, str) or not assistant_id:
        return error(cmd_id, "invalid_argument", "run.start requires an assistant_id.")
    refused = _not_taken(params, RUN_START_PARAMS)
    if refused:
        return error(cmd_id, "invalid_argument", refused)
    strategy = params.get("multitaskStrategy", DEFAULT_STRATEGY)
    if strategy not in STRATEGIES:
        return error(cmd_id, "invalid_argument", f"multitaskStrategy must be one of {STRATEGIES}")
    body = {
        "assistant_id": assistant_id,
        "input": params.get("input"),
        "config": params.get("config") or {},
        "metadata": params.get("metadata") or {},
        "multitask_strategy": strategy,
        "if_not_exists": "create",
        "stream_mode": RUN_START_MODES,
    }
    return await _started(tenant, thread_id, cmd_id, body)


async def _started(
    tenant: Tenant, thread_id: str, cmd_id: int, body: dict[str, Any]
) -> dict[str, Any]:
    try:
        record = await start_run(tenant, thread_id, RunRequest.parse(body))
    except BadRequest as exc:
        return error(cmd_id, "invalid_argument", str(exc))
    except (NotFound, Busy) as exc:
        return error(cmd_id, "unknown_error", str(exc))
    return success(cmd_id, {"run_id": record.run_id})


async def _input_respond(
    tenant: Tenant, thread_id: str, cmd_id: int, params: dict[str, Any]
) -> dict[str, Any]:
    """Answers by interrupt id (one, or a batch in ``responses``) resume the thread's
    run that waits for them."""
    refused = _not_taken(params, RESPOND_PARAMS)
    if refused:
        return error(cmd_id, "invalid_argument", refused)
    entries = params.get("responses")
    if not isinstance(entries, list):
        entries = [params]
    answers: dict[str, Any] = {}
    for entry in entries:
        interrupt_id = entry.get("interrupt_id") if isinstance(entry, dict) else None
        if not isinstance(interrupt_id, str):
            return error(cmd_id, "invalid_argument", "input.respond requires an interrupt_id.")
        if entry.get("namespace", []) != []:  # loopline's runs have no subgraphs
            return error(cmd_id, "no_such_interrupt", "Interrupt namespace does not match.")
        answers[interrupt_id] = entry.get("response")
    record = await tenant.records.thread(thread_id)
    assistant_id = record.metadata.get("assistant_id") if record else None
    waiting = []
    if record is not None:
        waiting = await waiting_interrupts(tenant.client, await tenant.threads.current(thread_id))
    if not waiting or not isinstance(assistant_id, str):
        return error(cmd_id, "no_such_run", "No interrupted run is bound to this thread.")
    unknown = set(answers) - {str(w.interrupt.id) for w in waiting}
    if unknown:
        return error(
            cmd_id, "no_such_interrupt", f"Unknown or already-consumed interrupt: {min(unknown)}"
        )
    body = {"assistant_id": assistant_id, "command": {"resume": answers}}
    answered = await _started(tenant, thread_id, cmd_id, body)
    if answered["type"] == "success":
        answered["result"] = {}
    return answered


# -- the event stream -------------------------------------------------------------------


async def events(request: Request) -> Response:
    """``POST /threads/{thread_id}/stream/events``."""
    try:
        body = json.loads(await request.body())
    except ValueError:
        return JSONResponse({"detail": "Invalid JSON body"}, status_code=400)
    channels = body.get("channels") if isinstance(body, dict) else None
    if not isinstance(channels, list) or not channels:
        detail = "channels is required and must be a non-empty array"
        return JSONResponse({"detail": detail}, status_code=400)
    bad = unsupported_channels(channels)
    if bad:
        detail = f"channels contains unsupported entries: {', '.join(bad[:5])}. {BAD_CHANNELS}"
        return JSONResponse({"detail": detail}, status_code=400)
    depth = body.get("depth")
    depth = depth if isinstance(depth, int) and not isinstance(depth, bool) and depth >= 0 else None
    subscription = Subscription(frozenset(channels), _namespaces(body.get("namespaces")), depth)
    since = body.get("since")
    since = since if isinstance(since, int) and not isinstance(since, bool) else 0
    tenant = await tenant_of(request)
    thread_id = request.path_params["thread_id"]
    if not await thread_exists(tenant, thread_id):
        raise NotFound(f"Thread {thread_id} not found")
    frames = _event_frames(tenant, thread_id, subscription, since)
    stopping = gateway_of(request).stopping
    return StreamingResponse(
        with_heartbeats(frames, stopping=stopping),
        media_type="text/event-stream",
        headers=SSE_HEADERS,
    )


def _namespaces(value: Any) -> tuple[tuple[str, ...], ...] | None:
    if not isinstance(value, list):
        return None
    kept = tuple(
        tuple(ns) for ns in value if isinstance(ns, list) and all(isinstance(s, str) for s in ns)
    )
    return kept or None


async def _event_frames(
    tenant: Tenant, thread_id: str, subscription: Subscription, since: int
) -> AsyncIterator[bytes]:
    seq = 0  # counts every event, wanted or not: an event's seq is the same whatever
    # the filter, as langgraph-api numbers them (a client may reconnect with another)
    async for run in thread_runs(tenant, thread_id):
        async for event in run_events(tenant, run):
            seq += 1
            if seq > since and subscription.wants(event):
                yield frame_of({**event, "seq": seq})


def frame_of(event: Event) -> bytes:
    """An event as langgraph-api frames it: ``event: <method>``, ``id: <seq>``."""
    return f"event: {event['method']}\ndata: {dumps(event)}\nid: {event['seq']}\n\n".encode()


async def run_events(tenant: Tenant, record: RunRecord) -> AsyncIterator[Event]:
    """One run's protocol events, from its start until it ends."""
    translated = RunEvents(record.run_id, record.assistant_id.partition("@")[0])
    try:
        for event in translated.started():
            yield event
        async for source, position, item in run_items(tenant, record, PROTOCOL_MODES):
            place = f"{source}:{position[0]}-{position[1]}.{position[2]}"
            if isinstance(item, Failed):
                if await was_stopped(tenant, record.task_id):
                    break
                for event in await translated.failed(run_error(item.event)):
                    yield event
                return
            for event in await translated.item(place, item):
                yield event
        for event in await translated.finished(await _ended_as(tenant, record)):
            yield event
    finally:
        translated.close()


async def _ended_as(tenant: Tenant, record: RunRecord) -> str:
    """``completed``, or ``interrupted``: a human is asked, or the run was stopped."""
    try:
        status = await run_status(tenant, record)
    except NotFound:  # rolled back
        return "interrupted"
    return "completed" if status == "success" else "interrupted"


async def thread_runs(
    tenant: Tenant, thread_id: str, *, from_start: bool = True
) -> AsyncIterator[RunRecord]:
    """The thread's runs in order, from the oldest that has not ended (else the newest;
    ``from_start`` False: none of those that ended), then each new one as it comes."""
    seen: set[str] = set()
    first = True
    while True:
        ids = list(reversed(await tenant.records.run_ids(thread_id, 0, THREAD_RUNS)))
        records = [r for r in [await tenant.records.run(i) for i in ids if i not in seen] if r]
        if first:
            records = await _replayed(tenant, records, from_start)
            seen.update(ids)
            first = False
        if not records:
            await asyncio.sleep(NEW_RUNS_POLL_S)
            continue
        for record in records:
            seen.add(record.run_id)
            yield record


async def _replayed(tenant: Tenant, records: list[RunRecord], from_start: bool) -> list[RunRecord]:
    for k, record in enumerate(records):
        try:
            going = await run_status(tenant, record) in ("pending", "running")
        except NotFound:
            continue
        if going:
            return records[k:]
    return records[-1:] if from_start else []


# -- the older thread stream ------------------------------------------------------------


async def join_stream(request: Request) -> Response:
    """``GET /threads/{thread_id}/stream``: ``stream_modes`` (as langgraph-api reads it;
    ``run_modes`` by default) ``lifecycle`` gives only the runs' ``metadata``."""
    modes = _thread_modes(request.query_params.get("stream_modes"))
    if request.headers.get("last-event-id"):
        raise BadRequest("last-event-id is not supported on a thread's stream (join a run's)")
    tenant = await tenant_of(request)
    thread_id = request.path_params["thread_id"]
    if not await thread_exists(tenant, thread_id):
        raise NotFound(f"Thread {thread_id} not found")
    stopping = gateway_of(request).stopping
    return StreamingResponse(
        with_heartbeats(_thread_frames(tenant, thread_id, modes), stopping=stopping),
        media_type="text/event-stream",
        headers=SSE_HEADERS,
    )


def _thread_modes(given: str | None) -> list[str]:
    if not given:
        return ["run_modes"]
    modes = [m.strip() for m in given.split(",")]
    for mode in modes:
        if mode not in THREAD_STREAM_MODES:
            raise BadRequest(f"Invalid stream mode: {mode}")
    return modes


END = frame("end", None)


async def _thread_frames(tenant: Tenant, thread_id: str, modes: list[str]) -> AsyncIterator[bytes]:
    async for run in thread_runs(tenant, thread_id, from_start=False):
        if "run_modes" in modes:
            async for chunk in run_frames(tenant, run, run.stream_mode, None):
                if chunk != END:
                    yield chunk
        elif "lifecycle" in modes:
            yield frame("metadata", {"run_id": run.run_id, "attempt": 1})
            await _until_ended(tenant, run)
        if "run_modes" in modes or "lifecycle" in modes:
            yield frame("metadata", {"status": "run_done", "run_id": run.run_id})


async def _until_ended(tenant: Tenant, record: RunRecord) -> None:
    async for _ in run_items(tenant, record, []):
        pass

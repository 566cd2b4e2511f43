"""Observability: OpenTelemetry traces across services, Prometheus metrics, JSON logs.

All three are off unless configured, so the hot path pays one boolean check:

- traces: ``OTEL_EXPORTER_OTLP_ENDPOINT`` (OTLP over HTTP, when the exporter package is
  installed) or ``LOOPLINE_TRACE_FILE`` (one JSON span per line: for tests and quick
  looks). The trace context travels in each event's ``trace`` field (W3C traceparent), so
  one task is one trace across every service and process.
- metrics: ``LOOPLINE_METRICS_PORT`` serves Prometheus metrics per process: entries
  received, processed and failed, handler latency per stage, tasks in flight, tokens,
  edits, todo updates, dead letters.
- logs: ``LOOPLINE_LOG_FORMAT=json`` prints one JSON object per line with the task id of
  the entry being handled.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

_task_id: contextvars.ContextVar[str] = contextvars.ContextVar("loopline_task_id", default="")
_tracer: Any = None
_metrics: dict[str, Any] = {}
_lock = threading.Lock()
_configured = False

TRACING = False
METRICS = False


def configure(service: str) -> None:
    """Set up what the environment asks for (once per process)."""
    global _configured, TRACING, METRICS, _tracer
    with _lock:
        if _configured:
            return
        _configured = True
        if os.environ.get("LOOPLINE_LOG_FORMAT") == "json":
            handler = logging.StreamHandler()
            handler.setFormatter(JsonFormatter())
            root = logging.getLogger()
            root.handlers = [handler]
        trace_file = os.environ.get("LOOPLINE_TRACE_FILE")
        endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        if trace_file or endpoint:
            _tracer = _make_tracer(service, trace_file, endpoint)
            TRACING = _tracer is not None
        port = os.environ.get("LOOPLINE_METRICS_PORT")
        if port:
            _start_metrics(int(port))
            METRICS = True


def _make_tracer(service: str, trace_file: str | None, endpoint: str | None) -> Any:
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": f"loopline-{service}"}))
    if trace_file:
        provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(trace_file)))
    if endpoint:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError:
            logging.getLogger("loopline").warning(
                "OTEL_EXPORTER_OTLP_ENDPOINT is set but opentelemetry-exporter-otlp is not "
                "installed: no OTLP export"
            )
        else:
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return trace.get_tracer("loopline")


class FileSpanExporter(SpanExporter):
    """Appends finished spans as JSON lines (one file shared by every process)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Any) -> SpanExportResult:
        lines = []
        for span in spans:
            ctx = span.get_span_context()
            lines.append(
                json.dumps(
                    {
                        "name": span.name,
                        "trace_id": format(ctx.trace_id, "032x"),
                        "span_id": format(ctx.span_id, "016x"),
                        "parent_id": format(span.parent.span_id, "016x") if span.parent else None,
                        "service": span.resource.attributes.get("service.name"),
                        "attributes": dict(span.attributes or {}),
                        "start": span.start_time,
                        "end": span.end_time,
                    }
                )
            )
        with open(self.path, "a") as fh:
            fh.write("".join(line + "\n" for line in lines))
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def traceparent() -> str | None:
    """The current span as a W3C traceparent, to put in an outgoing event."""
    if not TRACING:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent")


def task_in_hand() -> str:
    """The task of the entry this context handles ("" outside one)."""
    return _task_id.get()


@contextmanager
def consuming(service: str, stream: str, event: Any) -> Iterator[None]:
    """Around one handled entry: its span (child of the event's trace), its metrics and
    the task id for the logs."""
    token = _task_id.set(str(getattr(event, "task_id", "")))
    started = time.perf_counter()
    outcome = "processed"
    try:
        if TRACING:
            with _span(service, stream, event):
                yield
        else:
            yield
    except BaseException:
        outcome = "failed"
        raise
    finally:
        _task_id.reset(token)
        if METRICS:
            kind = str(getattr(event, "type", "unknown"))
            _metrics["entries"].labels(service, kind, outcome).inc()
            _metrics["latency"].labels(service, kind).observe(time.perf_counter() - started)
            observe_event(event)


@contextmanager
def _span(service: str, stream: str, event: Any) -> Iterator[None]:
    from opentelemetry.trace import SpanKind
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    parent = None
    carrier = getattr(event, "trace", None)
    if carrier:
        parent = TraceContextTextMapPropagator().extract({"traceparent": carrier})
    attributes = {
        "loopline.task_id": str(getattr(event, "task_id", "")),
        "loopline.stream": stream,
        "loopline.step": int(getattr(event, "step", 0) or 0),
        **run_attributes(event),
    }
    with _tracer.start_as_current_span(
        f"{service} {getattr(event, 'type', '?')}",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes=attributes,
    ):
        yield


def run_attributes(event: Any) -> dict[str, Any]:
    """A run's LangChain config on its span (``TaskSubmitted``: thread, ``run_name``,
    ``tags``, ``metadata``), under the names LangChain's tracers use."""
    if getattr(event, "type", "") != "TaskSubmitted":
        return {}
    found: dict[str, Any] = {}
    if event.thread_id:
        found["loopline.thread_id"] = event.thread_id
    if event.run_name:
        found["langchain.run_name"] = event.run_name
    if event.tags:
        found["langchain.tags"] = list(event.tags)
    for key, value in event.metadata.items():
        found[f"langchain.metadata.{key}"] = (
            value if isinstance(value, str | int | float | bool) else json.dumps(value, default=str)
        )
    return found


def _start_metrics(port: int) -> None:
    from prometheus_client import Counter, Gauge, Histogram, start_http_server

    _metrics["entries"] = Counter(
        "loopline_entries_total", "Stream entries handled", ["service", "event", "outcome"]
    )
    _metrics["latency"] = Histogram(
        "loopline_handler_seconds", "Handler latency per stage", ["service", "event"]
    )
    _metrics["tokens"] = Counter("loopline_tokens_total", "Model tokens", ["direction"])
    _metrics["tasks"] = Gauge("loopline_tasks_in_flight", "Tasks started and not finished")
    _metrics["edits"] = Counter("loopline_context_edits_total", "Context edits published")
    _metrics["todos"] = Counter("loopline_todo_updates_total", "Todo lists accepted")
    _metrics["dlq"] = Counter("loopline_dead_letters_total", "Entries dead-lettered")
    start_http_server(port)


def observe_event(event: Any) -> None:
    """Domain counters from what flowed through (only events this process handled)."""
    kind = getattr(event, "type", "")
    if kind == "TaskSubmitted":
        _metrics["tasks"].inc()
    elif kind == "ModelResponded":
        usage = getattr(event.message, "usage_metadata", None) or {}
        _metrics["tokens"].labels("input").inc(int(usage.get("input_tokens", 0)))
        _metrics["tokens"].labels("output").inc(int(usage.get("output_tokens", 0)))


def count(name: str, amount: int = 1) -> None:
    if METRICS and name in _metrics:
        if name == "tasks":
            _metrics[name].dec(amount)
        else:
            _metrics[name].inc(amount)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        task_id = _task_id.get()
        if task_id:
            entry["task_id"] = task_id
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)

"""Traces across hosts: OpenTelemetry, off unless ``JOBSERVICE_OTLP_ENDPOINT`` is set.

Each process sets up its own tracer provider after it forks (a ``BatchSpanProcessor``'s thread does
not survive a fork): the API in ``create_app``, which gunicorn runs in each of its workers; a worker
in its Celery child (``worker_process_init``); the beat when its Celery worker starts. The maintained
instrumentations do the rest: Flask (a span per request), Celery (per task and publish), SQLAlchemy
(per query, on each engine made after the set-up: ``jobservice.db`` makes its lazily), botocore (per
object-store call) and requests (per outgoing call, with the ``traceparent`` header).

A job is dispatched long after, and often far from, the request that submitted it, so its Celery
message is no reliable carrier: the submitting request's W3C trace context is stored on the job row
(``jobs.trace_context``) and the worker that claims the job continues that trace (``JobSpan``), as do
its webhooks (``continued``). A client call with no operation around it (a heartbeat's query, the
maintenance loop's) starts no trace of its own (``OrphanClientCallsDropped``).

Without the ``tracing`` extra, or with no endpoint, every function here is a no-op; the import of
OpenTelemetry happens only when tracing is on.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import socket
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from jobservice import __version__
from jobservice.logs import trace_log_context

if TYPE_CHECKING:
    from jobservice.settings import Settings

log = logging.getLogger(__name__)
TRACES_PATH = "/v1/traces"
REQUEST_ID_ATTRIBUTE = "jobservice.request_id"
_lock = threading.Lock()
_pid: int | None = None  # the process whose provider is set up (a forked child sets up its own)
_provider: Any = None


class TracingUnavailable(RuntimeError):
    """An OTLP endpoint is set but OpenTelemetry is not installed."""


def active() -> bool:
    """Whether this process records traces."""
    return _pid == os.getpid() and _provider is not None


def init_process(settings: Settings, *, service: str) -> bool:
    """Set up this process's tracing when ``settings`` name an OTLP endpoint (once per process; call
    it after the fork). Returns whether tracing is on."""
    global _pid, _provider
    if not settings.otlp_endpoint:
        return False
    with _lock:
        if _pid == os.getpid():
            return True
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError as exc:
            raise TracingUnavailable(
                "JOBSERVICE_OTLP_ENDPOINT is set but OpenTelemetry is not installed: "
                f"pip install 'jobservice[tracing]' ({exc})"
            ) from None
        resource = Resource.create(
            {
                "service.name": service,
                "service.version": __version__,
                "service.instance.id": f"{socket.gethostname()}:{os.getpid()}",
                "host.name": socket.gethostname(),
            }
        )
        provider = TracerProvider(resource=resource, sampler=_sampler(settings.trace_sample_ratio))
        exporter = OTLPSpanExporter(
            endpoint=traces_url(settings.otlp_endpoint), headers=settings.otlp_headers
        )
        provider.add_span_processor(BatchSpanProcessor(exporter))
        # The provider is handed to each instrumentation rather than made OpenTelemetry's global one,
        # which may be set once per process: a forked child's would be its parent's.
        _instrument_libraries(provider)
        _pid, _provider = os.getpid(), provider
        atexit.register(shutdown)
    log.info("tracing on: spans of %s go to %s", service, traces_url(settings.otlp_endpoint))
    return True


def traces_url(endpoint: str) -> str:
    """``<endpoint>/v1/traces`` (an endpoint that already ends so is kept)."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith(TRACES_PATH) else endpoint + TRACES_PATH


def _sampler(ratio: float) -> Any:
    from opentelemetry.sdk.trace.sampling import (
        Decision,
        ParentBased,
        Sampler,
        SamplingResult,
        TraceIdRatioBased,
    )
    from opentelemetry.trace import SpanKind

    class OrphanClientCallsDropped(Sampler):
        """A new trace for an operation, never for a lone client call (a query, an S3 call, a
        request) that no operation of ours is around: the heartbeats' and the maintenance loop's
        queries would otherwise be thousands of one-span traces."""

        def __init__(self, ratio: float) -> None:
            self._ratio = TraceIdRatioBased(ratio)

        def should_sample(
            self, parent_context: Any, trace_id: int, name: str, *args: Any, **kwargs: Any
        ) -> Any:
            kind = kwargs.get("kind", args[0] if args else None)
            if kind == SpanKind.CLIENT:
                return SamplingResult(Decision.DROP)
            return self._ratio.should_sample(parent_context, trace_id, name, *args, **kwargs)

        def get_description(self) -> str:
            return f"OrphanClientCallsDropped({self._ratio.get_description()})"

    return ParentBased(root=OrphanClientCallsDropped(ratio))


def _instrument_libraries(provider: Any) -> None:
    """The library-wide instrumentations, bound to this process's ``provider``: Celery, botocore,
    requests, and SQLAlchemy (every engine made from now on: ``jobservice.db`` makes a process's engine
    on its first query, after this). Flask's is per app (``instrument_app``)."""
    from opentelemetry.instrumentation.botocore import BotocoreInstrumentor
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.requests import RequestsInstrumentor
    from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor

    for instrumentor in (
        CeleryInstrumentor(),
        BotocoreInstrumentor(),
        RequestsInstrumentor(),
        SQLAlchemyInstrumentor(),
    ):
        if instrumentor.is_instrumented_by_opentelemetry:  # by the process this one forked from
            instrumentor.uninstrument()
        # skip_dep_check: the SQLAlchemy instrumentation declares support below 2.1, and this service
        # runs 2.1 (the engine events it listens to are unchanged there; test_tracing_e2e.py sees them).
        instrumentor.instrument(tracer_provider=provider, skip_dep_check=True, enable_commenter=False)


def _tracer() -> Any:
    return _provider.get_tracer("jobservice", __version__)


def instrument_app(app: Any) -> None:
    """A span per Flask request (health checks and /metrics left out), with its X-Request-Id."""
    if not active():
        return
    from opentelemetry.instrumentation.flask import FlaskInstrumentor

    def with_request_id(span: Any, environ: Mapping[str, Any]) -> None:
        request_id = environ.get(REQUEST_ID_ENVIRON)
        if request_id and span.is_recording():
            span.set_attribute(REQUEST_ID_ATTRIBUTE, request_id)

    FlaskInstrumentor().instrument_app(
        app, excluded_urls="healthz,readyz,metrics", request_hook=with_request_id, tracer_provider=_provider
    )


REQUEST_ID_ENVIRON = "jobservice.request_id"  # where the request policy leaves the request's id


def shutdown() -> None:
    """Export what is left and stop this process's exporter (a child about to exit)."""
    global _pid, _provider
    with _lock:
        provider, mine = _provider, _pid == os.getpid()
        _pid, _provider = None, None
    if provider is not None and mine:
        provider.shutdown()


def traceparent(context: dict[str, str] | None) -> str | None:
    """The ``traceparent`` of a stored trace context (``jobs.trace_context``), if any: what a job's
    dispatch message carries to its worker."""
    found = (context or {}).get("traceparent")
    return found if isinstance(found, str) and found else None


def current_context() -> dict[str, str] | None:
    """The W3C trace context of the current span (``traceparent``, ``tracestate``), to be stored
    with what outlives it (a job row); None when no trace is being recorded."""
    if not active():
        return None
    from opentelemetry import trace
    from opentelemetry.propagate import inject

    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    inject(carrier)
    return {k: v for k, v in carrier.items() if k in {"traceparent", "tracestate"}} or None


@contextlib.contextmanager
def continued(stored: Mapping[str, str] | None, name: str, **attributes: Any) -> Iterator[None]:
    """Run the block in a span ``name`` that continues the trace ``stored`` (``current_context``'s
    value; None: a new trace)."""
    if not active():
        yield
        return
    from opentelemetry.propagate import extract

    parent = extract(dict(stored)) if stored else None
    with _tracer().start_as_current_span(name, context=parent, attributes=_clean(attributes)):
        yield


def _clean(attributes: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: v if isinstance(v, bool | int | float | str) else str(v)
        for k, v in attributes.items()
        if v is not None
    }


class JobSpan:
    """A job's run on a worker, as a span of the trace that submitted it: started at the claim, made
    current on whichever thread works on the job (the task's, then the finisher's), ended with the
    job's outcome. A no-op when tracing is off."""

    def __init__(self, stored: Mapping[str, str] | None, name: str, **attributes: Any) -> None:
        self._span: Any = None
        if not active():
            return
        from opentelemetry import trace
        from opentelemetry.propagate import extract

        parent = extract(dict(stored)) if stored else None
        links = []
        around = trace.get_current_span().get_span_context()  # the Celery task that carried it
        if around.is_valid:
            links.append(trace.Link(around))
        self._span = _tracer().start_span(
            name, context=parent, kind=trace.SpanKind.CONSUMER, attributes=_clean(attributes), links=links
        )

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        """Make the job's span the current one in this thread for the block."""
        if self._span is None:
            yield
            return
        from opentelemetry import context, trace

        token = context.attach(trace.set_span_in_context(self._span))
        ids = self._span.get_span_context()
        try:
            # The job's other threads (its heartbeat) start in no span: their lines name this one.
            with trace_log_context(format(ids.trace_id, "032x"), format(ids.span_id, "016x")):
                yield
        finally:
            context.detach(token)

    def end(self, outcome: str) -> None:
        """End the span with the run's outcome (``succeeded``, ``failed``, ``lease_lost`` ...)."""
        if self._span is None:
            return
        from opentelemetry.trace import Status, StatusCode

        self._span.set_attribute("jobservice.outcome", outcome)
        if outcome not in {"succeeded", "finished", "canceled"}:
            self._span.set_status(Status(StatusCode.ERROR, outcome))
        self._span.end()
        self._span = None

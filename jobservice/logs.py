"""Process logging: one set-up for every process, and log lines that name the job they belong to.

``configure_logging`` is called once by each entry point (the API factory, the worker bootstrap,
the CLI); ``JOBSERVICE_LOG_FORMAT=json`` switches every handler to one JSON object per line.
``job_log_context`` marks the code that runs one attempt of one job: every record logged inside
it, by any logger, carries ``job_id`` and ``attempt``. With tracing on (``jobservice.tracing``) every
record written inside a span carries its ``trace_id`` and ``span_id`` too, so a line leads to its
trace and back. A leaf module: it imports nothing of the project, so anything may import it.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Literal

try:  # the tracing extra; without it no record is inside a span
    from opentelemetry import trace as _otel_trace
except ImportError:  # pragma: no cover - depends on the extras installed
    _otel_trace = None  # type: ignore[assignment]

LogFormat = Literal["text", "json"]

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s%(job_tag)s: %(message)s"

_current: contextvars.ContextVar[tuple[str, int] | None]
_current = contextvars.ContextVar("jobservice_job", default=None)
# A worker process runs one job at a time, but the threads that serve it (heartbeat, encoder
# probes, model-process watchers) start with an empty context; they fall back to this.
_process_job: tuple[str, int] | None = None
_process_trace: tuple[str, str] | None = None  # likewise the span of the job it runs (tracing on)
_process_lock = threading.Lock()


@contextlib.contextmanager
def job_log_context(job_id: object, attempt: int) -> Iterator[None]:
    """Tag every log record written inside the block (and by this process's threads) with the job."""
    global _process_job
    value = (str(job_id), int(attempt))
    token = _current.set(value)
    with _process_lock:
        previous, _process_job = _process_job, value
    try:
        yield
    finally:
        _current.reset(token)
        with _process_lock:
            _process_job = previous


def current_job() -> tuple[str, int] | None:
    """The (job id, attempt) this code runs for, or None outside a job."""
    return _current.get() or _process_job


@contextlib.contextmanager
def trace_log_context(trace_id: str, span_id: str) -> Iterator[None]:
    """Lines this process's threads write in no span of their own (a job's heartbeat) name this one
    (``jobservice.tracing.JobSpan`` sets it while its job runs), as ``job_log_context`` does the job."""
    global _process_trace
    with _process_lock:
        previous, _process_trace = _process_trace, (trace_id, span_id)
    try:
        yield
    finally:
        with _process_lock:
            _process_trace = previous


def current_trace() -> tuple[str, str] | None:
    """The (trace id, span id) of the span this code runs in, as hex, else of the job this process
    runs, or None outside both."""
    if _otel_trace is not None:
        context = _otel_trace.get_current_span().get_span_context()
        if context.is_valid:
            return format(context.trace_id, "032x"), format(context.span_id, "016x")
    return _process_trace


class JobContextFilter(logging.Filter):
    """Adds ``job_id``, ``attempt``, a ready-made ``job_tag``, and the ``trace_id`` and ``span_id`` of the
    current span, to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Tag ``record`` with the job this thread is running and the span it runs in, if any."""
        job = current_job()
        record.job_id = job[0] if job else None
        record.attempt = job[1] if job else None
        record.job_tag = f" [job {job[0]} attempt {job[1]}]" if job else ""
        if not hasattr(record, "trace_id"):  # the handler's filter runs in the thread that logged
            span = current_trace()
            record.trace_id, record.span_id = span if span else (None, None)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, job id and attempt, trace and span ids,
    exception."""

    def format(self, record: logging.LogRecord) -> str:
        """``record`` as one JSON object."""
        payload: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
        }
        job_id = getattr(record, "job_id", None)
        if job_id is not None:
            payload["job_id"] = job_id
            payload["attempt"] = getattr(record, "attempt", None)
        trace_id = getattr(record, "trace_id", None)
        if trace_id is not None:
            payload["trace_id"] = trace_id
            payload["span_id"] = getattr(record, "span_id", None)
        if record.exc_info:
            payload["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(payload, ensure_ascii=False, default=str)


def make_formatter(fmt: LogFormat) -> logging.Formatter:
    """The formatter for ``fmt`` (text lines carry ``[job … attempt …]`` when a job runs)."""
    return JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT)


def install_on(handler: logging.Handler, fmt: LogFormat) -> None:
    """Give an existing handler (gunicorn's, Celery's) our formatter and the job filter."""
    handler.setFormatter(make_formatter(fmt))
    if not any(isinstance(f, JobContextFilter) for f in handler.filters):
        handler.addFilter(JobContextFilter())


def configure_logging(level: str = "INFO", fmt: LogFormat = "text") -> None:
    """Set up the root logger of this process: one stderr handler, our format, the job filter."""
    root = logging.getLogger()
    ours: list[logging.Handler] = [h for h in root.handlers if getattr(h, "jobservice", False)]
    if not ours and not root.handlers:
        stream = logging.StreamHandler()
        stream.jobservice = True  # type: ignore[attr-defined]
        root.addHandler(stream)
        ours = [stream]
    for handler in ours:
        install_on(handler, fmt)
    for other in root.handlers:  # a host's handlers (pytest's, an embedding app's) get the ids too
        if not any(isinstance(f, JobContextFilter) for f in other.filters):
            other.addFilter(JobContextFilter())
    root.setLevel(level.upper())

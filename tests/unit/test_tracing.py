"""Tracing (jobservice.tracing) off by default and what it leaves in logs; the end-to-end trace across
processes is tests/integration/test_tracing_e2e.py."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind

from jobservice import tracing
from jobservice.logs import JobContextFilter, JsonFormatter
from tests.conftest import make_settings


def _line(message: str) -> dict[str, object]:
    record = logging.LogRecord("jobservice.test", logging.INFO, __file__, 1, message, None, None)
    JobContextFilter().filter(record)
    line: dict[str, object] = json.loads(JsonFormatter().format(record))
    return line


def test_off_without_an_endpoint_and_everything_is_a_no_op(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "var")
    assert settings.otlp_endpoint is None
    assert tracing.init_process(settings, service="jobservice-test") is False
    assert not tracing.active()
    assert tracing.current_context() is None
    span = tracing.JobSpan({"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}, "job.run")
    with span.current():
        assert "trace_id" not in _line("inside a job's span, tracing off")
    span.end("succeeded")


def test_a_json_line_written_inside_a_span_names_its_trace_and_span() -> None:
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("work") as span:
        line = _line("inside")
        context = span.get_span_context()
    assert line["trace_id"] == format(context.trace_id, "032x")
    assert line["span_id"] == format(context.span_id, "016x")
    assert "trace_id" not in _line("outside")


def test_a_lone_client_call_starts_no_trace_but_an_operation_does() -> None:
    provider = TracerProvider(sampler=tracing._sampler(1.0))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("SELECT", kind=SpanKind.CLIENT) as orphan:
        assert not orphan.is_recording()  # a heartbeat's query, alone
    with tracer.start_as_current_span("POST /jobs", kind=SpanKind.SERVER) as request:
        assert request.is_recording()
        with tracer.start_as_current_span("INSERT", kind=SpanKind.CLIENT) as query:
            assert query.is_recording()  # inside an operation: kept


def test_the_traces_path_is_added_once() -> None:
    assert tracing.traces_url("http://otel:4318") == "http://otel:4318/v1/traces"
    assert tracing.traces_url("http://otel:4318/v1/traces/") == "http://otel:4318/v1/traces"


def test_a_jobs_other_threads_name_its_span_in_their_lines() -> None:
    import threading

    from jobservice.logs import trace_log_context

    seen: list[dict[str, object]] = []
    with trace_log_context("a" * 32, "b" * 16):  # as JobSpan.current() sets it while the job runs
        heartbeat = threading.Thread(target=lambda: seen.append(_line("heartbeat failed; retrying")))
        heartbeat.start()
        heartbeat.join()
    assert (seen[0]["trace_id"], seen[0]["span_id"]) == ("a" * 32, "b" * 16)
    assert "trace_id" not in _line("after the job")

"""Settings of traces across hosts (``jobservice.tracing``): off unless an OTLP endpoint is given."""

from __future__ import annotations

from pydantic import BaseModel, Field


class TracingSettings(BaseModel):
    """Tracing.

    Read by every process (the API's gunicorn workers, the workers' Celery children, the beat) after it
    forks. Needs the ``tracing`` extra (``pip install 'jobservice[tracing]'``: OpenTelemetry's SDK,
    its OTLP/HTTP exporter and the Flask, Celery, SQLAlchemy, botocore and requests instrumentations).
    """

    otlp_endpoint: str | None = Field(
        default=None,
        description="An OpenTelemetry collector's OTLP/HTTP endpoint, e.g. http://otel-collector:4318 "
        "(spans go to <endpoint>/v1/traces). Unset: no traces, and nothing of OpenTelemetry is loaded.",
    )
    otlp_headers: dict[str, str] = Field(
        default_factory=dict,
        description="Headers sent with every export, a JSON object (a tracing vendor's API key: give it "
        "as JOBSERVICE_OTLP_HEADERS_FILE, a mounted secret).",
    )
    trace_sample_ratio: float = Field(
        default=1.0,
        ge=0,
        le=1,
        description="Share of new traces recorded; a request whose traceparent says its caller records "
        "follows the caller.",
    )

"""One trace from ``POST /jobs`` to ``succeeded`` across the API and worker processes.

A real API (``jobservice api``: gunicorn, its worker forked) and a real worker (``jobservice worker``:
Celery, its child forked) export to a test OTLP/HTTP receiver here, which decodes what they send with
OpenTelemetry's own protobuf classes: the collector's contract, not a stand-in of ours.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.conftest import MOTO_CREDENTIALS, ROOT, free_port
from tests.integration.conftest import build_stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@dataclass(frozen=True)
class Span:
    service: str
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    kind: int
    attributes: dict[str, Any]
    links: tuple[tuple[str, str], ...]  # (trace id, span id) of each linked span


class Receiver:
    """An OTLP/HTTP trace receiver (POST /v1/traces, protobuf) that keeps every span it is sent."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                ok = (
                    self.path == "/v1/traces" and self.headers.get("Content-Type") == "application/x-protobuf"
                )
                if ok:
                    receiver.take(body)
                self.send_response(200 if ok else 400)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        found = []
        for resource_spans in request.resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    attributes = {a.key: _value(a.value) for a in span.attributes}
                    found.append(
                        Span(
                            service=resource.get("service.name", ""),
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            name=span.name,
                            kind=span.kind,
                            attributes=attributes,
                            links=tuple((link.trace_id.hex(), link.span_id.hex()) for link in span.links),
                        )
                    )
        with self.lock:
            self.spans.extend(found)

    def of_trace(self, trace_id: str) -> list[Span]:
        with self.lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def test_one_trace_spans_the_api_and_the_worker_from_submission_to_succeeded(
    tmp_path: Path, receiver: Receiver, moto_server: str
) -> None:
    stack = build_stack(
        tmp_path,
        log_format="json",
        otlp_endpoint=receiver.endpoint,
        storage_backend="s3",  # the object store over HTTP (moto's server): botocore's spans
        s3_bucket=f"traces-{uuid.uuid4().hex[:12]}",
        s3_endpoint_url=moto_server,
        s3_access_key_id=MOTO_CREDENTIALS["aws_access_key_id"],
        s3_secret_access_key=MOTO_CREDENTIALS["aws_secret_access_key"],
    )
    stack.env["OTEL_BSP_SCHEDULE_DELAY"] = "200"  # export every 0.2 s, not 5 s
    port = free_port()
    api_log = tmp_path / "api.log"
    with api_log.open("wb") as out:
        api = subprocess.Popen(
            [sys.executable, "-m", "jobservice.cli.main", "api", "--port", str(port), "--workers", "1"],
            env=stack.env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        worker = stack.start_worker("traced", extra_env={"OTEL_BSP_SCHEDULE_DELAY": "200"})
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while True:
            try:
                if requests.get(f"{url}/healthz", timeout=5).status_code == 200:
                    break
            except requests.RequestException:  # not listening yet, or slow to answer on a busy host
                pass
            assert time.monotonic() < deadline, f"the API did not come up:\n{api_log.read_text()[-3000:]}"
            time.sleep(0.2)
        submitted = requests.post(
            f"{url}/jobs",
            json={"model": "fake-good", "num_frames": 12, "fps": 12},
            headers={"X-Request-Id": "trace-e2e-1"},
            timeout=30,
        )
        assert submitted.status_code == 202, submitted.text
        assert submitted.headers["X-Request-Id"] == "trace-e2e-1"  # echoed
        job_id = submitted.json()["id"]
        job = stack.wait(job_id, timeout=90)
        assert job.status == "succeeded", (job.error_code, job.error_message)
        stored = job.trace_context
        assert stored and stored["traceparent"].startswith("00-")
        trace_id = stored["traceparent"].split("-")[1]

        # The worker's job.run span ends after the job's finishing; its batch goes out 0.2 s later.
        deadline = time.monotonic() + 30
        spans: list[Span] = []
        while time.monotonic() < deadline:
            spans = receiver.of_trace(trace_id)
            if any(s.name == "job.run" for s in spans):
                break
            time.sleep(0.2)
    finally:
        api.terminate()
        api.wait(timeout=30)
        stack.close()

    by_id = {s.span_id: s for s in spans}
    (post,) = [
        s for s in spans if s.service == "jobservice-api" and s.kind == 2 and "/jobs" in s.name
    ]  # SERVER
    assert post.attributes["jobservice.request_id"] == "trace-e2e-1"
    (run,) = [s for s in spans if s.name == "job.run"]
    assert run.service == "jobservice-worker"
    assert run.attributes["jobservice.job_id"] == job_id
    assert run.attributes["jobservice.outcome"] == "succeeded"
    # job.run continues the request: its ancestors lead to POST /jobs, in the API's process.
    ancestor = by_id.get(run.parent_id)
    while ancestor is not None and ancestor is not post:
        ancestor = by_id.get(ancestor.parent_id)
    assert ancestor is post, [(s.service, s.name) for s in spans]
    # The worker's own work (its queries: claim, progress, the final transition) is inside the run.
    inside = [s for s in spans if s.service == "jobservice-worker" and s.parent_id == run.span_id]
    assert any(s.attributes.get("db.system") or s.attributes.get("db.system.name") for s in inside), [
        (s.service, s.name, s.parent_id == run.span_id, s.attributes) for s in spans
    ]
    assert {"jobservice-api", "jobservice-worker"} <= {s.service for s in spans}
    # The output went to the object store inside the run: S3 calls of the worker, in the job's trace.
    stored_output = [
        s for s in spans if s.service == "jobservice-worker" and s.attributes.get("rpc.service") == "S3"
    ]
    assert any(s.attributes.get("rpc.method") == "PutObject" for s in stored_output), {
        (s.name, s.attributes.get("rpc.method")) for s in spans
    }

    # The worker's JSON lines of the job's run carry the trace's id and the span they were written in.
    # The claim comes first, inside the Celery task that carried the job (a trace of the dispatch,
    # until the message carries the job's context): job.run links that task's span.
    lines = [json.loads(line) for line in worker.log_text().splitlines() if line.startswith("{")]
    mine = [line for line in lines if line.get("job_id") == job_id and line["logger"].startswith("workers.")]
    (claimed,) = [line for line in mine if "claimed by" in line["message"]]
    assert (claimed["trace_id"], claimed["span_id"]) in run.links
    run_lines = [line for line in mine if line is not claimed]
    assert any("succeeded" in line["message"] for line in run_lines)
    assert all(line.get("trace_id") == trace_id for line in run_lines), run_lines
    assert {line["span_id"] for line in run_lines} <= {s.span_id for s in spans}

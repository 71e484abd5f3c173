"""Helpers for the web UI's page tests: a CSRF-aware form poster and finished jobs with reports."""

from __future__ import annotations

import io
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from werkzeug.datastructures import FileStorage, MultiDict
from werkzeug.test import encode_multipart

from jobservice.db.tables import Job
from jobservice.jobs.queries import get_job
from jobservice.jobs.transitions import Owner, claim_job, mark_failed, mark_succeeded
from jobservice.reports.run_report import Check, ProbeFacts, RunReport, Segment, StreamFacts, Validation
from jobservice.wiring import Services

TOKEN = re.compile(r'name="csrf_token" value="([^"]+)"')


class Browser:
    """The Flask test client with what a browser adds: the session's CSRF token, multipart forms."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def token(self) -> str:
        """This session's CSRF token, read from the new-job form."""
        match = TOKEN.search(self.client.get("/").get_data(as_text=True))
        assert match, "the form carries a csrf_token"
        return match.group(1)

    def post(
        self,
        url: str,
        fields: dict[str, Any] | None = None,
        files: dict[str, tuple[bytes, str]] | None = None,
        *,
        csrf: bool | str = True,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """POST multipart like a browser form (files from memory, so no temp files leak)."""
        values: MultiDict[str, Any] = MultiDict()
        if csrf:
            values.add("csrf_token", csrf if isinstance(csrf, str) else self.token())
        for key, value in (fields or {}).items():
            values.add(key, str(value))
        for key, (data, name) in (files or {}).items():
            values.add(key, FileStorage(stream=io.BytesIO(data), filename=name, name=key))
        boundary, body = encode_multipart(values)
        return self.client.post(
            url, data=body, content_type=f"multipart/form-data; boundary={boundary}", headers=headers or {}
        )

    def text(self, url: str, status: int = 200) -> str:
        """GET a page and return its HTML, checking the status."""
        response = self.client.get(url)
        assert response.status_code == status, response.get_data(as_text=True)[:2000]
        return str(response.get_data(as_text=True))


@pytest.fixture
def browser(client: Any) -> Browser:
    """A CSRF-aware wrapper of the test client."""
    return Browser(client)


def sample_report(job: Job, *, verdict: str = "passed", black: list[Segment] | None = None) -> RunReport:
    """A RunReport as a worker would store it, with chosen validation findings."""
    checks = [
        Check(name="frame_count", passed=True, expected=48, actual=48, detail="tolerance 1 frames"),
        Check(name="duration", passed=True, expected=2.0, actual=1.96),
    ]
    if verdict == "failed":
        checks.append(Check(name="black", passed=False, expected="at most 0 s", actual=2.0))
    return RunReport(
        run_id=uuid.uuid4().hex,
        job_id=str(job.id),
        task=job.task,
        model=job.model,
        backend="cpu",
        worker_id="w1@test",
        status="succeeded" if verdict == "passed" else "failed",
        cold_start=True,
        queue_wait_ms=120.0,
        timings={
            "fetch_ms": 10.0,
            "load_ms": 400.0,
            "generate_ms": 1200.0,
            "encode_ms": 50.0,
            "validate_ms": 40.0,
            "upload_ms": 20.0,
            "total_ms": 1800.0,
        },
        frames_generated=48,
        media_duration_s=2.0,
        render_fps=40.0,
        rtf=0.6,
        validation=Validation(
            verdict=verdict,  # type: ignore[arg-type]
            mode="streamed",
            probe=ProbeFacts(
                format_name="mov,mp4,m4a,3gp,3g2,mj2",
                duration_s=2.0,
                size_bytes=12345,
                video=StreamFacts(index=0, codec_type="video", codec_name="h264", width=64, height=64),
            ),
            decoded_frames=48,
            black_segments=black or [],
            checks=checks,
        ),
    )


def finish_job(
    services: Services,
    job_id: str,
    *,
    video: Path | None = None,
    verdict: str = "passed",
    black: list[Segment] | None = None,
) -> None:
    """Run ``job_id`` to its end without a worker: claim, store a report (and video), mark it."""
    jid = uuid.UUID(job_id)
    with services.db.session() as session:
        job = claim_job(session, jid, worker_id="w1@test", lease_seconds=30)
        assert job is not None
    report = sample_report(job, verdict=verdict, black=black)
    report_key = f"jobs/{jid}/report.json"
    services.store.put_bytes(report_key, report.model_dump_json().encode(), content_type="application/json")
    output_key = f"jobs/{jid}/output.mp4"
    if video is not None:
        services.store.put_file(output_key, video, content_type="video/mp4")
    owner = Owner(worker_id="w1@test", attempt=1)
    with services.db.session() as session:
        if verdict == "passed":
            mark_succeeded(
                session,
                jid,
                owner=owner,
                output_key=output_key,
                report_key=report_key,
                verdict="passed",
                timings=report.timings,
                validation_summary={},
                cold_start=True,
            )
        else:
            mark_failed(
                session,
                jid,
                owner=owner,
                code="validation_failed",
                message="The video failed 1 check: black (2.0 s of black frames).",
                output_key=output_key if video else None,
                report_key=report_key,
                verdict="failed",
                timings=report.timings,
                validation_summary={"failed_checks": ["black"]},
                cold_start=True,
            )


def load(services: Services, job_id: str) -> Job:
    """The job row."""
    with services.db.session() as session:
        job = get_job(session, uuid.UUID(job_id))
    assert job is not None
    return job

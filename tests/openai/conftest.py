"""Helpers of the /v1/videos tests: an app with API keys on, and a job run to its end without a worker."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from werkzeug.datastructures import FileStorage, MultiDict
from werkzeug.test import encode_multipart

from jobservice.auth.keys import create_key
from jobservice.http.app import create_app
from jobservice.jobs.transitions import Owner, claim_job, mark_succeeded
from jobservice.settings import Settings
from jobservice.wiring import Services, build_services
from tests.conftest import ffmpeg
from tests.unit.hostile import hostile  # the unit hostile corpus's fixture (auth off)

__all__ = ["hostile"]


def bearer(secret: str) -> dict[str, str]:
    """The Authorization header of an API key."""
    return {"Authorization": f"Bearer {secret}"}


def data_url(path: Path, mime: str) -> str:
    """A file as a base64 data: URL (how the SDK's extra_body carries a file)."""
    return f"data:{mime};base64," + base64.b64encode(path.read_bytes()).decode()


@pytest.fixture
def keyed_client(settings: Settings) -> Iterator[tuple[Any, dict[str, str]]]:
    """A test client of an app with keys on, and the secrets of two tenants' keys."""
    svc = build_services(settings.model_copy(update={"auth": "keys"}))
    secrets: dict[str, str] = {}
    with svc.db.session() as session:
        for who, tenant in (("alice", "acme"), ("bob", "beta")):
            _, secrets[who] = create_key(session, name=who, tenant=tenant, role="user")
    app: Flask = create_app(services=svc)
    app.config["TESTING"] = True
    yield app.test_client(), secrets
    svc.db.dispose()


@pytest.fixture(scope="session")
def tiny_video(media_dir: Path) -> Path:
    """A 1-second 64x48 MP4."""
    out = media_dir / "tiny.mp4"
    if not out.exists():
        ffmpeg("-f", "lavfi", "-i", "testsrc=size=64x48:rate=8", "-t", "1", "-pix_fmt", "yuv420p", str(out))
    return out


def finish(services: Services, job_id: str, video: Path) -> None:
    """Run ``job_id`` to success without a worker: claim it, store ``video`` as its output, mark it."""
    jid = uuid.UUID(job_id)
    with services.db.session() as session:
        assert claim_job(session, jid, worker_id="w1@test", lease_seconds=30) is not None
    services.store.put_file(f"jobs/{jid}/output.mp4", video, content_type="video/mp4")
    services.store.put_bytes(f"jobs/{jid}/report.json", b"{}", content_type="application/json")
    with services.db.session() as session:
        mark_succeeded(
            session,
            jid,
            owner=Owner(worker_id="w1@test", attempt=1),
            output_key=f"jobs/{jid}/output.mp4",
            report_key=f"jobs/{jid}/report.json",
            verdict="passed",
            timings={},
            validation_summary={},
            cold_start=False,
        )


def post_multipart(client: Any, path: str, form: dict[str, Any]) -> Any:
    """POST multipart from bytes in memory: the test client's own temp file for a body over 500 KB is
    never closed (an unraisable-exception warning); files are (stream, name) tuples."""
    values: MultiDict[str, Any] = MultiDict()
    for key, value in form.items():
        if isinstance(value, tuple):
            stream, name = value
            values.add(key, FileStorage(stream=stream, filename=name, name=key))
        else:
            values.add(key, value)
    boundary, body = encode_multipart(values)
    return client.post(path, data=body, content_type=f"multipart/form-data; boundary={boundary}")

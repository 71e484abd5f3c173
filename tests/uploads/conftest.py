"""Fixtures of the upload tests: the real app on either object store (the local one, or S3 on the
session's moto server), and what any client does with it (declare, PUT the parts where the answer
says, complete)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from flask.testing import FlaskClient

from jobservice.http.app import create_app
from jobservice.settings import Settings
from jobservice.storage import ObjectStore
from jobservice.wiring import Services, build_services
from tests.integration.test_retention_stores import raw_client, s3_store

MIB = 2**20


@dataclass
class Api:
    """The app's test client, its services, and which store they use (``local`` or ``s3``)."""

    client: FlaskClient
    services: Services
    backend: str
    endpoint: str | None = None  # the moto server's, with S3

    @property
    def store(self) -> ObjectStore:
        return self.services.store

    def multipart_uploads(self) -> list[str]:
        """The keys of the multipart uploads S3 holds open in the bucket (S3 only)."""
        assert self.endpoint is not None
        bucket = getattr(self.store, "bucket")  # noqa: B009 - S3Store's, not on ObjectStore
        listed = raw_client(self.endpoint).list_multipart_uploads(Bucket=bucket)
        return [u["Key"] for u in listed.get("Uploads", [])]


def build_api(settings: Settings, backend: str, request: pytest.FixtureRequest) -> Api:
    """An ``Api`` on ``settings`` with the ``backend`` store."""
    endpoint = request.getfixturevalue("moto_server") if backend == "s3" else None
    services = build_services(settings, store=s3_store(endpoint) if endpoint else None)
    app = create_app(services=services)
    app.config["TESTING"] = True
    return Api(app.test_client(), services, backend, endpoint)


@pytest.fixture(params=["local", "s3"])
def api(request: pytest.FixtureRequest, settings: Settings) -> Iterator[Api]:
    """The app on each store in turn (each test using it runs twice)."""
    built = build_api(settings, request.param, request)
    yield built
    built.services.db.dispose()


def put_part(api: Api, part: dict[str, Any], chunk: bytes, headers: dict[str, str] | None = None) -> int:
    """PUT one part where the declaration said: the API itself (local) or S3 (no API key); its status."""
    if part["url"].startswith("/"):
        return int(api.client.put(part["url"], data=chunk, headers=headers).status_code)
    return requests.put(part["url"], data=chunk, timeout=30).status_code


def declare(api: Api, path: Path | None, ctype: str, *, size: int | None = None,
            headers: dict[str, str] | None = None, **extra: Any) -> Any:  # fmt: skip
    """``POST /uploads`` for ``path`` (or a file of ``size`` bytes); the response."""
    name = path.name if path is not None else "file.bin"
    size = size if size is not None else path.stat().st_size if path is not None else 1
    body = {"filename": name, "size": size, "content_type": ctype, **extra}
    return api.client.post("/uploads", json=body, headers=headers)


def upload(
    api: Api, path: Path, ctype: str, headers: dict[str, str] | None = None, **extra: Any
) -> dict[str, Any]:
    """Declare, PUT every part, complete: the ready upload's view."""
    data = path.read_bytes()
    declared = declare(api, path, ctype, headers=headers, **extra)
    assert declared.status_code == 201, declared.get_json()
    view = declared.get_json()
    for part in view["parts"]:
        chunk = data[part["offset"] : part["offset"] + part["size"]]
        assert put_part(api, part, chunk, headers) == 200
    done = api.client.post(view["complete_url"], headers=headers)
    assert done.status_code == 200, done.get_json()
    return dict(done.get_json())

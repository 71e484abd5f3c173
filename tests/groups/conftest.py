"""Fixtures of the job-group tests: an app with auth off (the hostile corpus's), keyed apps, and
helpers that post manifests and finish a group's jobs without a worker."""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import select
from werkzeug.datastructures import FileStorage, MultiDict
from werkzeug.test import encode_multipart

from jobservice.db.tables import Job
from jobservice.http.app import create_app
from jobservice.wiring import Services
from tests.auth.conftest import bearer, kclient, keyed_app, keyed_services, keys
from tests.unit.hostile import hostile_services

__all__ = ["bearer", "kclient", "keyed_app", "keyed_services", "keys"]

T2V = "reference-t2v"


def t2v_csv(rows: int, *, model: str = T2V, extra: str = "") -> str:
    """A CSV manifest of ``rows`` small text2video jobs."""
    head = "model,prompt,width,height,num_frames,num_inference_steps" + (",seed" if extra else "")
    return head + "\n" + "".join(f"{model},kite {n},64,64,8,2{extra}\n" for n in range(1, rows + 1))


@pytest.fixture
def group_app(
    tmp_path: Path, clean_redis: str, migrated_sqlite: Path
) -> Iterator[tuple[FlaskClient, Services]]:
    """A test client (auth off: the admin of tenant default) and its services."""
    services = hostile_services(tmp_path, migrated_sqlite)
    app = create_app(services=services)
    app.config["TESTING"] = True
    yield app.test_client(), services
    services.db.dispose()


def post_csv(client: Any, text: str, **headers: str) -> Any:
    """``POST /job-groups`` with a CSV body."""
    return client.post("/job-groups", data=text.encode(), content_type="text/csv", headers=headers)


def post_form(client: Any, data: bytes, filename: str, *, name: str | None = None, **extra: bytes) -> Any:
    """``POST /job-groups`` as multipart: the manifest part (and any ``extra`` file parts)."""
    values: MultiDict[str, Any] = MultiDict()
    if name is not None:
        values.add("name", name)
    values.add("manifest", FileStorage(stream=io.BytesIO(data), filename=filename, name="manifest"))
    for part, content in extra.items():
        values.add(part, FileStorage(stream=io.BytesIO(content), filename=f"{part}.bin", name=part))
    boundary, body = encode_multipart(values)
    return client.post("/job-groups", data=body, content_type=f"multipart/form-data; boundary={boundary}")


def group_jobs(services: Services, group_id: str) -> list[Job]:
    """The group's job rows, in row order."""
    with services.db.session() as session:
        rows = session.scalars(select(Job).where(Job.group_id == uuid.UUID(group_id)).order_by(Job.group_row))
        return list(rows)

"""The Python client's ``delete_upload``, and ``upload`` deleting what it gave up on (an upload no
caller holds the id of would take a place in the tenant's ``pending_uploads`` until it expired)."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests
from sqlalchemy import func, select

from jobservice.client import ApiError, Client, UploadPart
from jobservice.db.tables import Upload
from jobservice.wiring import Services
from tests.browser.server import serve


def uploads(services: Services) -> int:
    with services.db.session() as session:
        return int(session.scalar(select(func.count()).select_from(Upload)) or 0)


def test_delete_upload_then_the_id_is_unknown(services: Services, portrait: Path) -> None:
    with serve(services) as base, Client(base, timeout=30) as api:
        upload_id = api.upload(portrait)
        assert api.get_upload(upload_id).status == "ready"
        api.delete_upload(upload_id)
        for call in (api.get_upload, api.delete_upload):
            with pytest.raises(ApiError) as gone:
                call(upload_id)
            assert (gone.value.status, gone.value.code) == (404, "upload_not_found")
    assert uploads(services) == 0


def test_upload_deletes_what_it_gave_up_on(services: Services, portrait: Path) -> None:
    with serve(services) as base, Client(base, timeout=30, retries=0) as api:

        def lost(part: UploadPart, data: bytes, *, retries: int | None = None) -> None:
            raise requests.ConnectionError("connection reset by peer")

        api.put_part = lost  # type: ignore[method-assign]
        with pytest.raises(requests.ConnectionError):
            api.upload(portrait)
    assert uploads(services) == 0  # declared, then deleted: no pending upload left behind

"""``/v1/videos`` content on an S3 store (moto's server): a presigned redirect, and a thumbnail made
from a downloaded copy of the output and kept in the bucket."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import requests
from PIL import Image

from jobservice.http.app import create_app
from jobservice.settings import Settings
from jobservice.wiring import build_services
from tests.integration.test_retention_stores import s3_store
from tests.openai.conftest import finish


def test_content_redirects_and_the_thumbnail_is_kept_in_the_bucket(
    settings: Settings, moto_server: str, tiny_video: Path
) -> None:
    services = build_services(settings, store=s3_store(moto_server))
    try:
        client: Any = create_app(services=services).test_client()
        video_id = client.post(
            "/v1/videos", json={"model": "reference-t2v", "prompt": "p", "size": "128x96"}
        ).get_json()["id"]
        finish(services, video_id, tiny_video)
        content = client.get(f"/v1/videos/{video_id}/content")
        assert content.status_code == 302
        assert requests.get(content.headers["Location"], timeout=30).content == tiny_video.read_bytes()
        thumb = client.get(f"/v1/videos/{video_id}/content?variant=thumbnail")
        assert thumb.status_code == 200 and Image.open(io.BytesIO(thumb.data)).format == "JPEG"
        assert services.store.get_bytes(f"jobs/{video_id}/thumbnail.jpg") == thumb.data
        assert client.delete(f"/v1/videos/{video_id}").get_json()["deleted"] is True
        assert list(services.store.list(f"jobs/{video_id}/")) == []
    finally:
        services.db.dispose()

"""Direct uploads on the local store, through the real app: the same two calls as on S3 (declare,
PUT the parts to the URLs it answers, here on the API itself, complete), the content checks of form
uploads, jobs naming upload ids, tenants, and expiry by retention."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from jobservice.db.tables import Upload, utcnow
from jobservice.retention.sweep import sweep_expired
from jobservice.wiring import Services
from tests.auth.conftest import Keys, bearer, kclient, keyed_app, keyed_services, keys  # noqa: F401
from tests.conftest import ffmpeg

MIB = 2**20


@pytest.fixture(scope="module")
def long_speech(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """40 s of 48 kHz stereo PCM WAV (~7.3 MB): two parts of 5 MiB."""
    out = tmp_path_factory.mktemp("uploads") / "long.wav"
    ffmpeg("-f", "lavfi", "-i", "sine=frequency=300:sample_rate=48000:duration=40", "-ac", "2", str(out))
    return out


def upload(client: FlaskClient, path: Path, ctype: str, headers: dict[str, str] | None = None,
           **extra: Any) -> dict[str, Any]:  # fmt: skip
    """Declare, PUT every part to its URL, complete: what any client does."""
    data = path.read_bytes()
    declared = client.post(
        "/uploads",
        json={"filename": path.name, "size": len(data), "content_type": ctype, **extra},
        headers=headers,
    )
    assert declared.status_code == 201, declared.get_json()
    view = declared.get_json()
    assert view["status"] == "pending" and declared.headers["Location"] == f"/uploads/{view['id']}"
    for part in view["parts"]:
        assert part["url"] == f"/uploads/{view['id']}/parts/{part['number']}"  # the API takes the bytes
        chunk = data[part["offset"] : part["offset"] + part["size"]]
        put = client.put(part["url"], data=chunk, headers=headers)
        assert put.status_code == 200 and put.headers["ETag"], put.get_data(as_text=True)
    done = client.post(view["complete_url"], headers=headers)
    assert done.status_code == 200, done.get_json()
    return {**done.get_json(), "declared": view}


def test_multipart_and_single_uploads_then_a_job_names_them(
    client: FlaskClient, services: Services, portrait: Path, long_speech: Path
) -> None:
    audio = upload(client, long_speech, "audio/wav", part_size=5 * MIB)
    assert audio["declared"]["multipart"] and len(audio["declared"]["parts"]) == 2
    assert audio["status"] == "ready" and audio["facts"]["duration_s"] == pytest.approx(40.0, abs=0.01)
    image = upload(client, portrait, "image/png")
    assert len(image["declared"]["parts"]) == 1 and image["facts"]["format"] == "PNG"
    assert services.store.get_bytes(f"uploads/{audio['id']}/audio") == long_speech.read_bytes()
    assert client.post(audio["complete_url"]).get_json()["status"] == "ready"  # completing again: the same

    created = client.post("/jobs", json={"task": "audio2video", "image": image["id"], "audio": audio["id"]})
    assert created.status_code == 202, created.get_json()
    job = created.get_json()
    assert job["inputs"]["audio"]["duration_s"] == pytest.approx(40.0, abs=0.01)
    stored = {
        name: f"jobs/{job['id']}/inputs/{name}.{ext}" for name, ext in (("image", "png"), ("audio", "wav"))
    }
    assert services.store.get_bytes(stored["audio"]) == long_speech.read_bytes()  # the job's own copy
    assert services.store.get_bytes(stored["image"]) == portrait.read_bytes()

    form = client.post("/jobs", data={"task": "audio2video", "image": image["id"], "audio": audio["id"]})
    assert form.status_code == 202, form.get_json()  # form fields name uploads too
    with services.db.session() as session:
        row = session.get(Upload, uuid.UUID(audio["id"]))
        assert row is not None and row.used_at is not None


def test_refusals(
    client: FlaskClient, services: Services, portrait: Path, speech: Path, tmp_path: Path
) -> None:
    assert (
        client.post("/uploads", data="not json", content_type="application/json").get_json()["error"]["code"]
        == "invalid_json"
    )
    fake = tmp_path / "face.png"
    fake.write_bytes(b"%PDF-1.4 this is not an image at all" * 10)
    declared = client.post("/uploads", json={"filename": "face.png", "size": fake.stat().st_size,
                                              "content_type": "image/png"}).get_json()  # fmt: skip
    url = declared["parts"][0]["url"]
    assert client.post(declared["complete_url"]).get_json()["error"]["code"] == "upload_incomplete"
    short = client.put(url, data=b"short")
    assert (short.status_code, short.get_json()["error"]["code"]) == (422, "part_size_mismatch")
    for wrong in ("0", "2", "x"):
        gone = client.put(f"/uploads/{declared['id']}/parts/{wrong}", data=fake.read_bytes())
        assert gone.status_code == 404 and gone.get_json()["error"]["code"] == "part_not_found"
    assert client.put(url, data=fake.read_bytes()).status_code == 200
    pending = client.post(
        "/jobs", json={"task": "audio2video", "image": declared["id"], "audio": declared["id"]}
    )
    assert (pending.status_code, pending.get_json()["error"]["code"]) == (409, "upload_not_complete")
    refused = client.post(declared["complete_url"])
    assert (refused.status_code, refused.get_json()["error"]["code"]) == (422, "invalid_image")
    assert client.get(f"/uploads/{declared['id']}").status_code == 404  # refused: nothing left behind
    assert not list(services.store.list(f"uploads/{declared['id']}/"))

    audio = upload(client, speech, "audio/wav")
    wrong_kind = client.post(
        "/jobs", json={"task": "audio2video", "image": audio["id"], "audio": audio["id"]}
    )
    assert (wrong_kind.status_code, wrong_kind.get_json()["error"]["code"]) == (422, "wrong_upload_kind")
    for bad in ("nope", "6f1c1f5e-0000-4000-8000-000000000000", 5):
        unknown = client.post("/jobs", json={"task": "audio2video", "image": bad, "audio": audio["id"]})
        assert unknown.status_code in (404, 422) and unknown.get_json()["error"]["code"] in (
            "upload_not_found",
            "invalid_upload_id",
        )
    assert client.get("/uploads/nope").status_code == 404


def test_another_tenants_upload_is_a_404(kclient: FlaskClient, keys: Keys, portrait: Path) -> None:  # noqa: F811
    mine = upload(kclient, portrait, "image/png", headers=bearer(keys.alice))
    bob = bearer(keys.bob)
    assert kclient.get(f"/uploads/{mine['id']}", headers=bob).status_code == 404
    assert kclient.post(mine["complete_url"], headers=bob).status_code == 404
    theirs = kclient.post("/jobs", json={"task": "audio2video", "image": mine["id"]}, headers=bob)
    assert (theirs.status_code, theirs.get_json()["error"]["code"]) == (404, "upload_not_found")
    assert kclient.get(f"/uploads/{mine['id']}", headers=bearer(keys.alice)).status_code == 200
    assert (
        kclient.post(
            "/uploads", json={"filename": "a.png", "size": 9, "content_type": "image/png"}
        ).status_code
        == 401
    )


def test_retention_deletes_expired_uploads_but_not_a_jobs_copy(
    client: FlaskClient, services: Services, portrait: Path, speech: Path
) -> None:
    image, audio = upload(client, portrait, "image/png"), upload(client, speech, "audio/wav")
    job = client.post(
        "/jobs", json={"task": "audio2video", "image": image["id"], "audio": audio["id"]}
    ).get_json()
    abandoned = client.post("/uploads", json={"filename": "b.png", "size": 6 * MIB, "content_type": "image/png",
                                              "part_size": 5 * MIB}).get_json()  # fmt: skip
    assert client.put(abandoned["parts"][0]["url"], data=b"\0" * 5 * MIB).status_code == 200
    assert sweep_expired(services, now=utcnow() + timedelta(hours=23)).uploads == []  # not yet
    swept = sweep_expired(services, now=utcnow() + timedelta(hours=25))
    assert sorted(swept.uploads) == sorted([image["id"], audio["id"], abandoned["id"]])
    assert client.get(f"/uploads/{image['id']}").status_code == 404
    assert [o.key for o in services.store.list("uploads/")] == []
    parts = Path(services.settings.resolved_storage_root()) / ".~jobservice-tmp-uploads"
    assert not any(p.is_file() for p in parts.rglob("*"))  # the abandoned upload's parts too
    assert services.store.exists(f"jobs/{job['id']}/inputs/image.png")

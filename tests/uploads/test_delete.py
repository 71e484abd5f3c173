"""``DELETE /uploads/<id>`` on both stores: the parts (an S3 multipart upload aborted), the object
and the row go; afterwards the id is unknown everywhere; jobs that used it keep their copies; a
store outage deletes nothing; a deletion racing a completion answers 404, not 500."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import delete

from jobservice.db.tables import Upload, utcnow
from jobservice.http.app import create_app
from jobservice.retention.orphans import OrphanResult, sweep_store_orphans
from jobservice.settings import Settings
from jobservice.storage import LocalStore, StoreUnavailable
from jobservice.wiring import Services, build_services
from tests.auth.conftest import Keys, bearer, kclient, keyed_app, keyed_services, keys  # noqa: F401
from tests.uploads.conftest import MIB, Api, declare, put_part, upload

PARTS_DIR = ".~jobservice-tmp-uploads"  # the local store's folders of unfinished parts


def code(response: Any) -> tuple[int, str]:
    """(status, error code) of a refusal."""
    return response.status_code, response.get_json()["error"]["code"]


def test_a_deleted_upload_is_unknown_everywhere_and_its_jobs_keep_their_copies(
    api: Api, portrait: Path, speech: Path
) -> None:
    client = api.client
    image, audio = upload(api, portrait, "image/png"), upload(api, speech, "audio/wav")
    job = client.post("/jobs", json={"task": "audio2video", "image": image["id"], "audio": audio["id"]})
    assert job.status_code == 202, job.get_json()
    job_id = job.get_json()["id"]

    deleted = client.delete(f"/uploads/{image['id']}")
    assert deleted.status_code == 204 and deleted.data == b""
    assert not api.store.exists(f"uploads/{image['id']}/image")
    assert code(client.get(f"/uploads/{image['id']}")) == (404, "upload_not_found")
    assert code(client.post(image["complete_url"])) == (404, "upload_not_found")
    assert code(client.put(f"/uploads/{image['id']}/parts/1", data=b"x")) == (404, "upload_not_found")
    again = client.post("/jobs", json={"task": "audio2video", "image": image["id"], "audio": audio["id"]})
    assert code(again) == (404, "upload_not_found")
    video = client.post(
        "/v1/videos",
        json={
            "model": "reference-talking-head",
            "input_reference": {"file_id": image["id"]},
            "audio": {"file_id": audio["id"]},
            "prompt": "a face",
        },
    )
    assert code(video) == (404, "upload_not_found")
    manifest = f"model,image,audio\nreference-talking-head,upload:{image['id']},upload:{audio['id']}\n"
    group = client.post("/job-groups", data=manifest.encode(), content_type="text/csv")
    assert group.status_code == 422  # a manifest's refusal names each row; this row's: the upload
    assert [d["type"] for d in group.get_json()["error"]["details"]] == ["upload_not_found"]
    assert code(client.delete(f"/uploads/{image['id']}")) == (404, "upload_not_found")  # not twice

    # The job made before the deletion has its own copy, and still says where it came from.
    assert api.store.get_bytes(f"jobs/{job_id}/inputs/image.png") == portrait.read_bytes()
    shown = client.get(f"/jobs/{job_id}").get_json()
    assert shown["status"] == "queued" and shown["inputs"]["image"]["upload_id"] == image["id"]
    assert client.get(f"/uploads/{audio['id']}").get_json()["status"] == "ready"  # the other one stays


def test_deleting_a_multipart_upload_in_progress_removes_its_parts(api: Api) -> None:
    declared = declare(api, None, "audio/wav", size=6 * MIB, part_size=5 * MIB).get_json()
    first, second = declared["parts"]
    assert put_part(api, first, b"\0" * first["size"]) == 200
    key = f"uploads/{declared['id']}/audio"
    parts = Path(api.services.settings.resolved_storage_root()) / PARTS_DIR
    if api.backend == "s3":
        assert api.multipart_uploads() == [key]
    else:
        assert [p.name for p in parts.rglob("*") if p.is_file()] == ["00001"]

    assert api.client.delete(f"/uploads/{declared['id']}").status_code == 204
    if api.backend == "s3":
        assert api.multipart_uploads() == []  # aborted: S3 keeps no part
        late = put_part(api, second, b"\0" * second["size"])
        assert late >= 400  # refused: S3 says 404 NoSuchUpload, moto's server a 500
        assert api.multipart_uploads() == []
    else:
        assert not any(p.is_file() for p in parts.rglob("*"))
        refused = api.client.put(second["url"], data=b"\0" * second["size"])
        assert code(refused) == (404, "upload_not_found")
    assert not list(api.store.list(f"uploads/{declared['id']}/"))
    assert code(api.client.get(f"/uploads/{declared['id']}")) == (404, "upload_not_found")


def test_a_put_after_the_deletion_leaves_no_lasting_object(api: Api, portrait: Path) -> None:
    view = declare(api, portrait, "image/png").get_json()
    assert api.client.delete(f"/uploads/{view['id']}").status_code == 204
    late = put_part(api, view["parts"][0], portrait.read_bytes())
    if api.backend == "local":
        assert late == 404  # the API takes no part of an upload it no longer has
        return
    # A presigned URL cannot be revoked: S3 takes the PUT, and the orphan sweep deletes the object.
    assert late == 200 and api.store.exists(f"uploads/{view['id']}/image")
    result = OrphanResult()
    sweep_store_orphans(api.services, now=utcnow() + timedelta(hours=2), result=result)
    assert result.prefixes == [f"uploads/{view['id']}/"]
    assert not api.store.exists(f"uploads/{view['id']}/image")


def test_another_tenants_upload_is_a_404_to_delete(kclient: FlaskClient, keys: Keys, portrait: Path) -> None:  # noqa: F811
    alice, bob = bearer(keys.alice), bearer(keys.bob)
    declared = kclient.post(
        "/uploads", json={"filename": "a.png", "size": 100, "content_type": "image/png"}, headers=alice
    ).get_json()
    theirs = kclient.delete(f"/uploads/{declared['id']}", headers=bob)
    assert code(theirs) == (404, "upload_not_found")  # not 403: another tenant's id is none
    assert kclient.get(f"/uploads/{declared['id']}", headers=alice).status_code == 200  # untouched
    assert kclient.delete(f"/uploads/{declared['id']}").status_code == 401
    assert kclient.delete(f"/uploads/{declared['id']}", headers=alice).status_code == 204


@pytest.mark.parametrize("raw", ["nope", "6f1d2c3b-9a8e-4d7c-b6a5-0f1e2d3c4b5a", "0" * 300])
def test_deleting_an_unknown_id_is_a_404_with_a_sentence(client: FlaskClient, raw: str) -> None:
    response = client.delete(f"/uploads/{raw}")
    assert code(response) == (404, "upload_not_found")
    assert response.get_json()["error"]["message"].startswith("There is no upload")


def test_an_expired_upload_can_still_be_deleted(client: FlaskClient, services: Services) -> None:
    view = client.post(
        "/uploads", json={"filename": "a.png", "size": 100, "content_type": "image/png"}
    ).get_json()
    with services.db.session() as session:
        row = session.get(Upload, uuid.UUID(view["id"]))
        assert row is not None
        row.expires_at = utcnow() - timedelta(minutes=1)
    assert code(client.get(f"/uploads/{view['id']}")) == (410, "upload_expired")
    assert client.delete(f"/uploads/{view['id']}").status_code == 204  # no need to wait for retention
    assert code(client.get(f"/uploads/{view['id']}")) == (404, "upload_not_found")


class FlakyStore(LocalStore):
    """A local store whose ``delete`` fails while ``down``, and which runs ``on_check`` when a
    completion's content check asks for the file (what another request does meanwhile)."""

    down = False
    on_check: Any = None

    def delete(self, key: str) -> None:
        if self.down:
            raise StoreUnavailable("the disk went away")
        super().delete(key)

    def local_path(self, key: str) -> Path | None:
        if self.on_check is not None:
            hook, self.on_check = self.on_check, None
            hook()
        return super().local_path(key)


@pytest.fixture
def flaky(settings: Settings) -> Iterator[tuple[Api, FlakyStore]]:
    """The app on a ``FlakyStore``."""
    store = FlakyStore(Path(settings.resolved_storage_root()))
    services = build_services(settings, store=store)
    app = create_app(services=services)
    app.config["TESTING"] = True
    yield Api(app.test_client(), services, "local"), store
    services.db.dispose()


def test_a_store_outage_deletes_nothing(flaky: tuple[Api, FlakyStore], portrait: Path) -> None:
    api, store = flaky
    ready = upload(api, portrait, "image/png")
    store.down = True
    assert code(api.client.delete(f"/uploads/{ready['id']}")) == (503, "storage_unavailable")
    assert api.client.get(f"/uploads/{ready['id']}").get_json()["status"] == "ready"  # kept whole
    assert store.exists(f"uploads/{ready['id']}/image")
    store.down = False
    assert api.client.delete(f"/uploads/{ready['id']}").status_code == 204  # again, once it is back


def test_an_upload_deleted_while_it_is_completed_answers_404_and_leaves_nothing(
    flaky: tuple[Api, FlakyStore], portrait: Path
) -> None:
    api, store = flaky
    view = declare(api, portrait, "image/png").get_json()
    assert put_part(api, view["parts"][0], portrait.read_bytes()) == 200

    def concurrent_delete() -> None:  # a DELETE whose row deletion lands during the content check
        with api.services.db.session() as session:
            session.execute(delete(Upload).where(Upload.id == uuid.UUID(view["id"])))

    store.on_check = concurrent_delete
    assert code(api.client.post(view["complete_url"])) == (404, "upload_not_found")
    assert not store.exists(f"uploads/{view['id']}/image")  # the object it joined went too

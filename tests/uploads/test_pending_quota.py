"""The pending-uploads quota: how many uploads a tenant may hold declared and not completed
(``pending_uploads``) and how many declared MiB (``pending_upload_mb``); a refusal is a 429 that
says how to free places and leaves nothing behind (no S3 multipart upload, no local parts); two
declarations at once never both take the last place, on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import func, select

from jobservice.auth.principal import Principal
from jobservice.db.tables import Tenant, Upload, utcnow
from jobservice.errors import TooMany
from jobservice.settings import Settings
from jobservice.uploads.service import declare as declare_upload
from jobservice.uploads.service import parse_declaration
from jobservice.wiring import build_services
from tests.auth.conftest import Keys, bearer, kclient, keyed_app, keyed_services, keys  # noqa: F401
from tests.uploads.conftest import MIB, Api, build_api, declare, put_part

IMAGE = {"content_type": "image/png", "size": 1000}


@pytest.fixture
def capped(request: pytest.FixtureRequest, settings: Settings) -> Any:
    """The app on each store, with room for 2 pending uploads of 10 MiB in all (parts of 5 MiB
    from 6 MiB on, so that a refused declaration would have started a multipart upload)."""
    capped = settings.model_copy(
        update={"quota_pending_uploads": 2, "quota_pending_upload_mb": 10, "upload_multipart_threshold_mb": 5}
    )
    built = build_api(capped, request.param, request)
    yield built
    built.services.db.dispose()


def refusal(response: Any) -> dict[str, Any]:
    """The 429's error, checked for what every quota refusal carries."""
    assert response.status_code == 429, response.get_json()
    assert int(response.headers["Retry-After"]) >= 1
    error: dict[str, Any] = response.get_json()["error"]
    assert error["code"] == "quota_exceeded" and "Nothing was created." in error["message"]
    return error


def rows(api: Api) -> int:
    with api.services.db.session() as session:
        return int(session.scalar(select(func.count()).select_from(Upload)) or 0)


@pytest.mark.parametrize("capped", ["local", "s3"], indirect=True)
def test_the_cap_on_pending_uploads_and_how_places_free_up(capped: Api, portrait: Path) -> None:
    api = capped
    first = declare(api, portrait, "image/png").get_json()
    second = declare(api, portrait, "image/png").get_json()
    error = refusal(declare(api, portrait, "image/png"))
    assert error["details"] == [{"limit": "pending_uploads", "value": 2, "usage": 2, "requested": 1}]
    assert "may have 2 uploads declared and not yet completed; it has 2" in error["message"]
    assert "POST /uploads/<id>/complete" in error["message"] and "DELETE /uploads/<id>" in error["message"]
    assert "jobservice tenants set default --pending-uploads N" in error["message"]
    assert rows(api) == 2  # the refused one left no row

    assert put_part(api, first["parts"][0], portrait.read_bytes()) == 200
    assert api.client.post(first["complete_url"]).status_code == 200  # completed: a place is free
    third = declare(api, portrait, "image/png")
    assert third.status_code == 201
    refusal(declare(api, portrait, "image/png"))
    assert api.client.delete(f"/uploads/{second['id']}").status_code == 204  # deleted: another
    assert declare(api, portrait, "image/png").status_code == 201

    with api.services.db.session() as session:  # an expired upload can no longer be completed
        row = session.get(Upload, uuid.UUID(third.get_json()["id"]))
        assert row is not None
        row.expires_at = utcnow() - timedelta(seconds=1)
    assert declare(api, portrait, "image/png").status_code == 201
    quota = api.client.get("/quota").get_json()
    assert (quota["limits"]["pending_uploads"], quota["limits"]["pending_upload_mb"]) == (2, 10)
    assert quota["usage"]["pending_uploads"] == 2
    assert quota["usage"]["pending_upload_mb"] == round(2 * portrait.stat().st_size / MIB, 1)


@pytest.mark.parametrize("capped", ["local", "s3"], indirect=True)
def test_the_cap_on_declared_megabytes_leaves_no_parts_behind(capped: Api) -> None:
    api = capped
    kept = declare(api, None, "audio/wav", size=6 * MIB, part_size=5 * MIB)
    assert kept.status_code == 201 and kept.get_json()["multipart"]
    error = refusal(declare(api, None, "audio/wav", size=6 * MIB, part_size=5 * MIB))
    assert error["details"] == [{"limit": "pending_upload_mb", "value": 10, "usage": 6, "requested": 6}]
    assert "6.0 MiB in 1 and this one adds 6.0 MiB" in error["message"]
    never = declare(api, None, "audio/wav", size=11 * MIB, part_size=5 * MIB)
    assert refusal(never)["details"][0]["limit"] == "pending_upload_mb"
    assert int(never.headers["Retry-After"]) == 3600  # larger than the cap: waiting cannot help
    assert rows(api) == 1
    if api.backend == "s3":  # the refused declarations' multipart uploads were aborted
        assert api.multipart_uploads() == [f"uploads/{kept.get_json()['id']}/audio"]
    else:
        parts = Path(api.services.settings.resolved_storage_root()) / ".~jobservice-tmp-uploads"
        assert len([p for p in parts.iterdir() if p.is_dir()]) == 1
    assert declare(api, None, "audio/wav", size=4 * MIB).status_code == 201  # what still fits


def test_tenant_and_key_overrides_and_other_tenants(
    kclient: FlaskClient,  # noqa: F811
    keys: Keys,  # noqa: F811
    keyed_services: Any,  # noqa: F811
    portrait: Path,
) -> None:
    with keyed_services.db.session() as session:
        session.add(Tenant(name="acme", limits={"pending_uploads": 1}))
    body = {"filename": "a.png", **IMAGE}
    alice, bob = bearer(keys.alice), bearer(keys.bob)
    assert kclient.post("/uploads", json=body, headers=alice).status_code == 201
    error = refusal(kclient.post("/uploads", json=body, headers=alice))
    assert "jobservice tenants set acme --pending-uploads N" in error["message"]
    for _ in range(3):  # tenant beta has the default, and acme's upload is not in its count
        assert kclient.post("/uploads", json=body, headers=bob).status_code == 201


def test_a_tenant_with_no_room_for_uploads(client: FlaskClient, services: Any) -> None:
    with services.db.session() as session:
        session.add(Tenant(name="default", limits={"pending_uploads": 0}))
    error = refusal(client.post("/uploads", json={"filename": "a.png", **IMAGE}))
    assert error["message"].startswith("Tenant 'default' may have 0 uploads declared")


# --- two declarations at once ------------------------------------------------------------------
def declare_at_once(settings: Settings, tenants: list[str]) -> dict[str, list[bool]]:
    """Each of ``tenants`` declares one upload, all released at once: who got one."""
    services = build_services(settings)
    decl = parse_declaration({"filename": "a.png", **IMAGE}, settings)
    barrier = threading.Barrier(len(tenants))
    got: dict[str, list[bool]] = {t: [] for t in tenants}

    def run(tenant: str) -> None:
        principal = Principal(tenant=tenant, role="user", key_id=None)
        barrier.wait()
        try:
            declare_upload(services, principal, decl)
        except TooMany:
            got[tenant].append(False)
        else:
            got[tenant].append(True)

    threads = [threading.Thread(target=run, args=(t,)) for t in tenants]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with services.db.session() as session:
        counted = dict(session.execute(select(Upload.tenant, func.count()).group_by(Upload.tenant)).all())
    services.db.dispose()
    assert {t: sum(g) for t, g in got.items()} == {t: counted.get(t, 0) for t in got}
    return got


def concurrency(settings: Settings) -> None:
    capped = settings.model_copy(update={"quota_pending_uploads": 4})
    got = declare_at_once(capped, ["acme"] * 10 + ["beta"] * 6)
    assert sorted(got["acme"]) == [False] * 6 + [True] * 4
    assert sorted(got["beta"]) == [False] * 2 + [True] * 4


def test_concurrent_declarations_on_sqlite_never_overshoot(settings: Settings) -> None:
    concurrency(settings)


@pytest.mark.postgres
def test_concurrent_declarations_on_postgresql_never_overshoot(settings: Settings, pg_url: str) -> None:
    concurrency(settings.model_copy(update={"database_url": pg_url}))

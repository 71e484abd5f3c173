"""``/job-groups`` through the app (SQLite, local store, no worker): a manifest's rows checked as
``POST /jobs`` checks one job, all jobs created in one transaction or none, quotas, idempotency,
tenancy, cancel, the live stream, the results CSV and the streamed zip."""

from __future__ import annotations

import io
import json
import uuid
import zipfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import func, select, update

from jobservice.db.tables import Job, JobEvent, JobGroup, JobStatus, Tenant, TenantUsageCount, utcnow
from jobservice.jobs.queries import get_job
from jobservice.retention.orphans import OrphanResult, sweep_store_orphans
from jobservice.retention.sweep import sweep_expired
from jobservice.wiring import Services
from tests.conftest import SAMPLES, caches_expired
from tests.factories import new_job
from tests.groups.conftest import T2V, bearer, group_jobs, post_csv, post_form, t2v_csv
from tests.unit.hostile import leftovers
from tests.unit.test_streams import parse_sse
from tests.uploads.test_local import upload
from tests.web.conftest import finish_job

App = tuple[FlaskClient, Services]


def created(response: Any) -> dict[str, Any]:
    assert response.status_code == 202, response.get_data(as_text=True)[:2000]
    return dict(response.get_json())


def test_a_csv_manifest_queues_every_row_as_a_checked_job_in_row_order(group_app: App) -> None:
    client, services = group_app
    response = post_csv(client, t2v_csv(3), **{"Idempotency-Key": "g-1"})
    group = created(response)
    assert response.headers["Location"] == f"/job-groups/{group['id']}"
    assert (group["status"], group["object"], group["models"]) == ("queued", "job_group", {T2V: 3})
    assert group["progress"] == {
        "total": 3, "queued": 3, "running": 0, "succeeded": 0, "failed": 0, "canceled": 0, "fraction": 0.0
    }  # fmt: skip
    jobs = group_jobs(services, group["id"])
    assert [j.group_row for j in jobs] == [1, 2, 3]
    assert [j.params["prompt"] for j in jobs] == ["kite 1", "kite 2", "kite 3"]
    assert all(j.priority == services.settings.queue_batch_priority and j.source == "group" for j in jobs)
    # Checked like POST /jobs: "64" read as a number, defaults filled in, a seed drawn.
    assert (
        jobs[0].params["width"] == 64
        and jobs[0].params["fps"] == 16
        and isinstance(jobs[0].params["seed"], int)
    )
    assert jobs[0].created_at < jobs[1].created_at < jobs[2].created_at  # row order is queue order
    assert all(j.expires_at is not None and j.output_seconds for j in jobs)
    with services.db.session() as session:
        details = set(
            session.scalars(select(JobEvent.detail).where(JobEvent.job_id.in_([j.id for j in jobs])))
        )
    assert details == {"submitted via group"}
    # The jobs list in row order, each naming its group and row.
    page = client.get(f"/job-groups/{group['id']}/jobs?limit=2").get_json()
    assert [(j["group_row"], j["group_id"]) for j in page["jobs"]] == [(1, group["id"]), (2, group["id"])]
    rest = client.get(f"/job-groups/{group['id']}/jobs?cursor={page['next_cursor']}").get_json()
    assert [j["group_row"] for j in rest["jobs"]] == [3] and rest["next_cursor"] is None
    assert client.get(f"/jobs/{jobs[0].id}").get_json()["group_row"] == 1


def test_json_lines_and_a_multipart_upload_are_read_alike(group_app: App) -> None:
    client, services = group_app
    rows = [{"model": T2V, "prompt": f"p{n}", "width": 64, "height": 64, "num_frames": 8} for n in (1, 2)]
    body = "\n".join(json.dumps(r) for r in rows).encode()
    as_body = created(client.post("/job-groups?name=lines", data=body, content_type="application/x-ndjson"))
    as_form = created(post_form(client, body, "rows.jsonl"))
    assert (as_body["name"], as_body["manifest_format"]) == ("lines", "jsonl")
    assert (as_form["name"], as_form["manifest_format"], as_form["source"]) == ("rows", "jsonl", "api")
    assert as_body["manifest_sha256"] == as_form["manifest_sha256"]
    csv_form = created(post_form(client, t2v_csv(1).encode(), "x.csv", name="named"))
    assert (csv_form["name"], csv_form["manifest_format"]) == ("named", "csv")
    listed = client.get("/job-groups?limit=2").get_json()
    assert [g["id"] for g in listed["groups"]] == [csv_form["id"], as_form["id"]] and listed["next_cursor"]
    older = client.get(f"/job-groups?cursor={listed['next_cursor']}").get_json()
    assert [g["id"] for g in older["groups"]] == [as_body["id"]]


def test_every_problem_of_every_row_is_named_and_nothing_is_created(group_app: App) -> None:
    client, services = group_app
    manifest = "\n".join(
        [
            "model,prompt,width,colour,webhook,image",
            f"{T2V},fine,64,,,",
            f"{T2V},too wide,65,,,",
            "no-such-model,x,64,,,",
            f"{T2V},,64,,,",
            f"{T2V},x,64,red,,",
            f"{T2V},x,64,,http://127.0.0.1/hook,",
            f"{T2V},x,64,,,https://example.com/face.png",
            f"{T2V},x,64,,,key:jobs/nope/inputs/image.png",
        ]
    )
    response = post_csv(client, manifest + "\n")
    assert response.status_code == 422
    error = response.get_json()["error"]
    assert error["code"] == "invalid_manifest" and error["message"].startswith(
        "Row 2 (line 3), column 'width'"
    )
    assert "Nothing was created" in error["message"]
    found = {(d["row"], d["column"], d["type"]) for d in error["details"]}
    assert found == {
        (2, "width", "invalid_parameters"),
        (3, "model", "unknown_model"),
        (4, "prompt", "invalid_parameters"),
        (5, "colour", "invalid_parameters"),
        (6, "webhook", "webhook_not_https"),
        (7, "image", "url_not_fetched"),
        (8, "image", "input_not_found"),
    }, error["details"]
    assert all(d["line"] == d["row"] + 1 for d in error["details"])
    assert leftovers(services) == []
    with services.db.session() as session:
        assert session.scalar(select(func.count()).select_from(JobGroup)) == 0


def test_an_input_for_a_model_that_takes_none_is_named(group_app: App) -> None:
    client, services = group_app
    store = services.store
    store.put_file("jobs/x/inputs/image.png", SAMPLES / "portrait.png")
    response = post_csv(client, f"model,prompt,image\n{T2V},x,key:jobs/x/inputs/image.png\n")
    details = response.get_json()["error"]["details"]
    assert [(d["row"], d["column"], d["type"]) for d in details] == [(1, "image", "unexpected_input")]


def stored_inputs(services: Services, *, tenant: str = "default") -> tuple[str, str]:
    """A job of ``tenant`` whose portrait and speech are in the store: their keys."""
    job_id = new_job(services.db)
    with services.db.session() as session:
        session.execute(update(Job).where(Job.id == job_id).values(tenant=tenant))
    image, audio = f"jobs/{job_id}/inputs/image.png", f"jobs/{job_id}/inputs/audio.wav"
    services.store.put_file(image, SAMPLES / "portrait.png")
    services.store.put_file(audio, SAMPLES / "speech.wav")
    return image, audio


def test_file_inputs_are_stored_objects_checked_once_and_shared_by_the_group(group_app: App) -> None:
    client, services = group_app
    image, audio = stored_inputs(services)
    manifest = "model,image,audio,max_size\n" + "".join(
        f"reference-talking-head,key:{image},key:{audio},{size}\n" for size in (128, 256, 128)
    )
    group = created(post_csv(client, manifest))
    jobs = group_jobs(services, group["id"])
    keys = {key for job in jobs for key in job.input_keys.values()}
    assert len(keys) == 2 and all(k.startswith(f"groups/{group['id']}/inputs/sha256/") for k in keys)
    assert {o.key for o in services.store.list(f"groups/{group['id']}/")} == keys
    assert jobs[0].input_meta["image"]["width"] > 0 and jobs[0].input_meta["audio"]["duration_s"] > 0
    assert jobs[1].input_keys == jobs[0].input_keys and [j.params["max_size"] for j in jobs] == [
        128,
        256,
        128,
    ]


def test_direct_uploads_named_by_id_are_copied_once_for_the_group(group_app: App) -> None:
    client, services = group_app
    image = upload(client, SAMPLES / "portrait.png", "image/png")
    audio = upload(client, SAMPLES / "speech.wav", "audio/wav")
    manifest = "model,image,audio,max_size\n" + "".join(
        f"reference-talking-head,upload:{image['id']},upload:{audio['id']},{size}\n" for size in (128, 256)
    )
    group = created(post_csv(client, manifest))
    jobs = group_jobs(services, group["id"])
    assert jobs[0].input_keys == jobs[1].input_keys
    assert jobs[0].input_meta["image"]["upload_id"] == image["id"]
    assert jobs[0].input_meta["audio"]["upload_id"] == audio["id"]
    keys = set(jobs[0].input_keys.values())
    assert {o.key for o in services.store.list(f"groups/{group['id']}/")} == keys  # one copy each
    for key in keys:  # the copies hold the uploaded bytes
        kind = "image" if key.endswith(".png") else "audio"
        sample = SAMPLES / ("portrait.png" if kind == "image" else "speech.wav")
        assert b"".join(services.store.open_range(key, 0, sample.stat().st_size - 1)) == sample.read_bytes()
    swapped = post_csv(
        client, f"model,image,audio\nreference-talking-head,upload:{audio['id']},upload:{image['id']}\n"
    )
    assert swapped.status_code == 422 and "wrong_upload_kind" in swapped.get_data(as_text=True)


@pytest.mark.parametrize(
    ("cell", "code"),
    [
        ("https://example.com/face.png", "url_not_fetched"),
        ("http://10.0.0.1/face.png", "url_not_fetched"),
        ("upload:0123456789", "upload_not_found"),
        ("upload:2f1e7c35-8f3e-4c36-9a8f-3c1d1b0e6a11", "upload_not_found"),
        ("face.png", "invalid_input_ref"),
        ("key:", "invalid_input_ref"),
        ("key:../../etc/passwd", "invalid_input_ref"),
        ("key:jobs/missing/inputs/image.png", "input_not_found"),
    ],
)
def test_input_references_other_than_stored_keys_are_refused_clearly(
    group_app: App, cell: str, code: str
) -> None:
    client, services = group_app
    _, audio = stored_inputs(services)
    response = post_csv(client, f"model,image,audio\nreference-talking-head,{cell},key:{audio}\n")
    assert response.status_code == 422
    details = response.get_json()["error"]["details"]
    assert [(d["column"], d["type"]) for d in details] == [("image", code)], details
    assert "key:<object key>" in details[0]["message"] or code in {"input_not_found", "upload_not_found"}


@pytest.mark.parametrize(
    ("send", "status", "code"),
    [
        (lambda c: c.post("/job-groups", json={"rows": []}), 415, "unsupported_media_type"),
        (lambda c: c.post("/job-groups", data=b"", content_type="text/csv"), 422, "invalid_manifest"),
        (lambda c: post_form(c, b"", "rows.csv"), 422, "invalid_manifest"),
        (lambda c: c.post("/job-groups", data={"name": "x"}, content_type="multipart/form-data"), 422,
         "missing_manifest"),
        (lambda c: post_form(c, t2v_csv(1).encode(), "rows.csv", image=b"\x89PNG"), 422, "unexpected_file"),
        (lambda c: post_form(c, b"%PDF-1.4", "rows.pdf"), 415, "unsupported_manifest_type"),
        (lambda c: post_csv(c, t2v_csv(1), **{"Idempotency-Key": ""}), 400, "invalid_idempotency_key"),
        (lambda c: c.post("/job-groups?name=" + "n" * 200, data=t2v_csv(1).encode(), content_type="text/csv"), 422,
         "invalid_name"),
    ],
)  # fmt: skip
def test_hostile_requests_are_refused_and_leave_nothing(
    group_app: App, send: Any, status: int, code: str
) -> None:
    client, services = group_app
    response = send(client)
    assert (response.status_code, response.get_json()["error"]["code"]) == (status, code), response.get_data()
    assert leftovers(services) == []


def test_size_and_row_limits_hold(tmp_path: Path, clean_redis: str, migrated_sqlite: Path) -> None:
    from jobservice.http.app import create_app
    from tests.unit.hostile import hostile_services

    services = hostile_services(tmp_path, migrated_sqlite, group_manifest_max_mb=1, group_max_rows=3)
    client = create_app(services=services).test_client()
    try:
        big = "model,prompt\n" + f"{T2V},{'x' * 1000}\n" * 1100
        response = post_csv(client, big)
        assert (response.status_code, response.get_json()["error"]["code"]) == (413, "manifest_too_large")
        response = post_form(client, big.encode(), "big.csv")
        assert (response.status_code, response.get_json()["error"]["code"]) == (413, "manifest_too_large")
        response = post_csv(client, t2v_csv(4))
        assert (response.status_code, response.get_json()["error"]["code"]) == (422, "too_many_rows")
        assert leftovers(services) == []
        created(post_csv(client, t2v_csv(3)))
    finally:
        services.db.dispose()


def test_quotas_apply_to_the_whole_group_and_group_jobs_are_not_interactive(group_app: App) -> None:
    client, services = group_app
    with services.db.session() as session:
        session.add(Tenant(name="default", limits={"group_jobs": 3, "active_jobs": 1, "jobs_per_hour": 5}))
    caches_expired(services)
    too_big = post_csv(client, t2v_csv(4))
    assert too_big.status_code == 429
    error = too_big.get_json()["error"]
    assert error["code"] == "quota_exceeded" and error["details"][0]["limit"] == "group_jobs"
    created(post_csv(client, t2v_csv(3)))
    # Queued group jobs do not count as interactive: the tenant may still submit one job of its own.
    with services.db.session() as session:
        assert session.scalar(
            select(TenantUsageCount.active_jobs).where(TenantUsageCount.tenant == "default")
        ) in (
            0,
            None,
        )
    assert client.post("/jobs", json={"model": T2V, "prompt": "solo", "num_frames": 8}).status_code == 202
    over_hour = post_csv(client, t2v_csv(2))  # 3 + 1 + 2 > 5 jobs this hour
    assert (
        over_hour.status_code == 429
        and over_hour.get_json()["error"]["details"][0]["limit"] == "jobs_per_hour"
    )
    quota = client.get("/quota").get_json()
    assert quota["limits"]["group_jobs"] == 3 and quota["usage"]["active_batch_jobs"] == 3
    assert quota["usage"]["active_jobs"] == 1


def test_an_idempotency_key_replays_the_group_and_refuses_another_manifest(group_app: App) -> None:
    client, services = group_app
    first = created(post_csv(client, t2v_csv(2), **{"Idempotency-Key": "once"}))
    replay = post_csv(client, t2v_csv(2), **{"Idempotency-Key": "once"})
    assert replay.status_code == 200 and replay.headers["Idempotent-Replayed"] == "true"
    assert replay.get_json()["id"] == first["id"] and len(group_jobs(services, first["id"])) == 2
    other = post_csv(client, t2v_csv(3), **{"Idempotency-Key": "once"})
    assert (other.status_code, other.get_json()["error"]["code"]) == (409, "idempotency_conflict")


def test_cancel_stops_every_unfinished_job(group_app: App) -> None:
    client, services = group_app
    group = created(post_csv(client, t2v_csv(4)))
    jobs = group_jobs(services, group["id"])
    finish_job(services, str(jobs[0].id), video=SAMPLES / "portrait.png")  # any bytes will do as a video
    with services.db.session() as session:  # one job running on a card
        from jobservice.jobs.transitions import claim_job

        assert claim_job(session, jobs[1].id, worker_id="w1@test", lease_seconds=30) is not None
    response = client.post(f"/job-groups/{group['id']}/cancel")
    assert response.status_code == 202
    view = response.get_json()
    assert view["cancel_requested"] is True and view["status"] == "running" and view["canceled_at"]
    assert (view["progress"]["succeeded"], view["progress"]["running"], view["progress"]["canceled"]) == (
        1,
        1,
        2,
    )
    with services.db.session() as session:
        running = get_job(session, jobs[1].id)
        assert running is not None and running.cancel_requested_at is not None
        events = list(session.scalars(select(JobEvent.detail).where(JobEvent.job_id == jobs[2].id)))
    assert events[-1] == "canceled with its job group"
    from jobservice.jobs.transitions import Owner, mark_canceled

    with services.db.session() as session:  # the worker stops at its next step
        mark_canceled(session, jobs[1].id, owner=Owner(worker_id="w1@test", attempt=1))
    ended = client.get(f"/job-groups/{group['id']}").get_json()
    assert ended["status"] == "canceled" and ended["finished_at"] and "cancel" not in ended["links"]
    again = client.post(f"/job-groups/{group['id']}/cancel")
    assert (again.status_code, again.get_json()["error"]["code"]) == (409, "group_finished")


def test_results_csv_and_the_zip_of_videos_are_streamed(group_app: App, tmp_path: Path) -> None:
    client, services = group_app
    group = created(post_csv(client, t2v_csv(3)))
    jobs = group_jobs(services, group["id"])
    video = tmp_path / "v.mp4"
    video.write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 4096)  # 1 MB: several chunks
    finish_job(services, str(jobs[0].id), video=video)
    finish_job(services, str(jobs[1].id), video=video, verdict="failed")
    client.post(f"/job-groups/{group['id']}/cancel")
    view = client.get(f"/job-groups/{group['id']}").get_json()
    assert view["status"] == "canceled" and view["progress"]["fraction"] == 1.0

    with client.get(f"/job-groups/{group['id']}/results") as response:
        assert response.is_streamed and response.mimetype == "text/csv"
        assert "attachment" in response.headers["Content-Disposition"]
        text = response.get_data(as_text=True)
    import csv

    rows = list(csv.DictReader(io.StringIO(text)))
    assert [(r["row"], r["job_id"], r["status"], r["verdict"]) for r in rows] == [
        ("1", str(jobs[0].id), "succeeded", "passed"),
        ("2", str(jobs[1].id), "failed", "failed"),
        ("3", str(jobs[2].id), "canceled", ""),
    ]
    assert rows[0]["video_url"] == f"http://localhost/jobs/{jobs[0].id}/video" and not rows[1]["video_url"]
    assert rows[1]["error_code"] == "validation_failed" and rows[2]["error_code"] == "canceled"

    with client.get(f"/job-groups/{group['id']}/outputs", buffered=False) as response:
        assert response.is_streamed and response.mimetype == "application/zip"
        pieces = [bytes(piece) for piece in response.iter_encoded()]
    assert len(pieces) > 3  # handed on as it is written, not built whole
    archive = zipfile.ZipFile(io.BytesIO(b"".join(pieces)))
    assert archive.namelist() == [f"row-00001-{jobs[0].id}.mp4", "results.csv"]
    assert archive.read(f"row-00001-{jobs[0].id}.mp4") == video.read_bytes()
    assert archive.testzip() is None
    assert archive.read("results.csv").decode() == text


def test_the_stream_sends_the_group_and_ends_when_every_job_has(group_app: App) -> None:
    client, _ = group_app
    group = created(post_csv(client, t2v_csv(2)))
    client.post(f"/job-groups/{group['id']}/cancel")
    with client.get(f"/job-groups/{group['id']}/stream") as response:
        assert response.mimetype == "text/event-stream"
        blocks = parse_sse(response.get_data(as_text=True))
    events = [b.get("event") for b in blocks if "event" in b]
    assert events == ["status", "end"]
    final = json.loads(blocks[-1]["data"])
    assert final["status"] == "canceled" and final["progress"]["canceled"] == 2
    missing = client.get(f"/job-groups/{uuid.uuid4()}/stream")
    assert (missing.status_code, missing.get_json()["error"]["code"]) == (404, "group_not_found")


def test_groups_belong_to_their_tenant(kclient: Any, keys: Any, keyed_services: Services) -> None:
    as_alice, as_bob, as_admin = (bearer(k) for k in (keys.alice, keys.bob, keys.admin))
    response = kclient.post(
        "/job-groups", data=t2v_csv(2).encode(), content_type="text/csv", headers=as_alice
    )
    group = created(response)
    assert group["tenant"] == "acme"
    assert all(j.tenant == "acme" for j in group_jobs(keyed_services, group["id"]))
    for path in ("", "/jobs", "/results", "/outputs", "/stream"):
        refused = kclient.get(f"/job-groups/{group['id']}{path}", headers=as_bob)
        assert (refused.status_code, refused.get_json()["error"]["code"]) == (404, "group_not_found"), path
    assert kclient.post(f"/job-groups/{group['id']}/cancel", headers=as_bob).status_code == 404
    assert kclient.get("/job-groups", headers=as_bob).get_json()["groups"] == []
    assert [g["id"] for g in kclient.get("/job-groups", headers=as_admin).get_json()["groups"]] == [
        group["id"]
    ]
    assert kclient.get(f"/job-groups/{group['id']}", headers=as_admin).status_code == 200
    # Bob cannot name Alice's stored files either: they read as missing.
    image, audio = stored_inputs(keyed_services, tenant="acme")
    manifest = f"model,image,audio\nreference-talking-head,key:{image},key:{audio}\n".encode()
    stolen = kclient.post("/job-groups", data=manifest, content_type="text/csv", headers=as_bob)
    assert {d["type"] for d in stolen.get_json()["error"]["details"]} == {"input_not_found"}
    own = kclient.post("/job-groups", data=manifest, content_type="text/csv", headers=as_alice)
    assert own.status_code == 202, own.get_data(as_text=True)


def test_retention_deletes_a_groups_inputs_once_every_job_expired(group_app: App) -> None:
    client, services = group_app
    image, audio = stored_inputs(services)
    group = created(post_csv(client, f"model,image,audio\nreference-talking-head,key:{image},key:{audio}\n"))
    prefix = f"groups/{group['id']}/"
    client.post(f"/job-groups/{group['id']}/cancel")
    sweep_expired(services, now=utcnow())
    assert list(services.store.list(prefix))  # the jobs have not expired yet
    later = utcnow() + timedelta(hours=services.settings.retention_hours + 1)
    result = sweep_expired(services, now=later)
    assert result.group_inputs == [group["id"]] and list(services.store.list(prefix)) == []
    # A prefix whose group row never came to be (an interrupted creation) is an orphan.
    services.store.put_file(f"groups/{uuid.uuid4()}/inputs/sha256/x.png", SAMPLES / "portrait.png")
    found = OrphanResult(dry_run=True)
    sweep_store_orphans(services, now=utcnow() + timedelta(hours=2), result=found)
    assert [p for p in found.prefixes if p.startswith("groups/")] != []


def test_a_group_has_no_job_status_of_its_own_to_drift(group_app: App) -> None:
    """The group's status is counted from its jobs whenever it is read: a job that ends by any path
    (a worker, the reaper, a cancel of that job alone) shows at once."""
    client, services = group_app
    group = created(post_csv(client, t2v_csv(2)))
    jobs = group_jobs(services, group["id"])
    assert client.post(f"/jobs/{jobs[0].id}/cancel").status_code == 202
    view = client.get(f"/job-groups/{group['id']}").get_json()
    assert view["status"] == "running" and view["progress"]["canceled"] == 1 and view["canceled_at"] is None
    with services.db.session() as session:
        statuses = session.execute(select(Job.status).where(Job.group_id == uuid.UUID(group["id"]))).scalars()
        assert sorted(JobStatus(s).value for s in statuses) == ["canceled", "queued"]


def test_the_dispatcher_takes_a_groups_jobs_in_row_order_below_interactive_ones(group_app: App) -> None:
    """Through the real dispatch round (the fleet policy over the database), a group's jobs of one
    model go out in row order, and an interactive job submitted after them goes first."""
    from jobservice.fleet.dispatch import dispatch
    from jobservice.jobs.transitions import request_cancel
    from tests.factories import online_group

    client, services = group_app
    group = created(post_csv(client, t2v_csv(3)))
    rows = {str(j.id): j.group_row for j in group_jobs(services, group["id"])}
    solo = client.post("/jobs", json={"model": T2V, "prompt": "solo", "num_frames": 8}).get_json()["id"]
    online_group(services.db, "g1", [T2V])
    sent: list[str] = []
    for _ in range(4):
        handed = dispatch(services.db, services.catalog, services.settings, lambda message: None)
        assert len(handed) == 1
        sent.append(str(handed[0].job_id))
        with services.db.session() as session:  # it ends: the group is free for the next one
            request_cancel(session, handed[0].job_id)
    assert sent[0] == solo and [rows[j] for j in sent[1:]] == [1, 2, 3]

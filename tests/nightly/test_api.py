"""``/batches`` over a real Redis and SQLite: creation, refusals, finishing, reports, comparison.

Jobs are finished "by hand" with synthetic RunReports (tests/nightly/helpers.py) so the numbers
are exact; tests/nightly/test_e2e.py runs the same paths through real workers.
"""

from __future__ import annotations

import csv
import io
import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import delete, func, select, update

from jobservice.db.tables import Batch, Job, JobGroup, utcnow
from jobservice.jobs.watch import SetState, read_set_states
from jobservice.nightly.plan import plan_batch
from jobservice.nightly.service import cancel_batch, create_batch
from jobservice.nightly.spec import parse_spec
from tests.nightly.helpers import a2v_case, batch_jobs, finish_jobs, spec, steady, t2v_case
from tests.unit.test_streams import parse_sse

pytestmark = pytest.mark.integration


def create(client: Any, body: dict[str, Any], **headers: str) -> dict[str, Any]:
    response = client.post("/batches", json={"spec": body}, headers=headers)
    assert response.status_code in (200, 202), response.get_data(as_text=True)
    return dict(response.get_json())


def show(client: Any, batch_id: str) -> dict[str, Any]:
    response = client.get(f"/batches/{batch_id}")
    assert response.status_code == 200, response.get_data(as_text=True)
    return dict(response.get_json())


def counts(services: Any) -> tuple[int, int]:
    with services.db.session() as s:
        return s.scalar(select(func.count()).select_from(Batch)), s.scalar(
            select(func.count()).select_from(Job)
        )


def test_a_batch_queues_its_jobs_below_interactive_ones(bclient: Any, bservices: Any) -> None:
    response = bclient.post("/batches", json={"spec": spec(t2v_case(repeat=2), a2v_case())})
    assert response.status_code == 202, response.get_data(as_text=True)
    body = response.get_json()
    assert response.headers["Location"] == f"/batches/{body['id']}"
    assert body["status"] == "running" and body["progress"]["total"] == 3 and body["progress"]["queued"] == 3
    jobs = batch_jobs(bservices, body["id"])
    assert [(j.batch_case, j.batch_repeat) for j in jobs] == [("t2v", 0), ("face", 0), ("t2v", 1)]
    assert {(j.priority, j.source) for j in jobs} == {(6, "batch")}
    assert jobs[0].idempotency_key == f"batch:{body['id']}:t2v:0"
    assert jobs[1].input_meta["image"]["format"] == "PNG" and jobs[1].input_meta["audio"]["duration_s"] > 7
    keys = sorted(o.key for o in bservices.store.list(f"groups/{body['id']}/inputs/"))
    digests = {name: jobs[1].input_meta[name]["sha256"] for name in ("audio", "image")}
    assert keys == [
        f"groups/{body['id']}/inputs/sha256/{digests['image']}.png",
        f"groups/{body['id']}/inputs/sha256/{digests['audio']}.wav",
    ] or keys == sorted(jobs[1].input_keys.values()), keys
    # The job refers to the batch's stored inputs: no copy under jobs/<id>/.
    assert sorted(jobs[1].input_keys.values()) == keys
    assert not list(bservices.store.list(f"jobs/{jobs[1].id}/"))
    # No card group is online: the jobs wait in the table (no message is sent for a job no group
    # takes yet), and an interactive job goes ahead of them.
    r = redis.Redis.from_url(bservices.settings.broker_url)
    assert all(j.dispatched_to is None for j in jobs) and not r.keys("group.*")
    assert bclient.post("/jobs", json={"task": "text2video", "prompt": "now"}).status_code == 202
    queued = bclient.get(f"/jobs/{jobs[0].id}").get_json()
    assert queued["queue_position"] is None, "no group may run it: it has no place in any order yet"


def test_yaml_bodies_and_spec_paths(bclient: Any, root: Path) -> None:
    text = "name: yaml-spec\ncases:\n  - {name: a, model: reference-t2v, params: {prompt: x}, repeat: 1}\n"
    response = bclient.post("/batches", data=text, content_type="application/yaml")
    assert response.status_code == 202, response.get_data(as_text=True)
    (root / "specs").mkdir()
    (root / "specs" / "n.yaml").write_text(
        "name: from-path\ncases:\n  - name: face\n    model: reference-talking-head\n    repeat: 1\n"
        "    inputs: {image: ../portrait.png, audio: ../speech.wav}\n"
    )
    response = bclient.post("/batches", json={"spec_path": "specs/n.yaml"})
    assert response.status_code == 202, response.get_data(as_text=True)
    assert response.get_json()["origin"] == "specs/n.yaml"


BAD_SPECS = [
    (spec(t2v_case(model="no-such-model")), "invalid_spec", "no-such-model"),
    (spec(t2v_case(params={"prompt": "x", "width": 65})), "invalid_spec", "width"),
    (spec(a2v_case(inputs={"image": "portrait.png"})), "invalid_spec", "audio"),
    (spec(a2v_case(inputs={"image": "../../etc/passwd", "audio": "speech.wav"})), "invalid_spec", "outside"),
    (spec(a2v_case(inputs={"image": "/etc/hostname", "audio": "speech.wav"})), "invalid_spec", "relative"),
    (spec(a2v_case(inputs={"image": "missing.png", "audio": "speech.wav"})), "invalid_spec", "no file"),
    (spec(a2v_case(inputs={"image": "speech.wav", "audio": "speech.wav"})), "invalid_spec", "image"),
    (
        spec(a2v_case(inputs={"image": "portrait.png", "audio": {"key": "nope.wav"}})),
        "invalid_spec",
        "no object",
    ),
    (spec(t2v_case(inputs={"image": "portrait.png"})), "invalid_spec", "takes no input"),
    ({"name": "x"}, "invalid_spec", "cases"),
]


@pytest.mark.parametrize(("body", "code", "says"), BAD_SPECS)
def test_bad_specs_are_422_and_leave_nothing(
    bclient: Any, bservices: Any, body: dict[str, Any], code: str, says: str
) -> None:
    response = bclient.post("/batches", json={"spec": body})
    assert response.status_code == 422, response.get_data(as_text=True)
    error = response.get_json()["error"]
    assert error["code"] == code and says in json.dumps(error), error
    assert counts(bservices) == (0, 0)
    assert not list(bservices.store.list("groups/"))


@pytest.mark.parametrize(
    ("kwargs", "status", "code"),
    [
        ({"data": "x", "content_type": "application/octet-stream"}, 415, "unsupported_media_type"),
        ({"data": "{", "content_type": "application/json"}, 400, "invalid_json"),
        ({"json": {"spec": {}, "spec_yaml": "a: 1"}}, 422, "invalid_spec"),
        ({"json": {"spec_yaml": 3}}, 422, "invalid_spec"),
        ({"json": {"spec_path": "../x.yaml"}}, 422, "invalid_spec"),
        ({"json": {"spec_path": "nope.yaml"}}, 422, "invalid_spec"),
        ({"data": "name: [", "content_type": "text/yaml"}, 422, "invalid_spec"),
        ({"json": {"spec": [1, 2]}}, 422, "invalid_spec"),
    ],
)
def test_malformed_requests_are_4xx(bclient: Any, kwargs: dict[str, Any], status: int, code: str) -> None:
    response = bclient.post("/batches", **kwargs)
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.get_json()["error"]["code"] == code


def test_lookups_and_actions_in_the_wrong_state(bclient: Any) -> None:
    for path in ("/batches/nope", "/batches/00000000-0000-0000-0000-000000000000/report"):
        assert bclient.get(path).get_json()["error"]["code"] == "batch_not_found"
    assert bclient.get("/batches?limit=0").status_code == 422
    assert bclient.get("/batches?status=sleeping").get_json()["error"]["code"] == "invalid_status"
    assert bclient.get("/batches/compare?baseline=x").get_json()["error"]["code"] == "missing_parameter"
    batch = create(bclient, spec(t2v_case(repeat=1)))
    assert bclient.get(f"/batches/{batch['id']}/report").get_json()["error"]["code"] == "batch_not_finished"
    assert bclient.get(f"/batches/{batch['id']}/report?format=pdf").status_code == 422
    assert bclient.post(f"/batches/{batch['id']}/pin").get_json()["error"]["code"] == "batch_not_finished"
    assert bclient.post(f"/batches/{batch['id']}/cancel").status_code == 202
    assert bclient.post(f"/batches/{batch['id']}/cancel").get_json()["error"]["code"] == "batch_finished"


def test_idempotency_key_replays_and_conflicts(bclient: Any, bservices: Any) -> None:
    first = bclient.post(
        "/batches", json={"spec": spec(t2v_case(repeat=1))}, headers={"Idempotency-Key": "n1"}
    )
    again = bclient.post(
        "/batches", json={"spec": spec(t2v_case(repeat=1))}, headers={"Idempotency-Key": "n1"}
    )
    assert first.status_code == 202 and again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true" and again.get_json()["id"] == first.get_json()["id"]
    other = bclient.post(
        "/batches", json={"spec": spec(t2v_case(repeat=2))}, headers={"Idempotency-Key": "n1"}
    )
    assert other.status_code == 409 and other.get_json()["error"]["code"] == "idempotency_conflict"
    assert counts(bservices) == (1, 1)


def test_finish_compare_report_and_pin(bclient: Any, bservices: Any) -> None:
    # The drift between runs of a quiet card (the synthetic reports say "cpu", whose 2 % would hide 5 %).
    body = spec(t2v_case(repeat=3), t2v_case(name="other", repeat=3), assumed_drift=0.005)
    first = create(bclient, body)
    finish_jobs(bservices, first["id"], generate_ms=steady(1000, jitter=0.005))
    done = show(bclient, first["id"])
    assert done["status"] == "finished" and done["verdict"] == "no_baseline"

    # 5 % slower on one case, with the same tiny noise: flagged, and listed first.
    second = create(bclient, body)
    finish_jobs(
        bservices,
        second["id"],
        generate_ms=lambda j: steady(1050 if j.batch_case == "other" else 1000, jitter=0.005)(j),
    )
    view = show(bclient, second["id"])
    assert view["verdict"] == "regressed" and view["baseline_id"] == first["id"]
    regressed = [c for c in view["cases"] if c["verdict"] == "regressed"]
    assert [c["name"] for c in regressed] == ["other"] and "generate time +5.0%" in regressed[0]["reasons"][0]

    report = bclient.get(f"/batches/{second['id']}/report").get_json()
    assert report["cases"][0]["case"] == "other" and report["cases"][0]["verdict"] == "regressed"
    gen = report["cases"][0]["metrics"]["generate_ms"]
    assert gen["median"] == pytest.approx(1052.1, rel=1e-4) and gen["change"] == pytest.approx(0.05, abs=1e-4)
    assert report["environment"]["created_by"]["host"] and report["environment"]["runs"]["versions"]["torch"]
    rows = list(
        csv.DictReader(
            io.StringIO(bclient.get(f"/batches/{second['id']}/report?format=csv").get_data(as_text=True))
        )
    )
    assert [r["case"] for r in rows] == ["other", "t2v"] and rows[0]["verdict"] == "regressed"
    assert float(rows[0]["generate_ms_change"]) == pytest.approx(0.05, abs=1e-4)
    markdown = bclient.get(f"/batches/{second['id']}/report?format=md").get_data(as_text=True)
    assert "REGRESSED" in markdown.splitlines()[0] and "## Needs attention" in markdown
    assert markdown.index("**other**") < markdown.index("| t2v |")
    stored = bservices.store.get_bytes(f"groups/{second['id']}/report.md").decode()
    assert stored == markdown

    compared = bclient.get(f"/batches/compare?baseline={first['id']}&candidate={second['id']}").get_json()
    assert compared["verdict"] == "regressed" and compared["counts"]["ok"] == 1

    # A regressed run is not "good": the next run is compared with the first again, and a pinned
    # run (accepted as the new normal) always wins.
    accepted = bclient.post(f"/batches/{second['id']}/pin").get_json()
    assert accepted["pinned"] is True and accepted["links"]["accept"] == f"/batches/{second['id']}/pin"
    third = create(bclient, body)
    finish_jobs(
        bservices,
        third["id"],
        generate_ms=lambda j: steady(1055 if j.batch_case == "other" else 998, jitter=0.01)(j),
    )
    view = show(bclient, third["id"])
    assert view["baseline_id"] == second["id"] and view["verdict"] == "passed", view
    assert bclient.post(f"/batches/{second['id']}/unpin").get_json()["pinned"] is False
    listed = bclient.get("/batches?name=nightly-test").get_json()["batches"]
    assert [b["id"] for b in listed] == [third["id"], second["id"], first["id"]]


def test_failures_changed_frames_and_changed_cases(bclient: Any, bservices: Any) -> None:
    body = spec(t2v_case(repeat=2), t2v_case(name="gate", repeat=2), assumed_drift=0.005)
    first = create(bclient, body)
    finish_jobs(bservices, first["id"], generate_ms=steady(500))
    second = create(bclient, body)
    finish_jobs(
        bservices,
        second["id"],
        generate_ms=steady(500),
        frames=lambda j: [f"{i + (j.batch_case == 't2v'):016x}" for i in range(8)],
        fail=lambda j: "validation_failed" if j.batch_case == "gate" and j.batch_repeat == 1 else None,
    )
    view = show(bclient, second["id"])
    assert view["verdict"] == "failed"
    verdicts = {c["name"]: c for c in view["cases"]}
    assert (
        verdicts["gate"]["verdict"] == "failed" and "failed the output gate" in verdicts["gate"]["reasons"][0]
    )
    assert (
        verdicts["t2v"]["verdict"] == "regressed"
        and "output frames changed (8 of 8)" in verdicts["t2v"]["reasons"]
    )
    changed = spec(
        t2v_case(repeat=2, params={"prompt": "another", "seed": 1}),
        t2v_case(name="gate", repeat=2),
        assumed_drift=0.005,
    )
    third = create(bclient, changed)
    finish_jobs(bservices, third["id"], generate_ms=steady(500))
    cases = {c["name"]: c["verdict"] for c in show(bclient, third["id"])["cases"]}
    assert cases == {"t2v": "changed", "gate": "ok"}


def test_cancel_then_resume_runs_only_what_did_not_finish(bclient: Any, bservices: Any) -> None:
    batch = create(bclient, spec(t2v_case(repeat=2), t2v_case(name="b", repeat=2)))
    first = batch_jobs(bservices, batch["id"])[0]
    finish_jobs(bservices, batch["id"], generate_ms=steady(100), only=lambda j: j.id == first.id)
    assert bclient.post(f"/batches/{batch['id']}/cancel").get_json()["status"] == "canceled"
    statuses = sorted(j.status for j in batch_jobs(bservices, batch["id"]))
    assert statuses == ["canceled", "canceled", "canceled", "succeeded"]
    resumed = bclient.post(f"/batches/{batch['id']}/resume")
    assert resumed.status_code == 202 and resumed.get_json()["status"] == "running"
    after = batch_jobs(bservices, batch["id"])
    assert len(after) == 7, "three canceled slots got a new job; the finished one did not"
    assert (
        sum(1 for j in after if (j.batch_case, j.batch_repeat) == (first.batch_case, first.batch_repeat)) == 1
    )
    assert {j.idempotency_key for j in after if j.status == "queued"} == {
        f"batch:{batch['id']}:t2v:1:1",
        f"batch:{batch['id']}:b:0:1",
        f"batch:{batch['id']}:b:1:1",
    }
    finish_jobs(bservices, batch["id"], generate_ms=steady(100))
    assert show(bclient, batch["id"])["status"] == "finished"
    assert bclient.post(f"/batches/{batch['id']}/resume").get_json()["error"]["code"] == "batch_finished"


@pytest.mark.postgres
def test_batches_on_postgres(pg_url: str, clean_redis: str, root: Path, tmp_path: Path) -> None:
    from jobservice.http.app import create_app
    from jobservice.wiring import build_services
    from tests.conftest import make_settings

    services = build_services(
        make_settings(tmp_path / "pgvar", broker_url=clean_redis, batch_root=root, database_url=pg_url)
    )
    try:
        client = create_app(services=services).test_client()
        body = spec(t2v_case(repeat=2), a2v_case())
        ids = [create(client, body)["id"] for _ in range(2)]
        for batch_id, base in zip(ids, (500, 600), strict=True):
            finish_jobs(services, batch_id, generate_ms=steady(base))
        view = show(client, ids[1])
        assert view["verdict"] == "regressed" and view["baseline_id"] == ids[0]
        assert client.post(f"/batches/{ids[0]}/pin").get_json()["pinned"] is True
        assert (
            client.get("/batches?name=nightly-test&status=finished").get_json()["batches"][0]["id"] == ids[1]
        )
    finally:
        services.db.dispose()


def test_a_zero_baseline_median_finishes_and_every_view_answers(bclient: Any, bservices: Any) -> None:
    body = spec(t2v_case(repeat=3), metrics=["generate_ms", "peak_mb"], primary="peak_mb")
    first = create(bclient, body)
    finish_jobs(bservices, first["id"], generate_ms=steady(100), memory=lambda j: {"peak_mb": 0.0})
    second = create(bclient, body)
    finish_jobs(
        bservices,
        second["id"],
        generate_ms=steady(100),
        memory=lambda j: {"peak_mb": 5.0 if j.batch_repeat else 0.0},
    )
    view = show(bclient, second["id"])
    assert view["status"] == "finished" and view["verdict"] == "regressed"
    assert view["cases"][0]["reasons"] == ["peak device memory rose from 0 to 5 MB"]
    compared = bclient.get(f"/batches/compare?baseline={first['id']}&candidate={second['id']}")
    assert compared.status_code == 200 and compared.get_json()["verdict"] == "regressed"
    page = bclient.get(f"/ui/batches/{second['id']}")
    assert page.status_code == 200 and "rose from 0 to 5 MB" in page.get_data(as_text=True)
    assert bclient.get(f"/batches/{second['id']}/report?format=md").status_code == 200


BAD_KEYS = ["../x", "/etc/passwd", "a//b"]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_unsafe_input_keys_are_422(bclient: Any, bservices: Any, key: str) -> None:
    body = spec(a2v_case(inputs={"image": {"key": key}, "audio": "speech.wav"}))
    response = bclient.post("/batches", json={"spec": body})
    assert response.status_code == 422, response.get_data(as_text=True)
    error = response.get_json()["error"]
    assert error["code"] == "invalid_spec" and error["details"][0]["field"] == "cases.0.inputs.image.key"
    assert counts(bservices) == (0, 0)


def test_odd_limits_are_422(bclient: Any) -> None:
    for limit in ("²", "٣٣٣٣", "1" * 5000, "-1", "1.5", "101"):
        response = bclient.get("/batches", query_string={"limit": limit})
        assert response.status_code == 422, (limit, response.status_code)
        assert response.get_json()["error"]["code"] == "invalid_limit"
    assert bclient.get("/batches", query_string={"limit": "٣"}).status_code == 200, "Arabic-Indic 3"


def test_only_yaml_and_json_bodies_are_accepted(bclient: Any, bservices: Any) -> None:
    text = "name: yaml-spec\ncases:\n  - {name: a, model: reference-t2v, params: {prompt: x}, repeat: 1}\n"
    # text/plain is what a form on another site can send without the browser asking first.
    refused = bclient.post("/batches", data=text, content_type="text/plain")
    assert refused.status_code == 415 and refused.get_json()["error"]["code"] == "unsupported_media_type"
    for mime in ("application/yaml", "application/x-yaml", "text/yaml"):
        assert bclient.post("/batches", data=text, content_type=mime).status_code in (200, 202), mime
    assert counts(bservices)[0] == 3


def test_oversized_and_hostile_bodies_are_4xx(bclient: Any, bservices: Any) -> None:
    huge = "# padding\n" * (2 * 2**20 // 10 + 10)
    response = bclient.post("/batches", data=huge, content_type="application/yaml")
    assert response.status_code == 413 and response.get_json()["error"]["code"] == "spec_too_large"
    big_yaml = {"spec_yaml": "name: x\n" + "#" * 2**20}
    response = bclient.post("/batches", json=big_yaml)
    assert response.status_code == 422 and "larger than" in response.get_json()["error"]["message"]
    deep = bclient.post("/batches", data="[" * 100_000, content_type="application/json")
    assert deep.status_code == 400 and deep.get_json()["error"]["code"] == "invalid_json"
    bomb = 'name: x\na: &a ["lol", "lol"]\nb: [*a, *a]\ncases: []\n'
    response = bclient.post("/batches", data=bomb, content_type="application/yaml")
    assert response.status_code == 422 and "anchors and aliases" in response.get_json()["error"]["message"]
    assert counts(bservices) == (0, 0)


def test_idempotency_keys_up_to_255_characters(bclient: Any, bservices: Any) -> None:
    body = {"spec": spec(t2v_case(repeat=1))}
    longest = "k" * 255
    first = bclient.post("/batches", json=body, headers={"Idempotency-Key": longest})
    again = bclient.post("/batches", json=body, headers={"Idempotency-Key": longest})
    assert first.status_code == 202 and again.status_code == 200
    assert again.get_json()["id"] == first.get_json()["id"]
    with bservices.db.session() as s:
        stored = s.scalar(select(Batch.idempotency_key))
    assert stored is not None and len(stored) <= 255, "fits the column (PostgreSQL enforces it)"
    refused = bclient.post("/batches", json=body, headers={"Idempotency-Key": "k" * 256})
    assert refused.status_code == 400 and "1-255" in refused.get_json()["error"]["message"]


def test_an_interrupted_creation_leaves_no_batch(bservices: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def crash(*_: Any, **__: Any) -> None:
        raise KeyboardInterrupt  # the process dies while the inputs are being stored

    monkeypatch.setattr(bservices.store, "put_file", crash)
    with plan_batch(
        bservices, parse_spec(spec(a2v_case())), confine_to=bservices.settings.batch_root
    ) as plan:
        with pytest.raises(KeyboardInterrupt):
            create_batch(bservices, plan, source="cli")
    assert counts(bservices) == (0, 0), "no half-made batch for the tick to 'finish' empty"


def test_a_finished_batch_without_cases_is_never_a_baseline(bclient: Any, bservices: Any) -> None:
    stale = utcnow() - timedelta(minutes=10)
    # A finished batch with nothing in it (as such a row used to end) is no baseline, even pinned.
    empty = Batch(
        id=uuid.uuid4(),
        name="nightly-test",
        spec_digest="0" * 64,
        spec={},
        status="finished",
        verdict="no_baseline",
        pinned=True,
        results={"cases": [], "comparison": None},
        created_at=stale,
    )
    with bservices.db.session() as s:
        s.add(empty)
    batch = create(bclient, spec(t2v_case(repeat=1)))
    finish_jobs(bservices, batch["id"], generate_ms=steady(100))
    view = show(bclient, batch["id"])
    assert view["verdict"] == "no_baseline" and view["baseline_id"] is None
    refused = bclient.post(f"/batches/{empty.id}/pin")
    assert refused.status_code == 409 and refused.get_json()["error"]["code"] == "batch_empty"


def test_a_batch_canceled_as_soon_as_it_exists_cancels_every_job(bservices: Any) -> None:
    # A batch exists only with all its jobs (one transaction): a cancel right after creation, before
    # the dispatcher is woken, finds every one of them.
    def cancel_now(batch: Batch) -> None:
        cancel_batch(bservices, batch.id)

    with plan_batch(bservices, parse_spec(spec(t2v_case(repeat=3)))) as plan:
        batch, created = create_batch(bservices, plan, source="cli", on_recorded=cancel_now)
    assert created and batch.status == "canceled"
    jobs = batch_jobs(bservices, batch.id)
    assert [j.status for j in jobs] == ["canceled"] * 3


def test_the_list_counts_retried_slots_once(bclient: Any, bservices: Any) -> None:
    batch = create(bclient, spec(t2v_case(repeat=2), t2v_case(name="b", repeat=2)))
    first = batch_jobs(bservices, batch["id"])[0]
    finish_jobs(bservices, batch["id"], generate_ms=steady(100), only=lambda j: j.id == first.id)
    bclient.post(f"/batches/{batch['id']}/cancel")
    bclient.post(f"/batches/{batch['id']}/resume")
    other = create(bclient, spec(t2v_case(repeat=1), name="other-spec"))
    listed = {b["id"]: b for b in bclient.get("/batches").get_json()["batches"]}
    for one in (batch, other):
        alone = show(bclient, one["id"])
        assert listed[one["id"]] == {**alone, "cases": []}
    assert listed[batch["id"]]["progress"] | {"fraction": 0} == {
        "total": 4,
        "created": 4,
        "queued": 3,
        "running": 0,
        "succeeded": 1,
        "failed": 0,
        "canceled": 0,
        "fraction": 0,
    }
    listing = bclient.get("/ui/batches").get_data(as_text=True)
    assert '<option value="nightly-test">' in listing and '<option value="other-spec">' in listing


def test_the_stream_of_a_finished_batch_sends_its_view_and_ends(bclient: Any, bservices: Any) -> None:
    batch = create(bclient, spec(t2v_case(repeat=2)))
    finish_jobs(bservices, batch["id"], generate_ms=steady(1000, jitter=0.005))
    with bclient.get(f"/batches/{batch['id']}/stream") as response:
        assert response.mimetype == "text/event-stream"
        blocks = parse_sse(response.get_data(as_text=True))
    events = [b for b in blocks if "event" in b]
    assert [e["event"] for e in events] == ["status", "end"]
    assert json.loads(events[-1]["data"]) == show(bclient, batch["id"])
    with bclient.get(f"/batches/{batch['id']}/stream", headers={"Last-Event-ID": events[0]["id"]}) as resumed:
        assert [b.get("event") for b in parse_sse(resumed.get_data(as_text=True)) if "event" in b] == ["end"]


def test_a_batch_without_its_group_yet_is_watched_by_its_jobs(bclient: Any, bservices: Any) -> None:
    """A batch an older release made during an upgrade has no job group until this one touches it."""
    batch = create(bclient, spec(t2v_case(repeat=2)))
    ident = uuid.UUID(batch["id"])
    with bservices.db.session() as session:
        grouped = read_set_states(session, [ident])[ident]
        session.execute(update(Job).where(Job.batch_id == ident).values(group_id=None))
        session.execute(delete(JobGroup).where(JobGroup.id == ident))
    with bservices.db.session() as session:
        assert (
            read_set_states(session, [ident])[ident]
            == grouped
            == SetState((2, 0, 0, 0, 0), 0.0, False, "running")
        )

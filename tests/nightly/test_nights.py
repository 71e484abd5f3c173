"""Night after night through the service (real Redis and SQLite, synthetic reports): the history a
case is judged against, a pin that restarts it, episodes, disturbed runs run again, and adaptive
repeats, on every surface (API view, reports, web page, webhook)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import select

from jobservice.db.tables import WebhookDelivery
from tests.nightly.helpers import Timing, batch_jobs, finish_jobs, spec, steady, t2v_case

pytestmark = pytest.mark.integration

HOST = {
    "window_ms": 1000.0,
    "cpu_count": 2,
    "busy_cores": 1.0,
    "own_cores": 1.0,
    "other_cores": 0.0,
    "finishing_jobs": 0,
    "finishing_ms": 0.0,
    "undisturbed": True,
}


def night(
    client: Any, services: Any, body: dict[str, Any], generate_ms: Timing, **extra: Any
) -> dict[str, Any]:
    """Create a batch, finish its jobs with ``generate_ms``, and return its view once judged."""
    response = client.post("/batches", json={"spec": body})
    assert response.status_code == 202, response.get_data(as_text=True)
    batch_id = response.get_json()["id"]
    finish_jobs(services, batch_id, generate_ms=generate_ms, **extra)
    return dict(client.get(f"/batches/{batch_id}").get_json())


def primary(client: Any, batch_id: str, case: str = "t2v") -> dict[str, Any]:
    report = client.get(f"/batches/{batch_id}/report").get_json()
    row = next(c for c in report["cases"] if c["case"] == case)
    return dict(row["metrics"]["generate_ms"])


OFFSETS = [0.0, 0.01, -0.01, 0.005, -0.005, 0.008, -0.004, 0.002]  # nights' drift, about 0.7 %


def test_a_case_builds_a_history_and_a_pin_restarts_it(bclient: Any, bservices: Any) -> None:
    body = spec(t2v_case(repeat=3))
    views = [night(bclient, bservices, body, steady(1000 * (1 + d), jitter=0.004)) for d in OFFSETS[:6]]
    assert views[0]["verdict"] == "no_baseline"
    cold = primary(bclient, views[4]["id"])
    assert cold["mode"] == "cold_start" and cold["reference_runs"] == 1, "4 earlier runs: the cold start"
    judged = primary(bclient, views[5]["id"])
    assert judged["mode"] == "history" and judged["reference_runs"] == 5 and judged["df"] == 4
    assert judged["verdict"] in ("ok", "inconclusive") and judged["upper"] is not None

    slow = night(bclient, bservices, body, steady(1150, jitter=0.004))
    assert slow["verdict"] == "regressed" and slow["cases"][0]["upper"] > 0.10
    after = night(bclient, bservices, body, steady(1001, jitter=0.004))
    assert primary(bclient, after["id"])["reference_runs"] == 6, "the regressed night stays out"

    # Accepting the slow night as the new normal: the history restarts there, so the next night is a
    # cold start against it, and an unchanged-from-before night reads as an improvement.
    accepted = bclient.post(f"/batches/{slow['id']}/pin").get_json()
    assert accepted["pinned"] is True
    again = night(bclient, bservices, body, steady(1000, jitter=0.004))
    restarted = primary(bclient, again["id"])
    assert again["baseline_id"] == slow["id"] and restarted["mode"] == "cold_start"
    assert again["cases"][0]["verdict"] == "improved"


def test_an_unsure_night_opens_an_episode_and_the_next_night_pools_with_it(
    bclient: Any, bservices: Any
) -> None:
    body = spec(
        t2v_case(repeat=3), webhook="https://hooks.example.com/n", webhook_events_filter=["completed"]
    )
    drifts = [0.0, 0.025, -0.02, 0.015, -0.025, 0.02]  # a host whose nights move by 2 %
    for d in drifts:
        night(bclient, bservices, body, steady(1000 * (1 + d), jitter=0.004))
    first = night(bclient, bservices, body, steady(1060, jitter=0.004))
    opened = primary(bclient, first["id"])
    assert first["verdict"] == "inconclusive" and opened["episode"]["state"] == "open"
    mine = [e for e in first["episodes"] if e["metric"] == "generate_ms"]  # fps and RTF moved alike
    assert [(e["case"], e["night"], e["state"]) for e in mine] == [("t2v", 1, "open")]

    second = night(bclient, bservices, body, steady(1070, jitter=0.004))
    pooled = primary(bclient, second["id"])
    assert pooled["nights"] == 2 and pooled["reference_runs"] == 6, "against the reference from before it"
    assert pooled["alpha"] == pytest.approx(0.001 / 6)
    episode = next(e for e in second["episodes"] if e["metric"] == "generate_ms")
    assert episode["night"] == 2 and episode["first"] == first["id"]
    assert (episode["state"] == "closed") == (pooled["verdict"] != "inconclusive")

    markdown = bclient.get(f"/batches/{second['id']}/report?format=md").get_data(as_text=True)
    assert "## Episodes (nights that add up)" in markdown and "t2v: generate time:" in markdown
    html = bclient.get(f"/ui/batches/{second['id']}").get_data(as_text=True)
    assert "Episodes" in html and "night 2 of at most 4" in html
    with bservices.db.session() as session:
        payload = json.loads(
            session.scalars(
                select(WebhookDelivery.payload).where(WebhookDelivery.subject == f"batch:{second['id']}")
            ).one()
        )
    data = payload["data"]
    assert payload["type"] == "batch.completed" and {e["night"] for e in data["episodes"]} == {2}
    assert data["cases"][0]["name"] == "t2v" and data["cases"][0]["upper"] == pooled["upper"]
    assert data["links"]["accept"] == f"/batches/{second['id']}/pin" and "at most" in data["risk"]


def test_a_disturbed_run_is_run_again_before_the_night_is_judged(bclient: Any, bservices: Any) -> None:
    body = spec(t2v_case(repeat=3))
    response = bclient.post("/batches", json={"spec": body})
    batch_id = response.get_json()["id"]

    def host(job: Any) -> dict[str, Any]:
        return {
            **HOST,
            "disturbed": job.batch_repeat == 1,
            "other_cores": 0.9 if job.batch_repeat == 1 else 0.0,
        }

    finish_jobs(
        bservices, batch_id, generate_ms=lambda j: 5000.0 if j.batch_repeat == 1 else 1000.0, host=host
    )
    view = bclient.get(f"/batches/{batch_id}").get_json()
    assert view["status"] == "running" and view["progress"]["total"] == 4, "one more run queued"
    jobs = batch_jobs(bservices, batch_id)
    assert sorted(int(j.batch_repeat or 0) for j in jobs) == [0, 1, 2, 3]
    finish_jobs(bservices, batch_id, generate_ms=steady(1002), host=lambda j: {**HOST, "disturbed": False})
    view = bclient.get(f"/batches/{batch_id}").get_json()
    assert view["status"] == "finished"
    report = bclient.get(f"/batches/{batch_id}/report").get_json()
    case = report["cases"][0]
    assert case["metrics"]["generate_ms"]["median"] == 1000.0, "the disturbed run is left out"
    assert case["runs_added"]["reruns"] == 1 and case["repeats"] == 4


def test_adaptive_repeats_take_another_look_once_the_drift_is_known(bclient: Any, bservices: Any) -> None:
    """Three cases of 11 nights: their drifts agree, so pooled they have 30 degrees of freedom, and a
    night whose noise within runs hides a 4 % slowdown looks again with 6 repeats (at α/3 a look)."""
    body = spec(*(t2v_case(name=name, repeat=3) for name in ("a", "b", "c")))
    for d in [0.0, 0.004, -0.004, 0.002, -0.002, 0.003, -0.003, 0.001, -0.001, 0.004, -0.004]:
        night(bclient, bservices, body, steady(1000 * (1 + d), jitter=0.002))
    response = bclient.post("/batches", json={"spec": body})
    batch_id = response.get_json()["id"]
    noisy: Timing = steady(1000, jitter=0.05)
    finish_jobs(bservices, batch_id, generate_ms=noisy)
    view = bclient.get(f"/batches/{batch_id}").get_json()
    assert view["status"] == "running" and view["progress"]["total"] == 18, "each case looks again at 6"
    for _ in range(3):  # finish the looks it takes (at most 12 repeats a case)
        finish_jobs(bservices, batch_id, generate_ms=noisy)
        view = bclient.get(f"/batches/{batch_id}").get_json()
        if view["status"] == "finished":
            break
    assert view["status"] == "finished"
    judged = primary(bclient, batch_id, case="a")
    assert judged["alpha"] == pytest.approx(0.001 / 3) and judged["df"] > 10
    report = bclient.get(f"/batches/{batch_id}/report").get_json()
    added = report["cases"][0]["runs_added"]
    assert added["looks"] == 3 and added["level"] in (6, 12)

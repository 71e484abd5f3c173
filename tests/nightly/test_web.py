"""The batch pages: list, report with regressions first and inline SVG trends, pin with CSRF."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.nightly.helpers import Timing, finish_jobs, spec, steady, t2v_case

pytestmark = pytest.mark.integration

TOKEN = re.compile(r'name="csrf_token" value="([^"]+)"')


def create(client: Any, body: dict[str, Any]) -> str:
    response = client.post("/batches", json={"spec": body})
    assert response.status_code == 202, response.get_data(as_text=True)
    return str(response.get_json()["id"])


def zulu_slowed(slower: float, night: int) -> Timing:
    """One night's generate_ms: case "zulu" ``slower`` times the others, all ``night`` ms later."""
    return lambda job: steady(1000 * (slower if job.batch_case == "zulu" else 1.0) + night)(job)


def test_report_page_lists_regressions_first_with_trends(bclient: Any, bservices: Any) -> None:
    body = spec(t2v_case(name="alpha", repeat=3), t2v_case(name="zulu", repeat=3))
    ids = []
    for night, slower in enumerate([1.0, 1.0, 1.2]):
        ids.append(create(bclient, body))
        finish_jobs(
            bservices,
            ids[-1],
            generate_ms=zulu_slowed(slower, night),
        )
    running = create(bclient, body)

    page = bclient.get(f"/ui/batches/{ids[-1]}")
    assert page.status_code == 200 and page.mimetype == "text/html"
    html = page.get_data(as_text=True)
    assert "style-src 'self'" in page.headers["Content-Security-Policy"] and "style=" not in html
    assert "Needs attention" in html and html.index("<strong>zulu</strong>") < html.index(
        "<strong>alpha</strong>"
    )
    assert "+20.1%" in html and 'class="num flag"' in html
    assert html.count("<svg") >= 2 and "polyline" in html and 'fill="#b42318"' in html, (
        "the flagged run is red"
    )
    assert "last 3 finished runs" in html and "Environment" in html

    listing = bclient.get("/ui/batches").get_data(as_text=True)
    assert all(i[:8] in listing for i in [*ids, running]) and "regressed" in listing
    progress = bclient.get(f"/ui/batches/{running}").get_data(as_text=True)
    assert "Progress" in progress and 'http-equiv="refresh"' in progress

    missing = bclient.get("/ui/batches/not-a-batch")
    assert missing.status_code == 404 and "text/html" in missing.content_type

    assert bclient.post(f"/ui/batches/{ids[0]}/pin").status_code == 400, "no CSRF token, no pin"
    token = TOKEN.search(html)
    assert token
    pinned = bclient.post(f"/ui/batches/{ids[0]}/pin", data={"csrf_token": token.group(1)})
    assert pinned.status_code == 303
    assert bclient.get(f"/batches/{ids[0]}").get_json()["pinned"] is True
    with bclient.get("/ui/batches/static/batches.css") as css:
        assert css.status_code == 200 and b".v-regressed" in css.get_data()


def test_batch_pages_answer_errors_as_pages_with_the_security_headers(
    bclient: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import jobservice.http.web.batches as pages

    def broken(*_: Any, **__: Any) -> Any:
        raise RuntimeError("the database went away")

    monkeypatch.setattr(pages, "list_batches", broken)
    response = bclient.get("/ui/batches")
    assert response.status_code == 500 and response.mimetype == "text/html"
    assert "Something went wrong" in response.get_data(as_text=True)
    assert "the database went away" not in response.get_data(as_text=True)
    assert (
        response.headers["X-Frame-Options"] == "DENY"
        and "frame-ancestors" in response.headers["Content-Security-Policy"]
    )
    scripted = bclient.get("/ui/batches", headers={"Accept": "application/json"})
    assert scripted.status_code == 500 and scripted.get_json()["error"]["code"] == "internal_error"
    refused = bclient.post("/ui/batches/00000000-0000-0000-0000-000000000000/pin")
    assert refused.status_code == 400 and "security token is missing" in refused.get_data(as_text=True)
    assert refused.headers["Cache-Control"] == "no-store"


def test_the_jobs_list_ignores_a_limit_that_is_not_a_page_size(bclient: Any) -> None:
    for limit in ("²", "1" * 5000, "50"):
        response = bclient.get("/ui/jobs", query_string={"limit": limit})
        assert response.status_code == 200 and response.mimetype == "text/html", limit


def test_an_inconclusive_case_is_listed_under_could_not_tell(bclient: Any, bservices: Any) -> None:
    body = spec(t2v_case(name="calm", repeat=3), t2v_case(name="noisy", repeat=3), assumed_drift=0.005)

    def night(shift: float) -> Timing:
        return lambda job: steady(1000 + shift, jitter=0.06 if job.batch_case == "noisy" else 0.001)(job)

    first = create(bclient, body)
    finish_jobs(bservices, first, generate_ms=night(0))
    second = create(bclient, body)
    finish_jobs(bservices, second, generate_ms=night(20))
    view = bclient.get(f"/batches/{second}").get_json()
    assert view["verdict"] == "inconclusive", view
    assert {c["name"]: c["verdict"] for c in view["cases"]} == {"calm": "ok", "noisy": "inconclusive"}
    html = bclient.get(f"/ui/batches/{second}").get_data(as_text=True)
    assert "Could not tell" in html and "Needs attention" not in html
    assert 'class="badge v-inconclusive"' in html and 'class="num unsure"' in html
    assert "not ruled out; a regression needs" in html and "decide it" in html
    assert "What a verdict risks" in html and "Accept as the new normal" in html
    listing = bclient.get("/ui/batches").get_data(as_text=True)
    assert "inconclusive" in listing

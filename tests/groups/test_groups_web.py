"""The job-group pages: drop a manifest on ``/ui/groups``, see its problems by row and column or
its group's page, cancel it from there."""

from __future__ import annotations

import re
from typing import Any

from flask.testing import FlaskClient

from jobservice.wiring import Services
from tests.groups.conftest import group_jobs, t2v_csv
from tests.unit.hostile import leftovers
from tests.web.conftest import Browser

App = tuple[FlaskClient, Services]


def drop(browser: Browser, manifest: bytes, *, folder: bytes = b"", name: str = "") -> Any:
    files = {"manifest": (manifest, "rows.csv"), "files": (folder, "face.png" if folder else "")}
    return browser.post("/ui/groups", {"name": name}, files)


def test_a_dropped_manifest_becomes_a_group_with_its_page(group_app: App) -> None:
    client, services = group_app
    browser = Browser(client)
    page = browser.text("/ui/groups")
    assert 'id="group-form"' in page and "webkitdirectory" in page and "No job groups yet" in page
    response = drop(browser, t2v_csv(2).encode(), name="from the page")
    assert response.status_code == 303
    group_url = response.headers["Location"]
    group_id = group_url.rsplit("/", 1)[1]
    html = browser.text(group_url)
    assert "from the page" in html and "2 queued" in html and f"/job-groups/{group_id}/outputs" in html
    assert len(re.findall(r'<td class="num">\d</td>', html)) == 2  # its rows
    assert "from the page" in browser.text("/ui/groups")
    assert all(j.tenant == "default" for j in group_jobs(services, group_id))
    canceled = browser.post(f"/ui/groups/{group_id}/cancel")
    assert canceled.status_code == 303
    assert "badge-canceled" in browser.text(group_url)


def test_a_manifest_with_problems_comes_back_as_a_table_of_them(group_app: App) -> None:
    client, services = group_app
    browser = Browser(client)
    response = drop(browser, b"model,prompt,width\nreference-t2v,ok,64\nreference-t2v,,65\n")
    assert response.status_code == 422
    html = response.get_data(as_text=True)
    assert 'id="manifest-problems"' in html
    assert re.search(r'<td class="num">2</td><td class="num">3</td><td class="mono">width</td>', html)
    assert re.search(r'<td class="num">2</td><td class="num">3</td><td class="mono">prompt</td>', html)
    assert leftovers(services) == []


def test_a_folder_posted_without_the_script_is_refused_with_what_works(group_app: App) -> None:
    client, services = group_app
    browser = Browser(client)
    manifest = b"model,image,audio\nreference-talking-head,face.png,speech.wav\n"
    response = drop(browser, manifest, folder=b"\x89PNG\r\n")
    assert response.status_code == 422 and "upload:&lt;id&gt;" in response.get_data(as_text=True)
    as_script = browser.post(
        "/ui/groups",
        files={"manifest": (manifest, "rows.csv"), "files": (b"\x89PNG", "face.png")},
        headers={"Accept": "application/json"},
    )
    assert as_script.get_json()["error"]["code"] == "folder_needs_script"
    assert leftovers(services) == []


def test_the_form_needs_its_csrf_token(group_app: App) -> None:
    client, services = group_app
    response = Browser(client).post(
        "/ui/groups", files={"manifest": (t2v_csv(1).encode(), "r.csv")}, csrf=False
    )
    assert response.status_code == 400 and leftovers(services) == []


def test_a_groups_job_page_links_back_to_its_group(group_app: App) -> None:
    client, services = group_app
    browser = Browser(client)
    group_url = drop(browser, t2v_csv(2).encode()).headers["Location"]
    job = group_jobs(services, group_url.rsplit("/", 1)[1])[1]
    html = browser.text(f"/ui/jobs/{job.id}")
    assert f'row 2 of <a href="{group_url}">its job group</a>' in html

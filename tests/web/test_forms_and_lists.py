"""The web UI's new-job form and jobs list through the Flask test client (real Redis, SQLite, store)."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from jobservice.db.tables import Job
from jobservice.fleet import eta
from jobservice.fleet.presence import announce_worker
from tests.factories import online_group
from tests.web.conftest import Browser, load

pytestmark = pytest.mark.integration

XSS = "<script>alert(1)</script>"


def job_ids(services: Any) -> list[str]:
    with services.db.session() as s:
        return [str(j.id) for j in s.query(Job).all()]


def stored(services: Any) -> list[str]:
    return [o.key for o in services.store.list("jobs/")]


def field_errors(html: str) -> dict[str, str]:
    return dict(re.findall(r'data-error-for="(\w+)"(?: role="alert")?>([^<]+)<', html))


def labelled(html: str) -> None:
    """Every visible input, select and textarea has a <label for> (or sits inside one)."""
    for match in re.finditer(r"<(input|select|textarea)\b([^>]*)>", html):
        attrs = match.group(2)
        if 'type="hidden"' in attrs:
            continue
        found = re.search(r'id="([^"]+)"', attrs)
        assert found, f"an input without id: {match.group(0)}"
        inside_label = html.rfind("<label", 0, match.start()) > html.rfind("</label>", 0, match.start())
        assert f'for="{found.group(1)}"' in html or inside_label, f"no label for {found.group(1)}"


# --- the form -------------------------------------------------------------------------------
def test_home_is_the_audio2video_form(browser: Browser) -> None:
    html = browser.text("/")
    assert '<meta name="viewport"' in html
    assert 'enctype="multipart/form-data"' in html and 'name="csrf_token"' in html
    assert 'id="f-image"' in html and 'id="f-audio"' in html
    assert 'accept=".png,.jpg,.jpeg,.webp' in html and 'data-max-bytes="20971520"' in html
    assert "reference-talking-head" in html
    # defaults and limits from the catalog
    assert "default 25" in html and "10 to 60" in html and "a multiple of 16" in html
    assert 'min="128"' in html and 'max="1280"' in html and 'step="16"' in html
    labelled(html)


def test_text2video_tab_shows_prompt_and_parameters(browser: Browser, services: Any) -> None:
    with services.db.session() as session:
        announce_worker(
            session, worker_id="w@h", hostname="h", pid=1, devices="cpu", models=["reference-t2v"], info={}
        )
    html = browser.text("/?task=text2video")
    assert "A worker serving this model is online." in html
    assert "No worker serving this model is online" in browser.text("/")
    assert '<textarea id="f-prompt" name="prompt"' in html and "required" in html
    assert 'id="f-num_inference_steps"' in html and "default 20" in html
    assert "random if empty" in html  # the seed
    assert 'id="f-image"' not in html
    labelled(html)
    fragment = browser.text("/ui/new/params?task=text2video&model=reference-t2v")
    assert 'id="f-guidance_scale"' in fragment and "<html" not in fragment


def test_changing_model_without_javascript_keeps_values(browser: Browser) -> None:
    response = browser.post(
        "/ui/jobs",
        {"task": "text2video", "model": "reference-t2v", "prompt": "kept prompt", "change_model": "1"},
        csrf=False,
    )
    assert response.status_code == 200
    html = response.get_data(as_text=True)
    assert ">kept prompt</textarea>" in html and "Submit job" in html


def test_csrf_is_required(browser: Browser, services: Any) -> None:
    body = {"task": "text2video", "prompt": "a kite"}
    refused = browser.post("/ui/jobs", body, csrf=False)
    assert refused.status_code == 400 and "This form has expired" in refused.get_data(as_text=True)
    assert browser.post("/ui/jobs", body, csrf="forged").status_code == 400
    as_json = browser.post("/ui/jobs", body, csrf=False, headers={"Accept": "application/json"})
    assert as_json.status_code == 400 and as_json.get_json()["error"]["code"] == "csrf_failed"
    assert job_ids(services) == []
    assert browser.post("/ui/jobs", body).status_code == 303


def test_text2video_submission_redirects_to_the_job(browser: Browser, services: Any) -> None:
    response = browser.post("/ui/jobs", {"task": "text2video", "model": "reference-t2v", "prompt": XSS})
    assert response.status_code == 303
    location = response.headers["Location"]
    assert re.fullmatch(r"/ui/jobs/[0-9a-f-]{36}", location)
    job = load(services, location.rsplit("/", 1)[1])
    assert job.source == "web" and job.params["prompt"] == XSS and isinstance(job.params["seed"], int)
    page = browser.text(location)
    assert XSS not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_audio2video_submission_by_script_gets_json(
    browser: Browser, services: Any, portrait: Path, short_speech: Path
) -> None:
    response = browser.post(
        "/ui/jobs",
        {"task": "audio2video", "model": "reference-talking-head", "seed": "7"},
        {"image": (portrait.read_bytes(), "face.png"), "audio": (short_speech.read_bytes(), "s.mp3")},
        headers={"Accept": "application/json"},
    )
    assert response.status_code == 202, response.get_data(as_text=True)
    body = response.get_json()
    assert body["url"] == f"/ui/jobs/{body['id']}" == response.headers["Location"]
    job = load(services, body["id"])
    assert job.params["seed"] == 7 and set(job.input_keys) == {"image", "audio"}
    assert job.input_meta["audio"]["format"] == "mp3"


def test_refused_form_shows_errors_next_to_fields_and_keeps_values(
    browser: Browser, services: Any, short_speech: Path
) -> None:
    response = browser.post(
        "/ui/jobs",
        {"task": "audio2video", "model": "reference-talking-head", "fps": "500", "max_size": "100"},
        {"image": (b"not an image at all", "face.png"), "audio": (short_speech.read_bytes(), "s.mp3")},
    )
    assert response.status_code == 422
    html = response.get_data(as_text=True)
    errors = field_errors(html)
    assert "not a readable image" in errors["image"]
    assert "less than or equal to 60" in errors["fps"] and "max_size" in errors
    assert 'value="500"' in html and 'aria-invalid="true"' in html
    assert "audio" not in errors and "choose the file again" in html
    assert job_ids(services) == [] and stored(services) == []


def test_missing_files_and_short_audio(browser: Browser, tmp_path: Path) -> None:
    html = browser.post("/ui/jobs", {"task": "audio2video"}).get_data(as_text=True)
    errors = field_errors(html)
    assert errors["image"] == "Choose a portrait image." and errors["audio"] == "Choose a speech file."
    import subprocess

    tiny = tmp_path / "tiny.wav"
    subprocess.run(["ffmpeg", "-loglevel", "error", "-f", "lavfi", "-i", "sine=d=0.2", str(tiny)], check=True)
    image = io.BytesIO()
    Image.new("RGB", (32, 32)).save(image, format="PNG")
    response = browser.post(
        "/ui/jobs",
        {"task": "audio2video"},
        {"image": (image.getvalue(), "small.png"), "audio": (tiny.read_bytes(), "tiny.wav")},
        headers={"Accept": "application/json"},
    )
    assert response.status_code == 422
    fields = response.get_json()["fields"]
    assert "at least 64 pixels" in fields["image"] and "at least 0.5 s" in fields["audio"]


def test_text2video_errors_are_escaped_and_model_errors_tied_to_field(browser: Browser) -> None:
    response = browser.post(
        "/ui/jobs", {"task": "text2video", "model": "reference-t2v", "prompt": XSS, "width": "4096"}
    )
    assert response.status_code == 422
    html = response.get_data(as_text=True)
    assert XSS not in html and "&lt;script&gt;" in html
    assert "width" in field_errors(html)
    response = browser.post("/ui/jobs", {"task": "text2video", "model": "no-such-model", "prompt": "x"})
    assert (
        response.status_code == 422
        and "no-such-model" in field_errors(response.get_data(as_text=True))["model"]
    )


def test_oversized_upload_comes_back_as_the_form(tmp_path: Path, clean_redis: str) -> None:
    from jobservice.db.migrate import upgrade
    from jobservice.http.app import create_app
    from tests.conftest import make_settings

    settings = make_settings(tmp_path / "var", broker_url=clean_redis, max_request_mb=1)
    upgrade(settings.resolved_database_url())
    app = create_app(settings)
    client = Browser(app.test_client())
    response = client.post(
        "/ui/jobs?task=audio2video",
        {"task": "audio2video"},
        {"image": (b"x" * (2 * 2**20), "big.png")},
    )
    assert response.status_code == 413
    html = response.get_data(as_text=True)
    assert "larger than the limit of 1 MB" in html and 'id="f-image"' in html
    app.extensions["jobservice"].db.dispose()


# --- the list -------------------------------------------------------------------------------
def submit_t2v(browser: Browser, prompt: str, model: str = "reference-t2v") -> str:
    response = browser.post("/ui/jobs", {"task": "text2video", "model": model, "prompt": prompt})
    assert response.status_code == 303, response.get_data(as_text=True)
    return str(response.headers["Location"].rsplit("/", 1)[1])


def test_jobs_list_filters_and_paginates(browser: Browser, client: Any, services: Any) -> None:
    online_group(services.db, "cpu@test", ["reference-t2v"])
    ids = [submit_t2v(browser, f"job {i}") for i in range(23)]
    assert eta.refresh(services.db, services.catalog, services.settings, force=True)
    services.caches.forecast.drop(None)  # this process replaced the forecast
    html = browser.text("/ui/jobs")
    assert html.count('<tr data-job="') == 20
    assert ids[-1][:8] in html and ids[0][:8] not in html  # newest first
    assert "22 ahead" in html  # the newest: the 22 older ones start before it (the first is handed out)
    older = re.search(r'href="([^"]+)" rel="next"', html)
    assert older is not None
    page2 = browser.text(older.group(1).replace("&amp;", "&"))
    assert page2.count('<tr data-job="') == 3 and 'rel="first"' in page2 and 'rel="next"' not in page2
    assert ids[0][:8] in page2 and "next in line" in page2

    client.post(f"/jobs/{ids[0]}/cancel")
    canceled = browser.text("/ui/jobs?status=canceled")
    assert canceled.count('<tr data-job="') == 1 and ids[0][:8] in canceled
    assert 'value="canceled" checked' in canceled
    assert browser.text("/ui/jobs?status=queued&limit=50").count('<tr data-job="') == 22
    assert "No jobs match these filters" in browser.text("/ui/jobs?model=reference-talking-head")
    assert "match these filters" not in browser.text("/ui/jobs?status=bogus")  # unknown values are ignored

    rows = browser.text("/ui/jobs/rows?status=queued")
    assert rows.lstrip().startswith("<tbody") and 'data-live="1"' in rows and "<html" not in rows


def test_pages_and_api_do_not_collide(browser: Browser, client: Any) -> None:
    job_id = submit_t2v(browser, "collide")
    api = client.get(f"/jobs/{job_id}")
    assert api.mimetype == "application/json" and api.get_json()["source"] == "web"
    assert client.get("/jobs").mimetype == "application/json"
    page = client.get(f"/ui/jobs/{job_id}")
    assert page.mimetype == "text/html"
    csp = page.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert page.headers["X-Frame-Options"] == "DENY"
    assert "Content-Security-Policy" not in api.headers
    missing = client.get("/ui/jobs/00000000-0000-0000-0000-000000000000")
    assert missing.status_code == 404 and missing.mimetype == "text/html"
    assert client.get("/ui").status_code == 302
    with client.get("/ui/static/style.css") as css:
        assert css.status_code == 200 and "@media" in css.get_data(as_text=True)

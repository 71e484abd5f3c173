"""``GET /jobs/<id>`` beneath Flask (jobservice.http.api.native.fast_poll): the same bytes as Flask's answer,
never a stale one, every case it does not own left to Flask untouched, and the premise of its kept
answers (rendering reads the job's row and the forecast, nothing else) watched."""

from __future__ import annotations

import gc
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import date, timedelta
from types import FrameType
from typing import Any

import pytest
from flask import Flask, g
from werkzeug.test import Client

from jobservice.auth.principal import anonymous
from jobservice.db.engine import Database
from jobservice.db.tables import Job
from jobservice.fleet.eta import Stored
from jobservice.fleet.eta import parse as parse_forecast
from jobservice.http.api.native.fast_poll import FastPoll, shown_of
from jobservice.http.app import create_app
from jobservice.jobs.lookup import read_job_row
from jobservice.jobs.transitions import utcnow
from jobservice.settings import Settings
from jobservice.wiring import build_services
from tests.factories import new_job

NOW = utcnow().replace(microsecond=123456)
# Rows a poller meets, one per state the view renders differently.
STATES: dict[str, dict[str, Any]] = {
    "running": {
        "status": "running",
        "stage": "generating",
        "progress": 0.4213,
        "attempts": 1,
        "worker_id": "cpu@host#1",
        "claimed_at": NOW,
        "started_at": NOW,
        "cancel_requested_at": NOW,
    },
    "succeeded": {
        "status": "succeeded",
        "stage": "done",
        "progress": 1.0,
        "finished_at": NOW,
        "output_key": "jobs/x/output.mp4",
        "report_key": "jobs/x/report.json",
        "verdict": "pass",
        "timings": {"generate_s": 1.5, "validate_s": 0.1},
        "validation_summary": {"frames": 49, "warnings": ["quiet audio"], "failed_checks": []},
        "cold_start": True,
    },
    "failed": {
        "status": "failed",
        "stage": "validating",
        "finished_at": NOW,
        "error_code": "validation_failed",
        "error_message": "The output is black for 3.0 s (blackdetect).",
        "verdict": "fail",
        "validation_summary": {"failed_checks": ["black_frames"]},
        "report_key": "jobs/x/report.json",
    },
    "canceled": {"status": "canceled", "stage": "generating", "finished_at": NOW, "error_code": "canceled"},
    "expired": {
        "status": "succeeded",
        "stage": "done",
        "finished_at": NOW - timedelta(days=40),
        "output_key": "jobs/x/output.mp4",
        "expired_at": NOW,
    },
}


def set_row(db: Database, job_id: uuid.UUID, **values: Any) -> None:
    with db.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        for name, value in values.items():
            setattr(job, name, value)


class Counted:
    """Flask's WSGI callable, counting the requests the fast path passed on to it."""

    def __init__(self, fast: FastPoll) -> None:
        self.inner = fast.next
        self.calls = 0
        fast.next = self

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        self.calls += 1
        return self.inner(environ, start_response)


@pytest.fixture
def flask_calls(app: Flask) -> Counted:
    assert isinstance(app.wsgi_app, FastPoll)
    return Counted(app.wsgi_app)


def flask_only(app: Flask) -> Client:
    """A client of the same app without the fast path (what every poll cost before it)."""
    fast = app.wsgi_app
    assert isinstance(fast, FastPoll)
    return Client(fast.next)


def answer(client: Any, path: str, **kwargs: Any) -> tuple[int, list[tuple[str, str]], bytes]:
    # One X-Request-Id for both paths (each echoes it; without one, each makes its own).
    kwargs["headers"] = {"X-Request-Id": "poll-1", **kwargs.get("headers", {})}
    response = client.get(path, **kwargs)
    return response.status_code, list(response.headers.items()), response.get_data()


@pytest.mark.parametrize("state", list(STATES))
def test_the_fast_answer_is_flasks_answer_byte_for_byte(
    app: Flask, services: Any, flask_calls: Counted, state: str
) -> None:
    job_id = new_job(services.db, params={"prompt": "a cat", "num_frames": 49, "seed": 7})
    set_row(services.db, job_id, **STATES[state])
    fast = answer(app.test_client(), f"/jobs/{job_id}")
    assert flask_calls.calls == 0  # answered beneath Flask
    assert fast == answer(flask_only(app), f"/jobs/{job_id}")
    assert fast[0] == 200
    assert ("X-Poll-After-Ms" in dict(fast[1])) == (state == "running")


def test_a_changed_row_is_shown_at_once_and_never_an_older_one(
    app: Flask, services: Any, flask_calls: Counted
) -> None:
    job_id = new_job(services.db)
    set_row(services.db, job_id, **STATES["running"])
    client = app.test_client()
    seen = []
    for progress in (0.1, 0.1, 0.25, 0.25, 0.5):
        set_row(services.db, job_id, progress=progress)
        seen.append(client.get(f"/jobs/{job_id}").get_json()["progress"])
    assert seen == [0.1, 0.1, 0.25, 0.25, 0.5]
    set_row(services.db, job_id, **STATES["succeeded"])
    done = client.get(f"/jobs/{job_id}")
    assert done.get_json()["status"] == "succeeded" and "X-Poll-After-Ms" not in done.headers
    assert flask_calls.calls == 0


def test_what_the_fast_path_does_not_own_goes_to_flask(
    app: Flask, services: Any, flask_calls: Counted
) -> None:
    client = app.test_client()
    queued = new_job(services.db)  # its position needs a query: Flask's
    running = new_job(services.db)
    set_row(services.db, running, **STATES["running"])
    cases = [
        (f"/jobs/{queued}", {}, 200),
        (f"/jobs/{uuid.uuid4()}", {}, 404),
        ("/jobs/0123456789abcdef0123456789abcdef0123", {}, 404),  # hex, not a UUID
        (f"/jobs/{running}?x=1", {}, 200),
        (f"/jobs/{running}", {"headers": {"Prefer": "wait=0"}}, 200),
        (f"/jobs/{running}", {"headers": {"Authorization": "Basic abc"}}, 401),
        (f"/jobs/{running}", {"headers": {"Host": "evil.example"}}, 421),
    ]
    for calls, (path, kwargs, status) in enumerate(cases, start=1):
        response = client.get(path, **kwargs)
        assert response.status_code == status, (path, kwargs, response.get_data(as_text=True))
        assert flask_calls.calls == calls, (path, kwargs)
    assert client.get(f"/jobs/{queued}").get_json()["queue_position"] is None  # no group may run it yet


def test_the_fast_answer_is_flasks_answer_on_postgres(tmp_path: Any, pg_url: str, redis_url: str) -> None:
    settings = Settings(
        _env_file=None, database_url=pg_url, var_dir=tmp_path, broker_url=redis_url, auth="off"
    )  # type: ignore[call-arg]
    services = build_services(settings)
    app = create_app(services=services)
    calls = Counted(app.wsgi_app)  # type: ignore[arg-type]
    try:
        for state, values in STATES.items():
            job_id = new_job(services.db, params={"prompt": "a cat", "seed": 7})
            set_row(services.db, job_id, **values)
            fast = answer(app.test_client(), f"/jobs/{job_id}")
            assert calls.calls == 0, state  # answered beneath Flask
            assert fast[0] == 200 and fast == answer(Client(calls.inner), f"/jobs/{job_id}"), state
            set_row(services.db, job_id, progress=0.75)  # read again at once: no stale answer
            assert app.test_client().get(f"/jobs/{job_id}").get_json()["progress"] == 0.75, state
            assert calls.calls == 0, state
    finally:
        services.db.dispose()


# --- the kept answers' premise: an answer is a function of the job's row and the forecast alone --
# Python code an answer may run: the view, the row and its ORM instance, pydantic, werkzeug's response
# (not werkzeug.local: no request, g or app; not the database, the clock, the settings or os.environ).
RENDERING_MODULES = {
    "enum",
    "uuid",
    "pydantic.main",
    "jobservice.db.tables",
    "jobservice.fleet.eta",
    "jobservice.http.api.native.fast_poll",
    "jobservice.http.api.native.jobs",
    "jobservice.jobs.lookup",
    "jobservice.jobs.previews",  # reads the row's timings and tries only
    "jobservice.jobs.retries",
    "jobservice.jobs.presenters",
    "sqlalchemy.engine.result",
    "sqlalchemy.engine.row",
    "sqlalchemy.orm.attributes",
    "sqlalchemy.orm.instrumentation",
    "sqlalchemy.orm.state",
    "werkzeug.datastructures.headers",
    "werkzeug.sansio.response",
    "werkzeug.utils",
    "werkzeug.wrappers.response",
}
CLOCK_READS = {"now", "utcnow", "today"}


def forecasts(job_id: uuid.UUID) -> list[Stored | None]:
    """No forecast, one that places the job, and one that knows only its model's speed."""
    at = NOW.timestamp()
    run_s = {"reference-t2v": [1.5, 2.0]}
    return [
        None,
        parse_forecast({"at": at, "jobs": {str(job_id): [at + 10, at + 70]}, "run_s": run_s}),
        parse_forecast({"at": at, "run_s": run_s}),
    ]


def module_of(frame: FrameType | None) -> str | None:
    """The module running ``frame`` (code made by exec counts as its maker's)."""
    while frame is not None:
        name = frame.f_globals.get("__name__")
        if name is not None:
            return str(name)
        frame = frame.f_back
    return None


def reads_while(render: Callable[..., object], *args: Any) -> tuple[set[str | None], set[str]]:
    """(the modules of every Python function, and every C function outside builtins and plain
    types' methods or reading the clock) called while ``render(*args)`` runs."""
    modules: set[str | None] = set()
    outside: set[str] = set()

    def watch(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            modules.add(module_of(frame))
        elif event == "c_call" and arg.__name__ != "setprofile":
            owner = getattr(arg, "__self__", None)
            module = getattr(arg, "__module__", None)
            if module not in (None, "builtins") or type(owner).__module__ in ("random", "_random"):
                outside.add(f"{module}.{arg.__name__}")
            elif isinstance(owner, type) and issubclass(owner, date) and arg.__name__ in CLOCK_READS:
                outside.add(f"{owner.__name__}.{arg.__name__}")

    # A garbage collection may start inside ``render`` and run other code's gc callbacks (hypothesis
    # installs one once imported): that is not rendering, so the collector waits until after.
    collecting = gc.isenabled()
    gc.disable()
    sys.setprofile(watch)
    try:
        render(*args)
    finally:
        sys.setprofile(None)
        if collecting:
            gc.enable()
    return modules, outside


@pytest.mark.parametrize("state", list(STATES))
def test_a_kept_answer_reads_nothing_but_the_row_and_the_forecast(services: Any, state: str) -> None:
    """The fast path gives a kept answer again while the row and the forecast are unchanged; that is
    only right while rendering reads nothing else (the clock, the request, the database, settings)."""
    job_id = new_job(services.db, params={"prompt": "a cat", "seed": 7})
    set_row(services.db, job_id, **STATES[state])
    row = read_job_row(services.db, job_id)
    assert row is not None
    for forecast in forecasts(job_id):
        shown_of(row, forecast)  # first use: imports and caches settle
        modules, outside = reads_while(shown_of, row, forecast)
        assert modules - RENDERING_MODULES == set(), (
            "rendering a job's answer runs code that may read more than its row"
        )
        assert outside == set(), "rendering a job's answer calls outside Python (the clock, the OS)"


def test_the_same_row_gives_the_same_answer_whatever_else_changed(
    app: Flask, services: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = new_job(services.db, params={"prompt": "a cat", "seed": 7})
    set_row(services.db, job_id, **STATES["running"])
    row = read_job_row(services.db, job_id)
    assert row is not None
    for forecast in forecasts(job_id):
        first = shown_of(row, forecast)
        set_row(services.db, job_id, progress=0.9, stage="encoding")  # the job moved on
        monkeypatch.setattr(time, "time", lambda: 4_000_000_000.0)  # 2096
        with app.test_request_context(f"/jobs/{job_id}", headers={"Host": "other.localhost"}):
            g.principal = anonymous("another-tenant")
            again = shown_of(row, forecast)
        monkeypatch.undo()
        assert first is not None and again is not None
        assert (again.body, again.headers) == (first.body, first.headers)
        set_row(services.db, job_id, **STATES["running"])

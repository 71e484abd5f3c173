"""``GET /jobs/<id>`` answered beneath Flask: the request clients repeat most, at a fraction of the cost.

A poll of a running or finished job needs a row and its view; Flask's request machinery (the
request context, URL matching, the hooks, the response wrapper) cost a quarter of the process's
CPU per poll, more than rendering the view (profiled with py-spy under ``scripts/bench_poll.py``).
This WSGI middleware answers exactly that request with Flask's own parts: the request policy's steps
(``policy.Policy.check``: host, caller, rate, ...) and after-steps (``nosniff``, the metrics, under
the route's own URL rule), the tenant rule (``jobs.visible_row``) and the view (``jobs.view_response``),
so the bytes are Flask's. It keeps the last answer per job and gives it again while the job's row and
the fleet's forecast are unchanged: ``view_response`` is a function of those two alone, which
tests/unit/test_fast_poll.py checks by watching everything it calls.

Anything else goes to Flask untouched, and so does every case the fast path does not own: a query
string, ``Prefer`` (a held wait), a browser's session cookie. A poll it began but does not finish (a
refusal other than the rate's 429, another tenant's or an unknown job, a queued job whose position
needs a query, a database that fails) goes to Flask with what the policy decided, so Flask answers it
as it always has without running a step again: nothing is counted twice.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from flask import Flask
from sqlalchemy import Row
from sqlalchemy.exc import SQLAlchemyError
from werkzeug.wrappers import Request

from jobservice.db.tables import JobStatus
from jobservice.errors import TooMany
from jobservice.fleet.eta import Stored
from jobservice.fleet.eta import latest as latest_forecast
from jobservice.http.api.errors import respond
from jobservice.http.api.native.jobs import view_response, visible_row
from jobservice.http.api.policy.steps import DECIDED, CheckedRequest, HeaderList, policy_of
from jobservice.jobs.lookup import job_of
from jobservice.wiring import Services

ENDPOINT = "jobs.show_job"  # the view whose answers the fast path gives
_PATH = re.compile(r"/jobs/([0-9A-Fa-f-]{32,36})")
# Headers that make the request something other than a plain poll: Flask answers those.
_NOT_PLAIN = ("HTTP_PREFER", "HTTP_COOKIE")

SHOWN_KEPT = 1024  # jobs whose last answer is kept (a few KB each); all are dropped when full

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


@dataclass(frozen=True)
class Shown:
    """One job's answer and what it was rendered from: the row's values and the forecast."""

    values: tuple[Any, ...]
    forecast: Stored | None  # held, so that a later forecast cannot reuse its id
    body: bytes
    headers: list[tuple[str, str]]


def shown_of(row: Row[Any], forecast: Stored | None) -> Shown | None:
    """The answer to a poll of the job in ``row`` (None for a queued one: its position needs a
    query), rendered by Flask's own view from the row and the forecast alone."""
    job = job_of(row)
    if JobStatus(job.status) == JobStatus.QUEUED:
        return None
    response = view_response(job, forecast)
    return Shown(tuple(row), forecast, response.get_data(), list(response.headers.items()))


class FastPoll:
    """WSGI middleware: a plain ``GET /jobs/<id>`` of a job that is not queued, answered directly."""

    def __init__(self, app: Flask, services: Services) -> None:
        self.flask = app
        self.next: WsgiApp = app.wsgi_app
        self.services = services
        self.policy = policy_of(app)
        rules = [rule for rule in app.url_map.iter_rules() if rule.endpoint == ENDPOINT]
        self.route = rules[0].rule  # "/jobs/<job_id>", as Flask's metrics label it
        self.blueprint = ENDPOINT.rpartition(".")[0]
        self.shown: dict[uuid.UUID, Shown] = {}  # the last answer per job, by what it was rendered from

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ["REQUEST_METHOD"] == "GET" and not environ.get("QUERY_STRING"):
            match = _PATH.fullmatch(environ.get("PATH_INFO", ""))
            if match is not None and not any(name in environ for name in _NOT_PLAIN):
                return self._answer(environ, start_response, match[1])
        return self.next(environ, start_response)

    def _answer(self, environ: dict[str, Any], start_response: StartResponse, raw_id: str) -> Iterable[bytes]:
        req = Request(environ, populate_request=False)  # werkzeug's reading of it, as Flask's request is
        checked = CheckedRequest(ENDPOINT, self.blueprint, self.route)
        try:
            self.policy.check(req, checked)
        except TooMany as refusal:  # counted here, so answered here
            with self.flask.app_context():
                response = respond(refusal)
            self.policy.finish(req, checked, response.status_code, response.headers)
            return response(environ, start_response)
        except Exception as refusal:  # noqa: BLE001 - any refusal: Flask answers it, as it would have
            checked.refusal = refusal
            return self._to_flask(environ, start_response, checked)
        assert checked.principal is not None  # identify refuses nobody on a route that is not public
        try:
            row = visible_row(self.services.db, uuid.UUID(raw_id), checked.principal)
        except (ValueError, SQLAlchemyError):
            row = None  # not a UUID (Flask's 404), or a read that failed (Flask reads again: a 503)
        shown = self._shown(row) if row is not None else None
        if shown is None:
            return self._to_flask(environ, start_response, checked)
        headers = HeaderList(shown.headers)
        self.policy.finish(req, checked, 200, headers)
        start_response("200 OK", list(headers))
        return [shown.body]

    def _to_flask(
        self, environ: dict[str, Any], start_response: StartResponse, checked: CheckedRequest
    ) -> Iterable[bytes]:
        """Flask answers, with what the policy decided (its hook runs no step again)."""
        environ[DECIDED] = checked
        return self.next(environ, start_response)

    def _shown(self, row: Row[Any]) -> Shown | None:
        """The answer for ``row``: the one kept for this job when neither the row nor the fleet's
        forecast changed since it was rendered (a running job's ETA changes with the forecast), else
        rendered now (``shown_of``)."""
        forecast = latest_forecast(self.services)
        job_id: uuid.UUID = row.id
        kept = self.shown.get(job_id)
        if kept is not None and kept.forecast is forecast and kept.values == tuple(row):
            return kept
        shown = shown_of(row, forecast)
        if shown is not None:
            if len(self.shown) >= SHOWN_KEPT:
                self.shown.clear()
            self.shown[job_id] = shown
        return shown


def install(app: Flask, services: Services) -> None:
    """Put the fast path in front of ``app``'s WSGI callable (Flask's usual middleware slot)."""
    app.wsgi_app = FastPoll(app, services)  # type: ignore[method-assign]

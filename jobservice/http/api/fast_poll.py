"""``GET /jobs/<id>`` answered beneath Flask: the request clients repeat most, at a fraction of the cost.

A poll of a running or finished job needs a row and its view; Flask's request machinery (the
request context, URL matching, six hooks, the response wrapper) cost a quarter of the process's
CPU per poll, more than rendering the view (profiled with py-spy under ``scripts/bench_poll.py``).
This WSGI middleware answers exactly that request with the same checks, in the same order, and the
same bytes: the host check, the caller's key (the same cache), its request rate (counted once),
ownership, the view, the polling hint, ``nosniff`` and the HTTP metrics under the route's own label.

Anything else goes to Flask untouched, and so does every case the fast path does not own: a query
string, ``Prefer`` (a held wait), a browser's session cookie, a missing or bad key, another
tenant's or an unknown job (the 404), a queued job (its position needs a query), a database that
fails. Flask then answers it as it always has; nothing has been counted or changed on the way.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from flask import Flask
from sqlalchemy import Row
from sqlalchemy.exc import SQLAlchemyError

from jobservice.auth.principal import Principal, anonymous
from jobservice.db.tables import JobStatus
from jobservice.errors import TooMany
from jobservice.fleet.eta import latest as latest_forecast
from jobservice.http.api.auth import limits_for, principal_for_secret
from jobservice.http.api.cross_site import allowed_hosts, host_allowed, host_name
from jobservice.http.api.errors import respond
from jobservice.http.api.jobs import POLL_AFTER_MS
from jobservice.jobs.lookup import job_of, read_job_row
from jobservice.jobs.schemas import job_view
from jobservice.metrics.process import http_metrics
from jobservice.quotas.rate import check_rate
from jobservice.wiring import Services

ROUTE = "/jobs/<job_id>"  # the URL rule Flask's metrics label this route with
_PATH = re.compile(r"/jobs/([0-9A-Fa-f-]{32,36})")
# Headers that make the request something other than a plain poll: Flask answers those.
_NOT_PLAIN = ("HTTP_PREFER", "HTTP_COOKIE")

SHOWN_KEPT = 1024  # jobs whose last answer is kept (a few KB each); all are dropped when full

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


@dataclass(frozen=True)
class _Shown:
    """One job's rendered answer and the row it was rendered from."""

    values: tuple[Any, ...]
    tenant: str
    body: bytes
    headers: list[tuple[str, str]]


class FastPoll:
    """WSGI middleware: a plain ``GET /jobs/<id>`` of a job that is not queued, answered directly."""

    def __init__(self, app: Flask, services: Services) -> None:
        self.flask = app
        self.next: WsgiApp = app.wsgi_app
        self.services = services
        self.hosts = allowed_hosts(services.settings)
        self.shown: dict[uuid.UUID, _Shown] = {}  # the last answer per job, by the row it showed

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ["REQUEST_METHOD"] == "GET" and not environ.get("QUERY_STRING"):
            match = _PATH.fullmatch(environ.get("PATH_INFO", ""))
            if match is not None and not any(name in environ for name in _NOT_PLAIN):
                answered = self._answer(environ, start_response, match[1])
                if answered is not None:
                    return answered
        return self.next(environ, start_response)

    def _answer(
        self, environ: dict[str, Any], start_response: StartResponse, raw_id: str
    ) -> Iterable[bytes] | None:
        started = time.perf_counter()
        host = environ.get("HTTP_HOST") or environ.get("SERVER_NAME", "")
        if not host_allowed(host_name(host), self.hosts):
            return None
        try:
            job_id = uuid.UUID(raw_id)
        except ValueError:
            return None
        principal = self._caller(environ)
        if principal is None:
            return None
        if principal.key_id is not None:  # request rates are counted per key, as the Flask hook does
            try:
                check_rate(self.services.settings, principal, limits_for(self.services, principal))
            except TooMany as refusal:
                with self.flask.app_context():
                    response = respond(refusal)
                _count(str(response.status_code), started)
                return response(environ, start_response)
        try:
            row = read_job_row(self.services.db, job_id)
        except SQLAlchemyError:
            return None  # Flask reads again and answers the outage as a 503
        if row is None:
            return None
        shown = self._shown(job_id, row)
        if shown is None or not principal.owns(shown.tenant):
            return None
        _count("200", started)
        start_response("200 OK", list(shown.headers))
        return [shown.body]

    def _shown(self, job_id: uuid.UUID, row: Row[Any]) -> _Shown | None:
        """The answer for the row ``values`` (None for a queued job): the last one rendered for this
        job when neither the row nor the fleet's forecast changed since, else rendered now. The view
        is a function of the row and the forecast, so both unchanged means unchanged bytes."""
        forecast = latest_forecast(self.services.db)
        values = (*tuple(row), id(forecast))  # a running job's ETA changes with the forecast
        kept = self.shown.get(job_id)
        if kept is not None and kept.values == values:
            return kept
        job = job_of(row)
        status = JobStatus(job.status)
        if status == JobStatus.QUEUED:
            return None
        body = (job_view(job, forecast=forecast).model_dump_json() + "\n").encode()
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        if not status.is_terminal:
            headers.append(("X-Poll-After-Ms", POLL_AFTER_MS))
        headers.append(("X-Content-Type-Options", "nosniff"))
        if len(self.shown) >= SHOWN_KEPT:
            self.shown.clear()
        shown = self.shown[job_id] = _Shown(values, job.tenant, body, headers)
        return shown

    def _caller(self, environ: dict[str, Any]) -> Principal | None:
        """The caller, or None when Flask must decide (no key under ``keys``, a malformed header)."""
        header = environ.get("HTTP_AUTHORIZATION")
        settings = self.services.settings
        if header is None:
            return anonymous(settings.default_tenant) if settings.auth == "off" else None
        scheme, _, token = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        principal = principal_for_secret(self.services, token.strip())
        if principal is None and settings.auth == "off":
            return anonymous(settings.default_tenant)
        return principal


def _count(status: str, started: float) -> None:
    requests, latency = http_metrics()
    requests.labels("GET", ROUTE, status).inc()
    latency.labels("GET", ROUTE).observe(time.perf_counter() - started)


def install(app: Flask, services: Services) -> None:
    """Put the fast path in front of ``app``'s WSGI callable (Flask's usual middleware slot)."""
    app.wsgi_app = FastPoll(app, services)  # type: ignore[method-assign]

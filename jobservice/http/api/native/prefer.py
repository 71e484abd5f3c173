"""``Prefer: wait=N`` (RFC 7240) on ``POST /jobs`` and ``GET /jobs/<id>``: answer when the job ends.

The request is held until the job is terminal or N seconds passed (N is capped at
``MAX_WAIT_SECONDS``), using the process's ``Watcher`` (no query per waiting request); the
answer then carries ``Preference-Applied: wait=N`` with the N used. A ``Prefer`` header whose
``wait`` is not a whole number of seconds is ignored, as RFC 7240 asks of preferences a server
cannot honour: the answer comes at once and has no ``Preference-Applied``.

Under gunicorn's gthread worker a held request (a wait, or a live event stream) holds a thread.
``Holds`` counts them against ``stream_limit`` (by default three quarters of the process's
threads), so that threads are always left for ordinary requests: past it a wait is not applied
(the answer comes at once) and a stream is refused with 503 ``too_many_streams``.
"""

from __future__ import annotations

import threading

from flask import Flask, Request, Response, current_app

from jobservice.db.tables import Job, JobStatus
from jobservice.jobs.queries import get_job
from jobservice.jobs.watch import Watcher
from jobservice.wiring import Services

MAX_WAIT_SECONDS = 60
PREFER_WAIT = {  # the header as /openapi.json describes it
    "name": "Prefer",
    "in": "header",
    "required": False,
    "description": "wait=N: answer when the job has ended or after N seconds (at most 60); "
    "the answer then carries Preference-Applied: wait=N.",
    "schema": {"type": "string", "examples": ["wait=1"]},
}
WATCHER = "jobservice_watcher"
HOLDS = "jobservice_holds"


class Holds:
    """How many requests this process holds open (streams and waits), against a limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        """Take a place; False when the process already holds ``limit`` requests."""
        with self._lock:
            if self.open >= self.limit:
                return False
            self.open += 1
            return True

    def give(self) -> None:
        """Give a place back."""
        with self._lock:
            self.open = max(0, self.open - 1)


def parse_prefer_wait(header: str | None, *, most: int = MAX_WAIT_SECONDS) -> int | None:
    """The ``wait`` of a ``Prefer`` header in seconds, capped at ``most``; None if absent or malformed."""
    if not header or len(header) > 1024:
        return None
    for preference in header.split(","):
        name, sep, value = preference.split(";", 1)[0].strip().partition("=")
        if name.strip().lower() != "wait" or not sep:
            continue
        value = value.strip().strip('"')
        if not value.isascii() or not value.isdecimal() or len(value) > 9:
            return None
        return min(int(value), most)
    return None


def watcher_of(app: Flask) -> Watcher:
    """The app's watcher (one per process, made by ``install_watcher``)."""
    watcher: Watcher = app.extensions[WATCHER]
    return watcher


def holds_of(app: Flask) -> Holds:
    """The app's count of held requests."""
    holds: Holds = app.extensions[HOLDS]
    return holds


def install_watcher(app: Flask, services: Services) -> Watcher:
    """Give ``app`` its watcher (its polling thread starts when something is first watched) and
    its count of held requests."""
    settings = services.settings
    watcher = Watcher(services, interval=settings.watch_interval_seconds)
    app.extensions[WATCHER] = watcher
    app.extensions[HOLDS] = Holds(settings.stream_limit or max(1, settings.api_threads * 3 // 4))
    return watcher


def held(job: Job, request: Request) -> tuple[Job, int | None]:
    """``job`` as it is once it ended or the preferred wait passed, and the wait applied (or None)."""
    wait = parse_prefer_wait(request.headers.get("Prefer"))
    if wait is None:
        return job, None
    if wait == 0 or JobStatus(job.status).is_terminal:
        return job, wait
    holds = holds_of(current_app)
    if not holds.take():
        return job, None  # every place is taken: answer now rather than starve other requests
    try:
        watcher_of(current_app).wait_ended(job.id, timeout=wait)
    finally:
        holds.give()
    services: Services = current_app.extensions["jobservice"]
    with services.db.session() as session:
        return get_job(session, job.id) or job, wait


def applied(response: Response, wait: int | None) -> Response:
    """Mark ``response`` with the wait that was applied, if any."""
    if wait is not None:
        response.headers["Preference-Applied"] = f"wait={wait}"
        response.vary.add("Prefer")
    return response

"""Live events: ``GET /jobs/<id>/stream``, ``GET /batches/<id>/stream`` and
``GET /job-groups/<id>/stream`` (Server-Sent Events).

A stream starts with a ``retry:`` line, then sends the full view (the same JSON as ``GET``) as
``status`` (first, and whenever the status changes), ``stage``, ``preview`` (a new preview of what
the job rendered so far: ``links.preview``), ``progress`` or ``queue_position`` events (a group:
``status`` and ``progress``, its jobs by status); when the job, batch or group has ended it sends
``end`` with the final view and closes. Each event's ``id`` is a resume token: a client that
reconnects with ``Last-Event-ID`` (or ``?last_event_id=``) is not sent a state it already has. A
``: keep-alive`` comment goes out every ``stream_heartbeat_seconds`` so that proxies keep the
connection open.

Under gunicorn's gthread worker an open stream holds one of the process's threads, so a stream
lives at most ``stream_max_seconds`` and then closes without ``end``: the browser's EventSource
(and our client) reconnects with ``Last-Event-ID`` after ``retry`` ms. Streams wait on the
process's ``Watcher`` (one database query per interval for all of them), never on a query each.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, replace
from typing import Any

from flask import Blueprint, Flask, Response, current_app, request

from jobservice.errors import Unavailable
from jobservice.fleet.eta import behind_of
from jobservice.fleet.eta import latest as latest_forecast
from jobservice.groups.presenters import group_view
from jobservice.groups.service import get_group
from jobservice.groups.views import ENDED_GROUP_STATUSES, GroupProgress, group_status
from jobservice.http.api.doc import RouteTable, View, in_path, in_query, path_parameter, refused
from jobservice.http.api.native.batches import load_batch
from jobservice.http.api.native.groups import load_group
from jobservice.http.api.native.jobs import load_job, services
from jobservice.http.api.native.prefer import Holds, holds_of, install_watcher, watcher_of
from jobservice.jobs.presenters import job_view
from jobservice.jobs.queries import get_job
from jobservice.jobs.watch import (
    JobState,
    Kind,
    SetState,
    State,
    Watcher,
    job_state_from_token,
    job_state_of,
    set_state_from_token,
)
from jobservice.nightly.finalize import refresh_batch
from jobservice.nightly.presenters import batch_view
from jobservice.nightly.states import BatchStatus
from jobservice.wiring import Services

bp = Blueprint("streams", __name__)
api = RouteTable(bp)
log = logging.getLogger(__name__)

# The stream is a sequence of events (``schema``), each (OpenAPI 3.2's ``itemSchema``) a name
# (status, stage, preview, progress, queue_position, eta, end ...), JSON ``data`` and a resume ``id``.
_SSE_EVENT = {
    "type": "object",
    "properties": {
        "event": {"type": "string"},
        "data": {"type": "string", "description": "JSON: the job (or batch) view after the change."},
        "id": {"type": "string", "description": "Send it back as Last-Event-ID to resume."},
        "retry": {"type": "integer"},
    },
}
_SSE = {"text/event-stream": {"schema": {"type": "array", "items": _SSE_EVENT}, "itemSchema": _SSE_EVENT}}
_RESUME = (
    {"name": "Last-Event-ID", "in": "header", "required": False, "schema": {"type": "string"}},
    in_query("last_event_id", description="The same as the Last-Event-ID header."),
)
_BUSY = refused("The process holds stream_limit streams already (too_many_streams); see Retry-After.")


RETRY_MS = 1000
KEEP_ALIVE = ": keep-alive\n\n"
Shown = tuple[State, dict[str, Any]]


@dataclass(frozen=True)
class StreamLimits:
    """How often a stream sends a keep-alive, and how long it may stay open."""

    heartbeat: float
    life: float
    retry_ms: int = RETRY_MS


def format_event(name: str, data: Any, *, event_id: str | None = None) -> str:
    """One SSE event: ``id``, ``event`` and a one-line JSON ``data`` field, then a blank line."""
    lines = [f"id: {event_id}"] if event_id else []
    # ASCII JSON: no character a client's line splitting might take for a line end (U+2028, U+0085).
    lines += [f"event: {name}", "data: " + json.dumps(data, separators=(",", ":"))]
    return "\n".join(lines) + "\n\n"


def job_event_name(before: State | None, after: State) -> str | None:
    """The event a job's change from ``before`` to ``after`` is sent as; None when nothing changed."""
    if not isinstance(before, JobState) or not isinstance(after, JobState):
        return "status"
    if (before.status, before.cancel_requested, before.attempts) != (
        after.status,
        after.cancel_requested,
        after.attempts,
    ):
        return "status"
    if before.stage != after.stage:
        return "stage"
    if before.preview != after.preview:
        return "preview"
    if before.progress != after.progress:
        return "progress"
    if before.queue_position != after.queue_position:
        return "queue_position"
    if before.eta != after.eta:
        return "eta"
    return None


@dataclass(frozen=True)
class Feed:
    """What one stream follows: a watched row, how to render it, name its changes and see its end."""

    kind: Kind
    ident: uuid.UUID
    render: Callable[[State], Shown | None]
    name_of: Callable[[State | None, State], str | None]
    ended: Callable[[State], bool]


def live_events(
    watcher: Watcher, feed: Feed, *, last: State | None, limits: StreamLimits
) -> Generator[str, None, None]:
    """The text of a stream: events for each change after ``last`` (the client's state), keep-alives,
    ``end`` once ended; it returns after ``limits.life`` seconds at the latest."""
    yield f"retry: {limits.retry_ms}\n\n"
    started = beat = time.monotonic()
    with watcher.watching(feed.kind, feed.ident):
        polled = watcher.current(feed.kind, feed.ident)
        while polled is not None:
            if polled != last or feed.ended(polled):
                shown = feed.render(polled)
                if shown is None:
                    return
                state, view = shown
                name = feed.name_of(last, state)
                if name is not None:
                    yield format_event(name, view, event_id=state.to_token())
                    last, beat = state, time.monotonic()
                if feed.ended(state):
                    yield format_event("end", view, event_id=state.to_token())
                    return
            now = time.monotonic()
            if now - started >= limits.life:
                return
            wait = min(beat + limits.heartbeat, started + limits.life) - now
            fresh = watcher.wait_change(feed.kind, feed.ident, seen=polled, timeout=max(wait, 0.0))
            if fresh == polled and time.monotonic() >= beat + limits.heartbeat:
                yield KEEP_ALIVE
                beat = time.monotonic()
            polled = fresh


def job_feed(svc: Services, job_id: uuid.UUID) -> Feed:
    """A job's stream: its view, its changes named by ``job_event_name``, ended when terminal."""

    def render(_polled: State) -> Shown | None:
        with svc.db.session() as session:
            job = get_job(session, job_id)
            if job is None:
                return None
            forecast = latest_forecast(svc)
            view = job_view(job, forecast=forecast, behind=behind_of(session, forecast, job))
        return job_state_of(view), view.model_dump(mode="json")

    def ended(state: State) -> bool:
        return isinstance(state, JobState) and state.is_terminal

    return Feed("job", job_id, render, job_event_name, ended)


def status_of_set(state: SetState) -> str:
    """The status a set in ``state`` shows: a nightly run's own, else the group's
    (``jobservice.groups.views.group_status``, from its jobs by status)."""
    if state.status is not None:
        return state.status
    queued, running, succeeded, failed, canceled = state.counts
    progress = GroupProgress(
        total=sum(state.counts),
        queued=queued,
        running=running,
        succeeded=succeeded,
        failed=failed,
        canceled=canceled,
        fraction=0.0,
    )
    return group_status(progress, canceled=state.canceled)


def set_event_name(before: State | None, after: State) -> str | None:
    """A set's change: ``status`` when its status (or its cancel) changes, else ``progress``; None
    when unchanged."""
    if not isinstance(before, SetState) or not isinstance(after, SetState):
        return "status"
    if status_of_set(before) != status_of_set(after) or before.canceled != after.canceled:
        return "status"
    return "progress" if before != after else None


def set_ended(state: State) -> bool:
    """The set has ended: a nightly run finished (or failed, or was canceled), a group's jobs all did."""
    if not isinstance(state, SetState):
        return False
    if state.status is not None:
        return BatchStatus(state.status).is_ended
    return status_of_set(state) in ENDED_GROUP_STATUSES


def set_feed(set_id: uuid.UUID, view_of: Callable[[], dict[str, Any]]) -> Feed:
    """A set's stream: ``view_of()`` (the JSON of ``GET``), changes named by ``set_event_name``."""

    def render(polled: State) -> Shown | None:
        assert isinstance(polled, SetState)
        view = view_of()
        if polled.status is not None:  # the view may have finished the run (refresh_batch)
            polled = replace(polled, status=view["status"])
        return polled, view

    return Feed("set", set_id, render, set_event_name, set_ended)


def batch_view_of(svc: Services, batch_id: uuid.UUID) -> Callable[[], dict[str, Any]]:
    """A nightly run's view, finished first when its last job ended."""

    def view_of() -> dict[str, Any]:
        batch = refresh_batch(svc, batch_id)
        with svc.db.session() as session:
            return batch_view(session, batch).model_dump(mode="json")

    return view_of


def group_view_of(svc: Services, group_id: uuid.UUID) -> Callable[[], dict[str, Any]]:
    """A job group's view (progress by status)."""

    def view_of() -> dict[str, Any]:
        with svc.db.session() as session:
            return group_view(session, get_group(session, group_id)).model_dump(mode="json")

    return view_of


def _resume_token() -> str | None:
    return request.headers.get("Last-Event-ID") or request.args.get("last_event_id") or None


def _limits(svc: Services) -> StreamLimits:
    return StreamLimits(heartbeat=svc.settings.stream_heartbeat_seconds, life=svc.settings.stream_max_seconds)


class _Held:
    """A stream's body that gives its place back when the server closes it (PEP 3333 calls
    ``close`` even when the body was never iterated)."""

    def __init__(self, events: Generator[str, None, None], holds: Holds) -> None:
        self._events = events
        self._holds: Holds | None = holds

    def __iter__(self) -> Iterator[str]:
        # Once streaming began no error response can be sent: an outage just ends the stream
        # (the client reconnects with Last-Event-ID).
        try:
            yield from self._events
        except Exception:
            log.exception("an event stream failed; closing it")

    def close(self) -> None:
        """Stop watching and give the place back (once)."""
        self._events.close()  # a client that went away: leave the watcher now, not at garbage collection
        holds, self._holds = self._holds, None
        if holds is not None:
            holds.give()


def event_stream(events: Generator[str, None, None]) -> Response:
    """A ``text/event-stream`` response that no cache or proxy buffers; 503 ``too_many_streams``
    when the process already holds ``stream_limit`` streams and waits."""
    holds = holds_of(current_app)
    if not holds.take():
        raise Unavailable(
            "too_many_streams",
            "This server holds as many live streams as it may; poll GET /jobs/<id> instead, or retry.",
            headers={"Retry-After": "5"},
        )
    response = Response(_Held(events, holds), mimetype="text/event-stream")
    response.headers["Cache-Control"] = "no-cache"
    response.headers["X-Accel-Buffering"] = "no"
    return response


def stream_route(path: str, summary: str, *, ident: str, view: str, missing: str) -> Callable[[View], View]:
    """Declare a stream's route: the ``ident`` in ``path`` and the resume token, events whose data is
    a ``view``, a 404 (``missing``) before any event, a 503 while the process holds all it may."""
    return api.route(
        "get",
        path,
        summary,
        parameters=(in_path(ident), *_RESUME),
        responses={
            "200": {"description": f"Events, each with the full {view} as data.", "content": _SSE},
            "404": refused(missing),
            "503": _BUSY,
        },
    )


@stream_route(
    "/jobs/{job_id}/stream",
    "A job's live events (Server-Sent Events: status, stage, preview, progress, queue_position, end)",
    ident="job_id",
    view="JobView",
    missing="No such job (job_not_found).",
)
def job_stream(job_id: str) -> Response:
    """The job's live events (404 JSON, before any event, for a job the caller cannot see)."""
    job = load_job(job_id)
    svc = services()
    last = job_state_from_token(_resume_token())
    events = live_events(watcher_of(current_app), job_feed(svc, job.id), last=last, limits=_limits(svc))
    return event_stream(events)


# The two kinds of set stream alike: (path, noun, view, its 404 code, load, view_of).
SetStream = tuple[str, str, str, str, Callable[[str], Any], Callable[[Services, uuid.UUID], Any]]
SET_STREAMS: tuple[SetStream, ...] = (
    ("/batches/{batch_id}/stream", "batch", "BatchView", "batch_not_found", load_batch, batch_view_of),
    ("/job-groups/{group_id}/stream", "job group", "GroupView", "group_not_found", load_group, group_view_of),
)


def _declare_set_stream(
    path: str, noun: str, view: str, code: str, load: Callable[[str], Any], view_of: Callable[..., Any]
) -> None:
    """``GET path``: the set's live events (404 JSON, before any event, for a set the caller cannot
    see), followed through the one set feed."""
    ident_name = path_parameter(path)

    def stream(**ids: str) -> Response:
        ident = load(ids[ident_name]).id
        return set_stream(set_feed(ident, view_of(services(), ident)))

    stream.__name__ = f"{ident_name.removesuffix('_id')}_stream"  # batch_stream, group_stream
    summary = f"A {noun}'s live events (Server-Sent Events: status, progress, end)"
    stream_route(path, summary, ident=ident_name, view=view, missing=f"No such {noun} ({code}).")(stream)


for declared in SET_STREAMS:
    _declare_set_stream(*declared)


def set_stream(feed: Feed) -> Response:
    """The one stream of a set of jobs (a job group, or a nightly run: a group with a spec): its
    feed's events after the client's resume token."""
    last = set_state_from_token(_resume_token())
    return event_stream(live_events(watcher_of(current_app), feed, last=last, limits=_limits(services())))


def init_app(app: Flask, svc: Services) -> None:
    """Give the app its watcher and the stream routes."""
    install_watcher(app, svc)
    app.register_blueprint(bp)

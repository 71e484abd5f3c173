"""Waiting for a job or a batch to end: its live stream first, polling when there is none.

The stream (``GET <path>/stream``) sends the whole view with every event; ``end`` is the last one.
A stream that closes before ``end`` is reopened with ``Last-Event-ID`` after the server's ``retry:``
delay. When the stream is unavailable (no such route on an older server, a proxy that answers
something other than ``text/event-stream``, a refused connection, a server at its stream limit, or
one that keeps closing it without sending anything) the wait goes on by polling ``GET <path>``, as
often as ``X-Poll-After-Ms`` says.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Generic, TypeVar

import requests
import urllib3
from pydantic import BaseModel, ValidationError

from jobservice.client.http import ApiError, Transport, WaitTimeout
from jobservice.client.sse import Event, EventParser

V = TypeVar("V", bound=BaseModel)

HEARTBEAT_WINDOW_S = 60.0  # a stream silent this long (no event, no heartbeat) is reopened
DROPS_BEFORE_POLLING = 3  # consecutive stream openings that brought nothing
POLL_BOUNDS_S = (0.1, 10.0)


class StreamUnavailable(Exception):
    """The stream cannot be used here; poll instead."""


@dataclass
class Target(Generic[V]):
    """What is followed: its path (``/jobs/<id>``), its view model, and when it has ended."""

    path: str
    model: type[V]
    ended: Callable[[V], bool]
    missing_codes: frozenset[str]  # a 404 with one of these is the thing missing, not the route


def status_target(path: str, model: type[V], *, ended: Collection[str], missing: frozenset[str]) -> Target[V]:
    """What ``follow`` waits for at ``path`` (a job, a batch, a job group): ended once its status
    is one of ``ended`` (a view without a status never ends); a 404 with a code of ``missing`` says
    it is gone (any other: the route is)."""
    return Target(path, model, lambda view: getattr(view, "status", None) in ended, missing)


@dataclass
class _Clock:
    deadline: float | None

    def left(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def check(self, what: str, last: object) -> None:
        left = self.left()
        if left is not None and left <= 0:
            raise WaitTimeout(f"{what} had not ended when the wait timed out", last)


@dataclass
class _Resume:
    """What carries from one stream connection to the next."""

    last_id: str | None = None
    retry_s: float = 1.0
    drops: int = 0
    last: object = None


def follow(
    transport: Transport,
    target: Target[V],
    *,
    timeout: float | None,
    on_update: Callable[[V], None] | None,
    use_stream: bool = True,
) -> V:
    """The view of ``target`` once it has ended, calling ``on_update`` with each new view on the way."""
    clock = _Clock(None if timeout is None else time.monotonic() + timeout)
    resume = _Resume()
    while use_stream:
        try:
            final = _stream_once(transport, target, clock=clock, resume=resume, on_update=on_update)
        except StreamUnavailable:
            break
        if final is not None:
            return final
        if resume.drops >= DROPS_BEFORE_POLLING:
            break
        clock.check(target.path, resume.last)
        left = clock.left()
        transport.sleep(resume.retry_s if left is None else max(0.0, min(resume.retry_s, left)))
    return poll(transport, target, clock=clock, on_update=on_update, last=resume.last)


def _open(transport: Transport, target: Target[V], *, clock: _Clock, resume: _Resume) -> requests.Response:
    headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
    if resume.last_id is not None:
        headers["Last-Event-ID"] = resume.last_id
    left = clock.left()
    read_s = HEARTBEAT_WINDOW_S if left is None else max(0.5, min(HEARTBEAT_WINDOW_S, left))
    try:
        # no retries here: a refused connection or a busy server (503 too_many_streams) means polling
        response = transport.send(
            "GET",
            f"{target.path}/stream",
            headers=headers,
            stream=True,
            timeout=(transport.timeout, read_s),
            retries=0,
        )
    except (requests.ConnectionError, requests.Timeout):
        raise StreamUnavailable from None
    kind = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if response.status_code == 200 and kind == "text/event-stream":
        return response
    error = ApiError.from_response(response) if response.status_code >= 400 else None
    response.close()
    if error is not None and (error.status in (401, 403) or error.code in target.missing_codes):
        raise error
    raise StreamUnavailable


def _stream_once(
    transport: Transport,
    target: Target[V],
    *,
    clock: _Clock,
    resume: _Resume,
    on_update: Callable[[V], None] | None,
) -> V | None:
    """Read one connection: the final view on ``end``, None when it closed early (reconnect)."""
    response = _open(transport, target, clock=clock, resume=resume)
    parser = EventParser()
    parser.last_event_id = resume.last_id
    got_any = False
    try:
        while True:
            try:
                chunk = response.raw.read1(65536)
            except (urllib3.exceptions.HTTPError, OSError):
                break  # dropped or silent past the heartbeat window: reconnect
            if not chunk:
                break
            for item in parser.feed(chunk):
                got_any = True
                if isinstance(item, Event):
                    final = _take(transport, target, item, resume=resume, on_update=on_update)
                    if final is not None:
                        return final
            clock.check(target.path, resume.last)
    finally:
        response.close()
        resume.last_id = parser.last_event_id
        if parser.retry_ms is not None:
            resume.retry_s = parser.retry_ms / 1000
    resume.drops = 0 if got_any else resume.drops + 1
    clock.check(target.path, resume.last)
    return None


def _take(
    transport: Transport,
    target: Target[V],
    event: Event,
    *,
    resume: _Resume,
    on_update: Callable[[V], None] | None,
) -> V | None:
    """Handle one event: the final view when it ends the stream."""
    try:
        view: V | None = target.model.model_validate(json.loads(event.data))
    except (ValueError, ValidationError):
        view = None  # an event this client does not know; the next full view will come
    if view is not None:
        resume.last = view
        if on_update is not None:
            on_update(view)
        if target.ended(view):
            return view
    if event.event == "end":  # final, whatever its data said: read the view once more
        final = target.model.model_validate(transport.json("GET", target.path))
        if on_update is not None and final != view:
            on_update(final)
        return final
    return None


def poll_after(value: str | None, default_s: float = 1.0) -> float:
    """``X-Poll-After-Ms`` as seconds, kept within sensible bounds."""
    try:
        seconds = int(value or "") / 1000
    except ValueError:
        seconds = default_s
    low, high = POLL_BOUNDS_S
    return min(high, max(low, seconds))


def poll(
    transport: Transport,
    target: Target[V],
    *,
    clock: _Clock,
    on_update: Callable[[V], None] | None,
    last: object = None,
) -> V:
    """Poll ``GET <path>`` until the view has ended."""
    while True:
        response = transport.call("GET", target.path)
        view = target.model.model_validate(response.json())
        if on_update is not None and view != last:
            on_update(view)
        last = view
        if target.ended(view):
            return view
        clock.check(target.path, last)
        wait = poll_after(response.headers.get("X-Poll-After-Ms"))
        left = clock.left()
        transport.sleep(wait if left is None else max(0.0, min(wait, left)))

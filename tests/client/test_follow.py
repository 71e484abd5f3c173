"""``wait``: the live stream with reconnects, and polling when the stream is unavailable."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from jobservice.client import ApiError, Client, JobView, WaitTimeout
from tests.client.fake_api import DROP, Reply, Seen, error_reply, fake_api, job, json_reply, sse

STREAM = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


def client(url: str, sleeps: list[float]) -> Client:
    return Client(url, retries=2, sleep=sleeps.append)


def statuses(views: list[JobView]) -> list[str]:
    return [v.status for v in views]


def test_a_stream_that_closes_early_is_resumed_with_last_event_id() -> None:
    def respond(seen: Seen, index: int) -> Reply:
        if index == 0:  # the server closes this one before the end
            return Reply(
                200, [b"retry: 20\n\n: keep-alive\n\n", sse(("t1", "status", job(status="queued")))], STREAM
            )
        return Reply(
            200,
            [
                sse(
                    ("t2", "progress", job(status="running", progress=0.5)),
                    ("t3", "end", job(status="succeeded")),
                )
            ],
            STREAM,
        )

    sleeps: list[float] = []
    seen_views: list[JobView] = []
    with fake_api(respond) as api:
        final = client(api.url, sleeps).wait("j1", timeout=30, on_update=seen_views.append)
    assert final.status == "succeeded"
    assert statuses(seen_views) == ["queued", "running", "succeeded"]
    assert api.paths() == ["GET /jobs/j1/stream", "GET /jobs/j1/stream"]
    assert "Last-Event-ID" not in api.seen[0].headers and api.seen[1].headers["Last-Event-ID"] == "t1"
    assert api.seen[0].headers["Accept"] == "text/event-stream"
    assert sleeps == [0.02]  # the server's retry: delay


def test_events_are_handled_as_they_arrive() -> None:
    seen_first = threading.Event()
    waited: list[bool] = []

    def respond(seen: Seen, index: int) -> Reply:
        return Reply(
            200,
            [
                sse(("a", "status", job(status="running"))),
                lambda: waited.append(seen_first.wait(10)),  # the end goes out only after the client saw this
                sse(("b", "end", job(status="failed", error={"code": "boom", "message": "it broke"}))),
            ],
            STREAM,
        )

    with fake_api(respond) as api:
        final = client(api.url, []).wait("j1", on_update=lambda view: seen_first.set())
    assert waited == [True]
    assert final.status == "failed" and final.error is not None and final.error.code == "boom"


@pytest.mark.parametrize(
    "unavailable",
    [
        error_reply(404, "not_found", "The requested URL was not found."),  # an older server: no such route
        Reply(200, b"<html>a proxy page</html>", {"Content-Type": "text/html"}),
        Reply(DROP),
        error_reply(503, "too_many_streams", headers={"Retry-After": "5"}),  # busy: poll, do not wait
    ],
    ids=["no-route", "not-event-stream", "dropped", "busy"],
)
def test_polls_when_the_stream_is_unavailable(unavailable: Reply) -> None:
    polls = iter([job(status="queued", queue_position=2), job(status="running"), job(status="succeeded")])

    def respond(seen: Seen, index: int) -> Reply:
        if seen.path.endswith("/stream"):
            return unavailable
        view = next(polls)
        headers: dict[str, str] = {} if view["status"] == "succeeded" else {"X-Poll-After-Ms": "250"}
        return json_reply(view, headers=headers)

    sleeps: list[float] = []
    updates: list[JobView] = []
    with fake_api(respond) as api:
        final = client(api.url, sleeps).wait("j1", timeout=30, on_update=updates.append)
    assert final.status == "succeeded"
    assert statuses(updates) == ["queued", "running", "succeeded"] and updates[0].queue_position == 2
    assert [p for p in api.paths() if not p.endswith("/stream")] == ["GET /jobs/j1"] * 3
    assert sleeps == [0.25, 0.25]  # X-Poll-After-Ms between polls, and no other wait


def test_a_missing_job_is_an_error_not_a_fallback() -> None:
    with fake_api(lambda seen, index: error_reply(404, "job_not_found", "There is no job 'j9'.")) as api:
        with pytest.raises(ApiError) as caught:
            client(api.url, []).wait("j9")
    assert caught.value.code == "job_not_found" and api.paths() == ["GET /jobs/j9/stream"]


def test_times_out_on_a_stream_that_only_keeps_alive() -> None:
    def respond(seen: Seen, index: int) -> Reply:
        beats: list[Any] = [sse(("q", "status", job(status="queued")))]
        beats += [b": keep-alive\n\n", 0.05] * 100
        return Reply(200, beats, STREAM)

    with fake_api(respond) as api, pytest.raises(WaitTimeout) as caught:
        client(api.url, []).wait("j1", timeout=0.5)
    assert isinstance(caught.value.last, JobView) and caught.value.last.status == "queued"


def test_wait_batch_polls_a_batch() -> None:
    batch: dict[str, Any] = {
        "id": "b1",
        "name": "nightly",
        "status": "running",
        "verdict": None,
        "source": "api",
        "origin": "api",
        "spec_digest": "d",
        "pinned": False,
        "baseline_id": None,
        "created_at": "2026-12-01T07:00:00+00:00",
        "submitted_at": None,
        "finished_at": None,
        "progress": {"total": 2, "created": 2, "running": 2, "fraction": 0.3},
        "links": {"self": "/batches/b1"},
    }

    def respond(seen: Seen, index: int) -> Reply:
        if seen.path.endswith("/stream"):
            return error_reply(404, "not_found")
        return json_reply({**batch, "status": "finished" if index > 1 else "running"})

    sleeps: list[float] = []
    with fake_api(respond) as api:
        final = client(api.url, sleeps).wait_batch("b1", timeout=30)
    assert final.status == "finished" and final.progress.total == 2
    assert api.paths() == ["GET /batches/b1/stream", "GET /batches/b1", "GET /batches/b1"]

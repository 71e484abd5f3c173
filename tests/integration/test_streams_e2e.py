"""Live events and ``Prefer: wait`` through real workers, read over real HTTP.

The app is served by werkzeug's threaded server on a free port (tests/browser/server.py); the
stream is read raw with ``requests(stream=True)``. Streams are set to close after a few seconds so
that following a job to its end also reconnects with ``Last-Event-ID`` a few times, as clients do.
The worker serves only ``fake-good``: a ``fake-frozen`` job stays queued for as long as a test needs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.browser.server import serve
from tests.conftest import ROOT, free_port
from tests.integration.conftest import Stack, build_stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ORDER = {"queued": 0, "running": 1, "succeeded": 2, "failed": 2, "canceled": 2}
SERVED = "fake-good"
UNSERVED = "fake-frozen"  # no worker of this stack takes it


@dataclass
class Live:
    """A served stack: its base URL."""

    stack: Stack
    base: str
    worker_started: bool = False

    def ensure_worker(self) -> None:
        if not self.worker_started:
            self.stack.start_worker("sse", extra_env={"JOBSERVICE_WORKER_MODELS": json.dumps([SERVED])})
            self.worker_started = True


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """A stack whose streams keep alive every second and close after 4 s, served over HTTP."""
    stack = build_stack(
        tmp_path_factory.mktemp("sse"),
        stream_heartbeat_seconds=1.0,
        stream_max_seconds=4.0,
        watch_interval_seconds=0.1,
    )
    with serve(stack.services) as base:
        yield Live(stack, base)
    stack.close()


def read_stream(url: str, *, last_id: str | None = None) -> Iterator[dict[str, str]]:
    """The blocks of one connection to an event stream, as they arrive (comments as ``comment``)."""
    headers = {"Accept": "text/event-stream"}
    if last_id:
        headers["Last-Event-ID"] = last_id
    with requests.get(url, headers=headers, stream=True, timeout=(5, 30)) as response:
        assert response.status_code == 200, response.text
        assert response.headers["Content-Type"].startswith("text/event-stream")
        assert response.headers["Cache-Control"] == "no-cache"
        fields: dict[str, str] = {}
        # chunk_size=None: hand over the bytes as they arrive (the stubs only allow an int).
        for line in response.iter_lines(chunk_size=None, decode_unicode=True):  # type: ignore[call-overload]
            if line == "":
                if fields:
                    yield fields
                fields = {}
                continue
            name, _, value = line.partition(":")
            fields[name or "comment"] = value.removeprefix(" ")


@dataclass
class Followed:
    """Every event of a job or batch, across reconnections."""

    events: list[dict[str, Any]] = field(default_factory=list)
    connections: int = 0
    keep_alives: int = 0


def follow(
    url: str, *, last_id: str | None = None, deadline_s: float = 120, on_first: Any = None
) -> Followed:
    """Read ``url`` until ``end``, reconnecting with the last event id whenever the server closes."""
    out = Followed()
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        out.connections += 1
        for block in read_stream(url, last_id=last_id):
            if block.get("comment") == "keep-alive":
                out.keep_alives += 1
            if "event" not in block:
                continue
            out.events.append({"event": block["event"], "id": block["id"], "view": json.loads(block["data"])})
            last_id = block["id"]
            if on_first is not None and len(out.events) == 1:
                on_first()
            if block["event"] == "end":
                return out
    raise AssertionError(f"no end within {deadline_s} s: {[e['event'] for e in out.events]}")


def submit(live: Live, body: dict[str, Any], **headers: str) -> requests.Response:
    response = requests.post(f"{live.base}/jobs", json=body, headers=headers, timeout=90)
    assert response.status_code == 202, response.text
    return response


def test_prefer_wait_answers_a_queued_job_after_the_wait(live: Live) -> None:
    job = submit(live, {"model": UNSERVED, "prompt": "nobody runs me"}).json()
    started = time.monotonic()
    response = requests.get(f"{live.base}/jobs/{job['id']}", headers={"Prefer": "wait=2"}, timeout=30)
    assert time.monotonic() - started >= 1.9  # held the whole wait: the job cannot end
    assert response.status_code == 200
    assert response.headers["Preference-Applied"] == "wait=2"
    assert response.json()["status"] == "queued"
    requests.post(f"{live.base}/jobs/{job['id']}/cancel", timeout=30)


def test_sse_follows_a_job_from_queued_to_succeeded(live: Live) -> None:
    job = submit(live, {"model": SERVED, "prompt": "live", "num_frames": 48, "step_seconds": 0.05}).json()
    url = f"{live.base}/jobs/{job['id']}/stream"
    followed = follow(url, on_first=live.ensure_worker)  # the worker starts once we saw it queued
    names = [e["event"] for e in followed.events]
    views = [e["view"] for e in followed.events]
    assert names[0] == "status" and views[0]["status"] == "queued"
    assert views[0]["queue_position"] is None  # no worker yet: no group may run it, no place
    assert names[-2:] == ["status", "end"] and views[-1]["status"] == "succeeded"
    assert "progress" in names, names
    for before, after, name in zip(
        views, views[1:], names[1:], strict=False
    ):  # a change is named by what changed
        if before["status"] == after["status"] and before["stage"] != after["stage"]:
            assert name == "stage", (before["stage"], after["stage"], name)
    statuses = [ORDER[v["status"]] for v in views]
    assert statuses == sorted(statuses), names  # queued, then running, then succeeded
    progress = [v["progress"] for v in views]
    assert progress == sorted(progress) and progress[-1] == 1.0, progress
    assert len({e["id"] for e in followed.events[:-1]}) == len(followed.events) - 1  # each event news
    assert followed.connections >= 2  # the worker's start outlives one 4 s stream: resumed at least once
    final = requests.get(f"{live.base}/jobs/{job['id']}", timeout=30).json()
    assert views[-1] == final

    # Resuming from any event sends only what came after it; from the last one, just the end.
    middle = followed.events[len(followed.events) // 2]
    resumed = follow(url, last_id=middle["id"])
    assert resumed.events[0]["view"] != middle["view"]
    assert resumed.events[-1]["event"] == "end" and resumed.events[-1]["view"] == final
    at_end = follow(url, last_id=followed.events[-1]["id"])
    assert [e["event"] for e in at_end.events] == ["end"]


def test_keep_alives_and_a_404_before_streaming(live: Live) -> None:
    job = submit(live, {"model": UNSERVED, "prompt": "waits"}).json()
    blocks = list(read_stream(f"{live.base}/jobs/{job['id']}/stream"))  # closes after 4 s, no end
    assert blocks[0] == {"retry": "1000"}
    assert [b["event"] for b in blocks if "event" in b] == ["status"]
    assert sum(b.get("comment") == "keep-alive" for b in blocks) >= 2
    requests.post(f"{live.base}/jobs/{job['id']}/cancel", timeout=30)
    missing = requests.get(f"{live.base}/jobs/00000000-0000-0000-0000-000000000000/stream", timeout=30)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "job_not_found"


def test_prefer_wait_returns_the_finished_job(live: Live) -> None:
    live.ensure_worker()
    started = time.monotonic()
    response = submit(live, {"model": SERVED, "prompt": "quick", "num_frames": 8}, Prefer="wait=50")
    assert time.monotonic() - started < 50  # answered when the job ended, not when the wait ran out
    assert response.headers["Preference-Applied"] == "wait=50"
    assert response.json()["status"] == "succeeded"
    assert "X-Poll-After-Ms" not in response.headers


def test_batch_stream_ends_when_the_batch_finishes(live: Live, tmp_path: Path) -> None:
    live.ensure_worker()
    case: dict[str, Any] = {
        "name": "c",
        "model": SERVED,
        "params": {"prompt": "b", "num_frames": 8},
        "repeat": 2,
    }
    created = requests.post(
        f"{live.base}/batches", json={"spec": {"name": "sse-batch", "cases": [case]}}, timeout=90
    )
    assert created.status_code == 202, created.text
    batch_id = created.json()["id"]
    followed = follow(f"{live.base}/batches/{batch_id}/stream")
    names = [e["event"] for e in followed.events]
    assert names[0] == "status" and names[-1] == "end", names
    assert set(names) <= {"status", "progress", "end"}
    final = followed.events[-1]["view"]
    # Disturbed repeats are run again (at most 2 more per case): at least the 2 planned ones, all done.
    assert final["status"] == "finished" and final["progress"]["succeeded"] == final["progress"]["total"] >= 2
    assert final == requests.get(f"{live.base}/batches/{batch_id}", timeout=30).json()


def test_gunicorn_holds_streams_to_its_limit_and_frees_a_place_when_a_client_leaves(live: Live) -> None:
    """``jobservice api`` as deployed (gunicorn gthread), with room for two streams."""
    job = submit(live, {"model": UNSERVED, "prompt": "watched by many"}).json()
    port = free_port()
    env = {**live.stack.env, "JOBSERVICE_STREAM_LIMIT": "2", "JOBSERVICE_STREAM_MAX_SECONDS": "60"}
    argv = [sys.executable, "-m", "jobservice.cli.main", "api", "--port", str(port), "--workers", "1"]
    with (live.stack.tmp / "gunicorn.log").open("wb") as out:
        server = subprocess.Popen(
            [*argv, "--threads", "4"],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not _answers(f"{base}/healthz"):
            assert time.monotonic() < deadline and server.poll() is None, "gunicorn did not start"
            time.sleep(0.2)
        url = f"{base}/jobs/{job['id']}/stream"
        held = [requests.get(url, stream=True, timeout=(5, 30)) for _ in range(2)]
        for response in held:
            lines = response.iter_lines()
            assert next(lines) == b"retry: 1000" and next(lines) == b"" and next(lines).startswith(b"id: ")
        refused = requests.get(url, timeout=30)
        assert refused.status_code == 503 and refused.headers["Retry-After"] == "5"
        assert refused.json()["error"]["code"] == "too_many_streams"
        assert requests.get(f"{base}/jobs/{job['id']}", timeout=30).status_code == 200  # threads to spare
        held[0].close()  # the client goes away: noticed at the next keep-alive (1 s here)
        deadline = time.monotonic() + 30
        while (again := requests.get(url, stream=True, timeout=(5, 30))).status_code != 200:
            assert time.monotonic() < deadline, "the place of a client that left was never given back"
            time.sleep(0.5)
        again.close()
        held[1].close()
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        requests.post(f"{live.base}/jobs/{job['id']}/cancel", timeout=30)


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False

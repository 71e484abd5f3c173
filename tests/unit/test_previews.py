"""A running job's preview as the API shows it: the record the run's heartbeat writes into the row,
read only for the attempt and try it belongs to; the view, links, keys and live-event names."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from jobservice.db.tables import Job
from jobservice.http.api.native.streams import job_event_name
from jobservice.jobs import previews
from jobservice.jobs.leases import Owner, heartbeat
from jobservice.jobs.presenters import job_view
from jobservice.jobs.watch import JobState, job_state_of, read_job_states
from tests.factories import new_job


def job(status: str = "running", attempts: int = 1, record: dict[str, Any] | None = None, **kw: Any) -> Job:
    return Job(
        id=uuid.uuid4(),
        task="audio2video",
        model="reference-talking-head",
        params={"seed": 1},
        source="api",
        status=status,
        stage="generating",
        progress=0.3,
        attempts=attempts,
        created_at=datetime(2026, 12, 4, tzinfo=UTC),
        timings={previews.KEY: record} if record is not None else {"total_ms": 5.0},
        **kw,
    )


def ready(number: int = 4, attempt: int = 1, try_: int = 1) -> dict[str, Any]:
    return {
        "attempt": attempt,
        "try": try_,
        "state": "ready",
        "number": number,
        "key": f"jobs/x/preview-{number}.mp4",
        "frames": 112,
        "seconds": 4.48,
        "published_at": "2026-12-04T15:00:00+00:00",
    }


def test_a_ready_preview_is_shown_with_its_link_and_never_in_timings() -> None:
    row = job(record=ready())
    view = job_view(row)
    assert view.preview is not None and view.preview.state == "ready" and view.preview.validated is False
    assert (view.preview.number, view.preview.frames, view.preview.seconds) == (4, 112, 4.48)
    assert view.links["preview"] == f"/jobs/{row.id}/preview?n=4"
    assert view.timings == {} and "not yet validated" in view.preview.message
    assert job_state_of(view).preview == 4


def test_no_preview_for_queued_or_ended_jobs_or_an_earlier_attempts_record() -> None:
    for row in (
        job("queued", record=ready()),
        job("succeeded", record=ready(), output_key="jobs/x/output.mp4"),
        job("failed", record=ready()),
    ):
        view = job_view(row)
        assert view.preview is None and "preview" not in view.links, row.status
    stale = job_view(job(attempts=2, record=ready(attempt=1)))  # the reaper gave it a new attempt
    assert stale.preview is not None and stale.preview.state == "waiting" and "preview" not in stale.links
    retried = job_view(job(record=ready(try_=1), validation_attempts=[{"try": 1, "seed": 1}]))
    assert retried.preview is not None and retried.preview.state == "waiting"  # try 2 has none yet


def test_a_back_end_that_hands_over_a_file_says_no_preview_will_exist() -> None:
    record = {"attempt": 1, "try": 1, "state": "none", "message": previews.NO_PREVIEW_BACKEND}
    view = job_view(job(record=record))
    assert view.preview is not None and view.preview.state == "none"
    assert view.preview.message == previews.NO_PREVIEW_BACKEND and "preview" not in view.links


def test_keys_of_kept_previews_only() -> None:
    row = job(record=ready(number=5))
    assert previews.preview_key(row) == "jobs/x/preview-5.mp4"
    assert previews.preview_key(row, 5) == "jobs/x/preview-5.mp4"
    assert previews.preview_key(row, 3) == "jobs/x/preview-3.mp4"
    assert previews.preview_key(row, 2) is None and previews.preview_key(row, 6) is None
    assert previews.preview_key(job(record=ready(number=1)), 0) is None
    assert previews.preview_key(job("succeeded", record=ready())) is None


def test_a_new_preview_is_its_own_live_event_after_status_and_stage() -> None:
    before = JobState("running", "generating", 0.1, None, False, 1, None, 1)
    assert (
        job_event_name(before, JobState("running", "generating", 0.2, None, False, 1, None, 2)) == "preview"
    )
    assert job_event_name(before, JobState("running", "encoding", 0.2, None, False, 1, None, 2)) == "stage"
    assert (
        job_event_name(before, JobState("running", "generating", 0.2, None, False, 1, None, 1)) == "progress"
    )


def test_the_heartbeat_writes_the_record_that_the_watcher_reads(services: Any) -> None:
    job_id = new_job(services.db, model="reference-talking-head")
    with services.db.session() as s:
        row = s.get(Job, job_id)
        assert row is not None
        row.status, row.worker_id, row.attempts = "running", "w1", 1
    with services.db.session() as s:
        beat = heartbeat(s, job_id, owner=Owner("w1", 1), lease_seconds=30, preview=ready(number=2))
        assert beat.owned
        lost = heartbeat(s, job_id, owner=Owner("w2", 1), lease_seconds=30, preview=ready(number=9))
        assert not lost.owned  # only the run that holds the lease writes its previews
    with services.db.session() as s:
        states = read_job_states(s, [job_id])
        row = s.get(Job, job_id)
        assert row is not None and job_view(row).links["preview"].endswith("?n=2")
    assert states[job_id].preview == 2

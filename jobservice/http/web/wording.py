"""Plain words for what the pages show: failure codes, stages, queue positions, ETAs."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from jobservice.db.tables import JobStatus, utcnow
from jobservice.fleet.views import eta_words

FAILURES = {
    "validation_failed": (
        "The model finished, but its video did not pass the quality checks. "
        "The video and every check are kept below so you can see what went wrong."
    ),
    "timeout": "The job ran longer than its time limit and was stopped.",
    "worker_lost": (
        "The worker running this job stopped answering (it crashed or was restarted), "
        "and the job ran out of retries."
    ),
    "model_load_failed": "The model could not be loaded on the worker, so the job never started generating.",
    "model_unavailable": "No worker of this service can run this model right now.",
    "out_of_memory": "The model ran out of memory on its device. Try a smaller size or fewer frames.",
    "model_error": "The model reported a problem with this job's inputs or parameters.",
    "invalid_image": "The model could not use the portrait image.",
    "invalid_audio": "The model could not use the speech audio.",
    "canceled": "The job was canceled at a user's request.",
    "storage_full": "The object store ran out of space while storing the result; nothing was half-stored.",
    "storage_unavailable": "The object store could not be reached to store the result, even after retries.",
    "internal_error": (
        "Something went wrong inside the service; this is a bug, and the worker's log has the details."
    ),
}

STAGES = {
    "queued": "Waiting in the queue",
    "fetching": "Fetching the inputs",
    "loading": "Loading the model",
    "generating": "Generating frames",
    "encoding": "Encoding the video",
    "validating": "Checking the video",
    "uploading": "Storing the result",
    "done": "Done",
}


def failure_text(code: str | None) -> str:
    """What a failure code means, in a sentence."""
    if not code:
        return "The job failed."
    return FAILURES.get(code, "The job failed.")


def stage_text(status: str, stage: str, cancel_requested: bool = False) -> str:
    """A running job's stage in words (and what a finished one ended as)."""
    if cancel_requested:
        return "Stopping (cancel requested)"
    if status == JobStatus.SUCCEEDED:
        return "Finished"
    if status == JobStatus.FAILED:
        return "Failed"
    if status == JobStatus.CANCELED:
        return "Canceled"
    return STAGES.get(stage, stage.capitalize())


def queue_text(position: int | None) -> str:
    """A queued job's place in line."""
    if position is None:
        return ""
    if position == 0:
        return "next in line"
    return f"{position} ahead"


def eta_text(view: Any, now: datetime | None = None) -> str:
    """When an unfinished job should start (queued) or end (running), as people say it, and how
    sure that is; empty when there is nothing to say."""
    now = now or utcnow()
    if view.eta_basis == "no_group":
        return "no card group online can run this model"
    if view.status == "queued":
        words = eta_words(view.estimated_start_at, now)
    elif view.status == "running":
        words = eta_words(view.estimated_finish_at, now, verb="ends")
    else:
        return ""
    if words is None:
        return ""
    return words + (
        " (a guess: this model's speed is not measured yet)" if view.eta_basis == "not_measured" else ""
    )

"""The typed answers of the client: the API's own view models, and the list pages around them.

``JobView``, ``BatchView`` and ``GroupView`` are the very models the API renders
(``jobservice.jobs.views``, ``jobservice.nightly.views``, ``jobservice.groups.views``); plain
pydantic, without the database, Flask, Celery or torch.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from jobservice.groups.views import GroupList, GroupProgress, GroupView
from jobservice.jobs.views import ErrorView, JobDeleted, JobView, PreviewView, ValidationView
from jobservice.nightly.views import BatchView, CaseView, Progress

TERMINAL_JOB_STATUSES = frozenset({"succeeded", "failed", "canceled"})
ENDED_BATCH_STATUSES = frozenset({"finished", "canceled"})

__all__ = [
    "ENDED_BATCH_STATUSES",
    "TERMINAL_JOB_STATUSES",
    "BatchJob",
    "BatchList",
    "BatchSlot",
    "BatchView",
    "CaseView",
    "ErrorView",
    "GroupList",
    "GroupProgress",
    "GroupView",
    "JobDeleted",
    "JobPage",
    "JobView",
    "PreviewView",
    "Progress",
    "ValidationView",
]


class JobPage(BaseModel):
    """One page of ``GET /jobs``: newest first; ``next_cursor`` is None on the last page."""

    object: str = "list"
    jobs: list[JobView]
    next_cursor: str | None = None


class BatchSlot(BaseModel):
    """Which case and repeat of its batch a job runs."""

    case: str | None = None
    repeat: int | None = None


class BatchJob(JobView):
    """A job as ``GET /batches/<id>/jobs`` lists it: the job view with its slot in the batch."""

    batch: BatchSlot = Field(default_factory=BatchSlot)


class BatchList(BaseModel):
    """``GET /batches`` (newest first, without their cases)."""

    object: str = "list"
    batches: list[BatchView]

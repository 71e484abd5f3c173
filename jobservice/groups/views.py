"""The JSON shape of a job group (``GET /job-groups/<id>``): plain pydantic models, importable
without the service (the Python client, ``jobservice.client``, reads the API's answers into them).

``jobservice.groups.presenters`` builds them from the database; ``group_status`` is the one rule
for a group's status, used by the views, the live stream and the client alike.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

GROUP_STATUSES = ("queued", "running", "finished", "canceled")
ENDED_GROUP_STATUSES = frozenset({"finished", "canceled"})


class GroupProgress(BaseModel):
    """A group's jobs by status."""

    total: int
    queued: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    canceled: int = 0
    fraction: float = Field(description="0..1: ended jobs, plus the progress of running ones, over total.")

    @property
    def ended(self) -> int:
        """Jobs that have ended, however."""
        return self.succeeded + self.failed + self.canceled


def group_status(progress: GroupProgress, *, canceled: bool) -> str:
    """``queued`` (no job started yet), ``running``, then ``finished`` once every job has ended, or
    ``canceled`` when the group was canceled and every job has ended."""
    if progress.queued + progress.running == 0:
        return "canceled" if canceled else "finished"
    if progress.running == 0 and progress.ended == 0:
        return "queued"
    return "running"


class GroupView(BaseModel):
    """The public view of a job group."""

    id: str
    object: str = "job_group"
    name: str
    status: str = Field(description="queued, running, finished (every job ended) or canceled.")
    cancel_requested: bool = Field(
        default=False, description="The group was canceled; jobs may still be stopping."
    )
    tenant: str
    source: str = Field(description="Where the manifest came from: api or web.")
    manifest_format: str = Field(description="csv or jsonl.")
    manifest_sha256: str
    columns: list[str] = Field(default_factory=list, description="The manifest's columns.")
    models: dict[str, int] = Field(default_factory=dict, description="Jobs per model.")
    created_at: datetime
    canceled_at: datetime | None = None
    finished_at: datetime | None = Field(default=None, description="When its last job ended, once all have.")
    progress: GroupProgress
    links: dict[str, str]


class GroupList(BaseModel):
    """``GET /job-groups``: newest first; ``next_cursor`` is None on the last page."""

    object: str = "list"
    groups: list[GroupView]
    next_cursor: str | None = None


class GroupProblem(BaseModel):
    """One problem of a refused manifest (an entry of the 422's ``details``)."""

    row: int | None = Field(default=None, description="1 for the first job.")
    line: int | None = Field(default=None, description="The line of the file the row starts on.")
    column: str | None = None
    type: str = ""
    message: str = ""

    @classmethod
    def of(cls, detail: dict[str, Any]) -> GroupProblem:
        """A detail of an ``invalid_manifest`` refusal."""
        return cls.model_validate(
            {k: detail[k] for k in ("row", "line", "column", "type", "message") if detail.get(k) is not None}
        )

"""The client's job-group calls: submit a manifest, read, list, the jobs, cancel, wait, results, outputs."""

from __future__ import annotations

import csv
import io
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jobservice.client.http import Transport
from jobservice.client.models import JobView
from jobservice.client.sets import SetKind
from jobservice.groups.views import ENDED_GROUP_STATUSES, GroupList, GroupView

GROUPS = SetKind("/job-groups", GroupView, ENDED_GROUP_STATUSES, frozenset({"group_not_found"}))
SUFFIXES = {"csv": ".csv", "jsonl": ".jsonl"}


class GroupCalls:
    """``/job-groups``: mixed into ``Client`` (which sets ``http``)."""

    http: Transport

    def submit_group(
        self,
        manifest: str | Path | bytes,
        *,
        format: str | None = None,
        name: str | None = None,
        idempotency_key: str | None = None,
    ) -> GroupView:
        """``POST /job-groups`` with a manifest: a ``Path`` (``.csv``, ``.jsonl``), or its content
        (bytes or text) with ``format`` ``csv`` or ``jsonl`` (else the server sniffs it). Every row
        is checked before any job exists: a problem anywhere raises ``ApiError`` 422
        ``invalid_manifest`` whose ``details`` name each row and column. Sends an Idempotency-Key
        (a new uuid4 unless given)."""
        if isinstance(manifest, Path):
            filename, data = manifest.name, manifest.read_bytes()
        else:
            data = manifest if isinstance(manifest, bytes) else str(manifest).encode()
            filename = "manifest" + SUFFIXES.get(format or "", "")
        if format in SUFFIXES and not filename.endswith(SUFFIXES[format]):
            filename += SUFFIXES[format]
        headers = {"Idempotency-Key": idempotency_key or str(uuid.uuid4())}
        fields = {"name": name} if name else {}
        answer = self.http.json(
            "POST", "/job-groups", files={"manifest": (filename, data)}, data=fields, headers=headers
        )
        return GroupView.model_validate(answer)

    def get_group(self, group_id: str) -> GroupView:
        """``GET /job-groups/<id>``: its progress (jobs by status) and status."""
        return GROUPS.get(self.http, group_id)

    def list_groups(self, *, limit: int = 20, cursor: str | None = None) -> GroupList:
        """One page of the caller's groups, newest first."""
        query: dict[str, Any] = {"limit": limit}
        if cursor:
            query["cursor"] = cursor
        return GroupList.model_validate(self.http.json("GET", "/job-groups", params=query))

    def group_jobs(self, group_id: str, *, page_size: int = 500) -> list[JobView]:
        """Every job of the group in row order (``group_row``), fetched ``page_size`` at a time."""
        return [JobView.model_validate(job) for job in GROUPS.jobs(self.http, group_id, page_size)]

    def cancel_group(self, group_id: str) -> GroupView:
        """Cancel every unfinished job of the group (409 ``group_finished`` when all had ended)."""
        return GROUPS.get(self.http, group_id, "cancel")

    def wait_group(
        self,
        group_id: str,
        timeout: float | None = None,
        on_update: Callable[[GroupView], None] | None = None,
        *,
        stream: bool = True,
    ) -> GroupView:
        """The group once every job has ended: ``/job-groups/<id>/stream``, else polling."""
        return GROUPS.wait(self.http, group_id, timeout, on_update, stream)

    def group_results(self, group_id: str) -> list[dict[str, str]]:
        """The results CSV, one dict per row: row, job_id, model, status, verdict, video_url,
        card_seconds, error_code, error_message."""
        text = self.http.call("GET", f"/job-groups/{group_id}/results", timeout=(self.http.timeout, 300)).text
        return list(csv.DictReader(io.StringIO(text)))

    def download_group_outputs(self, group_id: str, path: str | Path) -> Path:
        """Save the zip of the group's videos (and results.csv) to ``path``, streamed."""
        return self.http.save(f"/job-groups/{group_id}/outputs", Path(path))

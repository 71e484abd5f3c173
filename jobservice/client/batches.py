"""The client's batch calls: create from a spec, read, list, the jobs, cancel, resume, wait, report."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from jobservice.client.http import Transport
from jobservice.client.models import ENDED_BATCH_STATUSES, BatchJob, BatchList, BatchView
from jobservice.client.sets import SetKind

BATCHES = SetKind("/batches", BatchView, ENDED_BATCH_STATUSES, frozenset({"batch_not_found"}))


class BatchCalls:
    """``/batches``: mixed into ``Client`` (which sets ``http``)."""

    http: Transport

    def submit_batch(
        self,
        spec: dict[str, Any] | None = None,
        *,
        spec_yaml: str | None = None,
        spec_path: str | None = None,
        idempotency_key: str | None = None,
    ) -> BatchView:
        """``POST /batches`` with exactly one of a spec (a mapping), its YAML text, or a spec file
        under the server's batch root. Sends an Idempotency-Key (a new uuid4 unless given)."""
        given = {"spec": spec, "spec_yaml": spec_yaml, "spec_path": spec_path}
        body = {k: v for k, v in given.items() if v is not None}
        if len(body) != 1:
            raise ValueError("give exactly one of spec, spec_yaml or spec_path")
        headers = {"Idempotency-Key": idempotency_key or str(uuid.uuid4())}
        return BatchView.model_validate(self.http.json("POST", "/batches", json=body, headers=headers))

    def get_batch(self, batch_id: str) -> BatchView:
        """``GET /batches/<id>``: progress, and once finished the verdict of each case."""
        return BATCHES.get(self.http, batch_id)

    def list_batches(
        self, *, name: str | None = None, status: str | None = None, limit: int = 20
    ) -> list[BatchView]:
        """Batches newest first (without their cases), of one spec name or status if given."""
        query: dict[str, Any] = {"limit": limit}
        query.update({k: v for k, v in (("name", name), ("status", status)) if v})
        return BatchList.model_validate(self.http.json("GET", "/batches", params=query)).batches

    def batch_jobs(self, batch_id: str, *, page_size: int = 500) -> list[BatchJob]:
        """Every job of the batch (retries included), oldest first, each with its case and repeat;
        fetched ``page_size`` at a time (a server without paging sends them all at once)."""
        return [BatchJob.model_validate(job) for job in BATCHES.jobs(self.http, batch_id, page_size)]

    def cancel_batch(self, batch_id: str) -> BatchView:
        """Cancel the batch's unfinished jobs."""
        return BATCHES.get(self.http, batch_id, "cancel")

    def resume_batch(self, batch_id: str) -> BatchView:
        """Queue the slots that have no job yet (or a canceled one)."""
        return BATCHES.get(self.http, batch_id, "resume")

    def wait_batch(
        self,
        batch_id: str,
        timeout: float | None = None,
        on_update: Callable[[BatchView], None] | None = None,
        *,
        stream: bool = True,
    ) -> BatchView:
        """The batch once finished or canceled: ``/batches/<id>/stream``, else polling."""
        return BATCHES.wait(self.http, batch_id, timeout, on_update, stream)

    def batch_report(self, batch_id: str, format: str = "json") -> Any:
        """A finished batch's report: a dict for ``json``, text for ``csv`` and ``md``."""
        response = self.http.call("GET", f"/batches/{batch_id}/report", params={"format": format})
        return response.json() if format == "json" else response.text

"""The client's job calls: submit, read, list, cancel, delete, wait, download, report."""

from __future__ import annotations

import builtins
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from jobservice.client.follow import Target, follow, status_target
from jobservice.client.http import Transport, Upload
from jobservice.client.models import TERMINAL_JOB_STATUSES, JobDeleted, JobPage, JobView
from jobservice.client.uploads import UploadId

JOB_MISSING = frozenset({"job_not_found", "job_deleted"})


def _field(value: Any) -> str:
    """A parameter as a multipart field: strings as they are, anything else as JSON (true, 3, [..])."""
    return value if isinstance(value, str) else json.dumps(value)


def _filename(source: Upload, fallback: str) -> str:
    if isinstance(source, str | Path):
        return Path(source).name
    name = getattr(source, "name", None)
    return Path(name).name if isinstance(name, str) else fallback


def job_target(job_id: str) -> Target[JobView]:
    """A job, as ``follow`` waits for it."""
    return status_target(f"/jobs/{job_id}", JobView, ended=TERMINAL_JOB_STATUSES, missing=JOB_MISSING)


class JobCalls:
    """``/jobs``: mixed into ``Client`` (which sets ``http``)."""

    http: Transport

    def submit(
        self,
        *,
        task: str | None = None,
        model: str | None = None,
        image: Upload | None = None,
        audio: Upload | None = None,
        idempotency_key: str | None = None,
        **params: Any,
    ) -> JobView:
        """``POST /jobs``: JSON without files, multipart with them; a file given as an ``UploadId``
        (``upload()``'s answer) is named by its id. Always sends an Idempotency-Key (a new uuid4
        unless given), so a retried request cannot create a second job."""
        headers = {"Idempotency-Key": idempotency_key or str(uuid.uuid4())}
        fields = {k: v for k, v in {"task": task, "model": model, **params}.items() if v is not None}
        inputs = (("image", image), ("audio", audio))
        fields.update({name: str(source) for name, source in inputs if isinstance(source, UploadId)})
        files = {
            name: (_filename(source, name), source)
            for name, source in inputs
            if source is not None and not isinstance(source, UploadId)
        }
        if files:
            data = {k: _field(v) for k, v in fields.items()}
            answer = self.http.json("POST", "/jobs", data=data, files=files, headers=headers)
        else:
            answer = self.http.json("POST", "/jobs", json=fields, headers=headers)
        return JobView.model_validate(answer)

    def submit_audio2video(
        self,
        *,
        image: Upload,
        audio: Upload,
        model: str | None = None,
        idempotency_key: str | None = None,
        **params: Any,
    ) -> JobView:
        """An audio2video job: a portrait (path, bytes or binary file) and the speech to animate it."""
        return self.submit(
            task="audio2video",
            model=model,
            image=image,
            audio=audio,
            idempotency_key=idempotency_key,
            **params,
        )

    def submit_text2video(
        self, *, prompt: str, model: str | None = None, idempotency_key: str | None = None, **params: Any
    ) -> JobView:
        """A text2video job from ``prompt`` and the model's parameters (width, num_frames, seed...)."""
        return self.submit(
            task="text2video", model=model, prompt=prompt, idempotency_key=idempotency_key, **params
        )

    def get(self, job_id: str) -> JobView:
        """``GET /jobs/<id>``."""
        return JobView.model_validate(self.http.json("GET", f"/jobs/{job_id}"))

    def list(
        self,
        *,
        status: str | builtins.list[str] | None = None,
        model: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
        tenant: str | None = None,
    ) -> JobPage:
        """One page of jobs, newest first (``status``: one or several; ``tenant``: admins only)."""
        query: dict[str, Any] = {"limit": limit}
        if status:
            query["status"] = status if isinstance(status, str) else ",".join(status)
        for key, value in (("model", model), ("cursor", cursor), ("tenant", tenant)):
            if value:
                query[key] = value
        return JobPage.model_validate(self.http.json("GET", "/jobs", params=query))

    def iter_jobs(
        self,
        *,
        status: str | builtins.list[str] | None = None,
        model: str | None = None,
        page_size: int = 100,
        tenant: str | None = None,
    ) -> Iterator[JobView]:
        """Every job that matches, newest first, fetching pages as the iteration needs them."""
        cursor: str | None = None
        while True:
            page = self.list(status=status, model=model, limit=page_size, cursor=cursor, tenant=tenant)
            yield from page.jobs
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def cancel(self, job_id: str) -> JobView:
        """``POST /jobs/<id>/cancel``: a queued job ends at once, a running one at its next boundary
        (409 ``job_finished`` when it had already ended)."""
        return JobView.model_validate(self.http.json("POST", f"/jobs/{job_id}/cancel"))

    def delete(self, job_id: str) -> JobDeleted:
        """``DELETE /jobs/<id>``: a queued job is canceled, its files are deleted and it is gone (404
        ``job_deleted`` from then on). Refusals (``ApiError``): 409 ``cancel_pending`` for a running
        job (asked to stop; delete again once it ended), ``in_batch``/``in_group`` for a set's job."""
        return JobDeleted.model_validate(self.http.json("DELETE", f"/jobs/{job_id}"))

    def wait(
        self,
        job_id: str,
        timeout: float | None = None,
        on_update: Callable[[JobView], None] | None = None,
        *,
        stream: bool = True,
    ) -> JobView:
        """The job once it has ended (succeeded, failed or canceled): follows ``/jobs/<id>/stream``,
        polling instead when the stream is unavailable (``stream=False``: poll only). Raises
        ``WaitTimeout`` after ``timeout`` seconds."""
        return follow(self.http, job_target(job_id), timeout=timeout, on_update=on_update, use_stream=stream)

    def download(self, job_id: str, path: str | Path) -> Path:
        """Save the job's video to ``path``, streamed (an S3 store's presigned redirect is followed;
        the bearer key is not sent to the other host)."""
        return self.http.save(f"/jobs/{job_id}/video", Path(path))

    def download_preview(self, job_id: str, path: str | Path, number: int | None = None) -> Path:
        """Save a running job's latest preview (``number``: that one, while it is kept) to ``path``:
        what it has rendered so far, with its audio if it has any, not yet validated. Refusals: ``ApiError``
        with ``preview_not_ready``, ``no_preview`` (the model's back end hands over its video only once
        it is finished),
        ``preview_replaced`` (the job ended: ``download`` its video)."""
        query = f"?n={int(number)}" if number is not None else ""
        return self.http.save(f"/jobs/{job_id}/preview{query}", Path(path))

    def report(self, job_id: str) -> dict[str, Any]:
        """The RunReport of the job's last run (JSON: timings, validation, deployment...)."""
        return dict(self.http.json("GET", f"/jobs/{job_id}/report"))

    def events(self, job_id: str) -> builtins.list[dict[str, Any]]:
        """The job's audit trail: every transition with its time, attempt, worker and actor."""
        return builtins.list(self.http.json("GET", f"/jobs/{job_id}/events")["events"])

    def log(self, job_id: str) -> str:
        """The log of the job's last run (the worker's notes and the model process's output)."""
        return self.http.call("GET", f"/jobs/{job_id}/log").text

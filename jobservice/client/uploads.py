"""The client's direct uploads: declare a file, PUT its parts where the API says, complete it;
delete it.

The same calls whatever the API's object store: with S3 the part URLs are presigned (the bytes go
straight to S3, without the API key), with the local store they are paths on the API (sent with
the key). A part that fails (a dropped connection, a 5xx, a 429) is sent again with backoff; the
others are not. An upload that ``upload`` gives up on is deleted, freeing its place in the
tenant's ``pending_uploads`` quota.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

import requests

from jobservice.client.http import RETRY_STATUSES, ApiError, Transport
from jobservice.media.types import TYPE_BY_EXTENSION
from jobservice.uploads.views import UploadPart, UploadView

CONTENT_TYPES = TYPE_BY_EXTENSION  # ".png" -> "image/png": the API's one table (jobservice.media.types)
Progress = Callable[[int, int], None]  # (bytes sent, bytes in all)


class UploadId(str):
    """A ready upload's id: as a job's ``image`` or ``audio`` it names the upload, not a path."""


def content_type_of(path: Path) -> str:
    """The content type to declare for ``path``, by its extension (the API checks the content)."""
    ctype = CONTENT_TYPES.get(path.suffix.lower())
    if ctype is None:
        known = ", ".join(sorted(CONTENT_TYPES))
        raise ValueError(f"{path.name}: say content_type=...; the extension is not one of {known}")
    return ctype


class UploadCalls:
    """``/uploads``: mixed into ``Client`` (which sets ``http``)."""

    http: Transport

    def upload(
        self,
        path: str | Path,
        *,
        content_type: str | None = None,
        part_size: int | None = None,
        on_progress: Progress | None = None,
        part_retries: int | None = None,
    ) -> UploadId:
        """Upload the file at ``path`` and return its upload id, ready to name as a job's ``image``
        or ``audio`` (``submit(..., image=<id>)`` takes it as it takes a file)."""
        view = self.declare_upload(path, content_type=content_type, part_size=part_size)
        assert view.parts is not None
        sent = 0
        try:
            if on_progress:
                on_progress(0, view.size)
            with Path(path).open("rb") as handle:
                for part in view.parts:
                    handle.seek(part.offset)
                    self.put_part(part, handle.read(part.size), retries=part_retries)
                    sent += part.size
                    if on_progress:
                        on_progress(sent, view.size)
            return UploadId(self.complete_upload(view.id).id)
        except Exception:
            self._forget_upload(view.id)
            raise

    def _forget_upload(self, upload_id: str) -> None:
        """Delete an upload that ``upload`` gave up on: nobody holds its id, and while it is pending
        it takes one of the tenant's ``pending_uploads`` places (failing to is not an error)."""
        with contextlib.suppress(ApiError, requests.RequestException):
            self.delete_upload(upload_id)

    def declare_upload(
        self, path: str | Path, *, content_type: str | None = None, part_size: int | None = None
    ) -> UploadView:
        """``POST /uploads`` for the file at ``path``: where to PUT each part."""
        path = Path(path)
        body: dict[str, object] = {
            "filename": path.name,
            "size": os.path.getsize(path),
            "content_type": content_type or content_type_of(path),
        }
        if part_size is not None:
            body["part_size"] = part_size
        # A declaration creates nothing a retry would duplicate harmfully: an unused one expires.
        return UploadView.model_validate(self.http.json("POST", "/uploads", json=body, repeatable=True))

    def put_part(self, part: UploadPart, data: bytes, *, retries: int | None = None) -> None:
        """PUT one part's bytes, again after a failure (the same bytes: repeating is safe)."""
        if part.url.startswith("/"):  # the API takes the part itself (local store): send the key
            self.http.call("PUT", part.url, data=data, repeatable=True, retries=retries)
            return
        most = self.http.retries if retries is None else retries
        attempt = 0
        while True:
            try:
                response = self.http.session.put(part.url, data=data, timeout=self.http.timeout)
            except (requests.ConnectionError, requests.Timeout):
                if attempt >= most:
                    raise
            else:
                if response.status_code < 300:
                    return
                if (
                    response.status_code not in RETRY_STATUSES
                    and response.status_code < 500
                    or attempt >= most
                ):
                    raise ApiError(
                        response.status_code,
                        "part_upload_failed",
                        f"The object store refused part {part.number}: {response.text[:300]}",
                    )
            self.http.sleep(self.http.backoff.delay(attempt))
            attempt += 1

    def complete_upload(self, upload_id: str) -> UploadView:
        """``POST /uploads/<id>/complete``: the upload checked and ready (a refusal raises ApiError)."""
        return UploadView.model_validate(
            self.http.json("POST", f"/uploads/{upload_id}/complete", repeatable=True)
        )

    def get_upload(self, upload_id: str) -> UploadView:
        """``GET /uploads/<id>``."""
        return UploadView.model_validate(self.http.json("GET", f"/uploads/{upload_id}"))

    def delete_upload(self, upload_id: str) -> None:
        """``DELETE /uploads/<id>``: its parts and object go (jobs that used it keep their copies);
        ApiError 404 ``upload_not_found`` when there is none, or it was deleted already."""
        self.http.call("DELETE", f"/uploads/{upload_id}").close()

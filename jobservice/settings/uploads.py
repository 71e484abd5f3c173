"""Settings of direct uploads (jobservice.uploads)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class UploadSettings(BaseModel):
    """Direct uploads.

    Read by `jobservice.uploads`: `POST /uploads` declares a file and answers where to PUT its bytes
    (presigned S3 URLs, or the API itself with the local store), `POST /uploads/<id>/complete`
    checks it by content; jobs then name the upload instead of sending the file.
    """

    upload_expiry_hours: float = Field(
        default=24.0,
        gt=0,
        description="An upload no job used is deleted (object and row) this long after it was declared; "
        "a job that uses one keeps its own copy for the job's retention.",
    )
    upload_multipart_threshold_mb: int = Field(
        default=64, ge=5, description="Files larger than this are uploaded in parts (one PUT below it)."
    )
    upload_part_mb: int = Field(
        default=64,
        ge=5,
        le=5 * 1024,
        description="Size of each part of a multipart upload (larger where a file would need more "
        "than 10,000 parts).",
    )
    upload_direct_above_mb: float = Field(
        default=16.0,
        ge=0,
        description="The web form sends a file larger than this as a direct upload (with progress, "
        "failed parts sent again) before it submits the job; 0: every file.",
    )
    upload_url_seconds: int = Field(
        default=3600, ge=60, le=7 * 24 * 3600, description="How long the PUT URLs of an upload stay valid."
    )

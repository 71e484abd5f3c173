"""What a client reads of an upload (pydantic only: ``jobservice.client`` imports these)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field


class UploadPart(BaseModel):
    """Where to PUT one part: bytes ``offset`` to ``offset + size - 1`` of the file."""

    number: int = Field(description="The part's number, from 1.")
    url: str = Field(
        description="Where to PUT the part's bytes: a presigned S3 URL (send no Authorization header), "
        "or a path on this API (local store; join it with the API's address and send your key)."
    )
    offset: int = Field(description="Where the part starts in the file.")
    size: int = Field(description="How many bytes the part holds.")


class UploadView(BaseModel):
    """An upload: declared (``pending``: PUT the parts, then complete it) or ``ready`` for jobs."""

    id: str
    object: Literal["upload"] = "upload"
    status: Literal["pending", "ready"]
    filename: str
    content_type: str
    kind: Literal["image", "audio"] = Field(description="The job input it can be.")
    size: int
    multipart: bool = Field(description="Whether the file goes in several parts.")
    part_size: int
    parts: list[UploadPart] | None = Field(
        None, description="Where to PUT each part (on declaration only); one part means one PUT."
    )
    complete_url: str = Field(description="POST here once every part is PUT.")
    created_at: datetime
    expires_at: datetime = Field(description="When an unused upload is deleted.")
    completed_at: datetime | None = None
    facts: dict[str, Any] | None = Field(None, description="What the content check found (once ready).")

"""Settings of the object store (jobservice.storage)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr


class StorageSettings(BaseModel):
    """Object store.

    Read by `jobservice.storage.make_store`: videos, thumbnails, inputs and reports live in a local
    folder or an S3 bucket (path-style addressing, SigV4).
    """

    storage_backend: Literal["local", "s3"] = Field(
        default="local",
        description="`local`: a folder (storage_root); `s3`: an S3 bucket (the s3_* settings).",
    )
    storage_root: Path | None = Field(
        default=None, description="Local object store folder; unset: var_dir/objects."
    )
    s3_bucket: str = Field(default="jobservice", description="The bucket that holds every object.")
    s3_endpoint_url: str | None = Field(
        default=None, description="S3 endpoint (MinIO, Ceph, ...); unset: AWS for s3_region."
    )
    s3_public_endpoint_url: str | None = Field(
        default=None,
        description="Endpoint used in the presigned video URLs handed to clients, if they reach S3 by "
        "another name than s3_endpoint_url.",
    )
    s3_region: str = Field(default="us-east-1", description="Region the requests are signed for.")
    s3_access_key_id: str | None = Field(
        default=None, description="Access key; unset: boto3's own lookup (environment, profile, role)."
    )
    s3_secret_access_key: SecretStr | None = Field(default=None, description="Secret of s3_access_key_id.")
    s3_presign_seconds: int = Field(
        default=3600, ge=60, le=7 * 24 * 3600, description="How long a presigned download URL stays valid."
    )
    s3_multipart_threshold_mb: int = Field(
        default=16, ge=5, description="Files larger than this are uploaded in parts of this size."
    )
    s3_create_bucket: bool = Field(default=True, description="Create the bucket on first use if missing.")

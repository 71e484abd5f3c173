"""Object storage for job inputs, videos and reports: a local folder or an S3 bucket.

Callers depend only on :class:`ObjectStore` and build the concrete store with
:func:`make_store`, once per process (after fork, for workers).

A leaf of the domain: imports only ``jobservice.settings``; anything may import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobservice.storage.base import (
    ObjectInfo,
    ObjectNotFound,
    ObjectStore,
    StoredPart,
    StoreFull,
    StoreUnavailable,
)
from jobservice.storage.local import LocalStore, guess_content_type, validate_key

if TYPE_CHECKING:
    from jobservice.settings import Settings
    from jobservice.storage.s3 import S3Store

__all__ = [
    "LocalStore",
    "ObjectInfo",
    "ObjectNotFound",
    "ObjectStore",
    "S3Store",
    "StoredPart",
    "StoreFull",
    "StoreUnavailable",
    "guess_content_type",
    "make_store",
    "validate_key",
]


def make_store(settings: Settings) -> ObjectStore:
    """Build the object store selected by ``settings.storage_backend``."""
    if settings.storage_backend == "local":
        return LocalStore(settings.resolved_storage_root())
    if settings.storage_backend == "s3":
        from jobservice.storage.s3 import S3Store

        return S3Store.from_settings(settings)
    raise ValueError(f"unknown storage backend: {settings.storage_backend!r}")


def __getattr__(name: str) -> object:
    # boto3 takes ~0.3 s to import; only pay for it when S3 is actually used.
    if name == "S3Store":
        from jobservice.storage.s3 import S3Store

        return S3Store
    raise AttributeError(name)

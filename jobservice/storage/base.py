"""The object store contract shared by the local-folder and S3 back ends.

Keys are slash-separated (``jobs/<id>/inputs/image.png``). Writes are atomic: a reader sees the
whole object or none. Large files move by path, never through memory.
"""

from __future__ import annotations

import abc
import builtins
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO


class ObjectNotFound(KeyError):
    """The key does not exist."""


class StoreUnavailable(RuntimeError):
    """The store cannot be reached or refused the operation.

    ``transient``: worth trying again shortly (a dropped connection, a 5xx, an I/O hiccup); writes
    are retried with backoff (jobservice/storage/retry.py) before this reaches a caller.
    """

    def __init__(self, message: str, *, transient: bool = True) -> None:
        super().__init__(message)
        self.transient = transient


class StoreFull(StoreUnavailable):
    """The store has no room for the object (a full disk, a quota); nothing was stored."""

    def __init__(self, message: str) -> None:
        super().__init__(message, transient=False)


@dataclass(frozen=True)
class ObjectInfo:
    """Metadata about one stored object."""

    key: str
    size: int
    content_type: str | None = None
    # When it was last written (aware UTC), as listings report it; None where unknown.
    modified: datetime | None = None


@dataclass(frozen=True)
class StoredPart:
    """One part of a multipart upload that the store holds (``etag`` as the store names it)."""

    number: int
    size: int
    etag: str


class ObjectStore(abc.ABC):
    """Where inputs, videos and reports live."""

    backend: str = "abstract"

    @abc.abstractmethod
    def put_file(self, key: str, path: Path, *, content_type: str | None = None) -> ObjectInfo:
        """Store the file at ``path`` under ``key`` (streamed; multipart on S3 for large files)."""

    @abc.abstractmethod
    def put_bytes(self, key: str, data: bytes, *, content_type: str | None = None) -> ObjectInfo:
        """Store a small object from memory (reports, JSON)."""

    @abc.abstractmethod
    def get_file(self, key: str, dest: Path) -> Path:
        """Copy the object to ``dest`` (streamed) and return ``dest``."""

    @abc.abstractmethod
    def get_bytes(self, key: str) -> bytes:
        """Read a small object into memory."""

    @abc.abstractmethod
    def head(self, key: str) -> ObjectInfo:
        """Metadata of ``key``; raises ObjectNotFound."""

    def exists(self, key: str) -> bool:
        """Whether ``key`` exists."""
        try:
            self.head(key)
        except ObjectNotFound:
            return False
        return True

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Delete ``key``; deleting a missing key is not an error."""

    @abc.abstractmethod
    def delete_prefix(self, prefix: str) -> int:
        """Delete every key under ``prefix``; returns how many were deleted."""

    @abc.abstractmethod
    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Objects whose key starts with ``prefix``, in key order."""

    @abc.abstractmethod
    def open_range(self, key: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """Stream bytes ``start..end`` (inclusive end, None = to the end) of ``key``."""

    def local_path(self, key: str) -> Path | None:
        """A filesystem path for ``key`` when the store is a local folder, else None."""
        return None

    def presigned_url(
        self, key: str, *, expires_seconds: int | None = None, filename: str | None = None
    ) -> str | None:
        """A time-limited URL a client can GET directly (S3), else None."""
        return None

    @abc.abstractmethod
    def check(self) -> None:
        """Raise StoreUnavailable if the store cannot be used right now (for /readyz)."""

    @abc.abstractmethod
    def copy(self, source: str, key: str) -> ObjectInfo:
        """Copy the object ``source`` to ``key`` inside the store (server-side on S3)."""

    # --- direct uploads: a client sends an object's bytes itself, in one PUT or in parts ---------
    # One interface for both back ends: S3 hands out presigned URLs (the bytes never reach the
    # API); the local store has no URLs of its own (``put_url``/``part_url`` answer None) and the
    # API takes each part through ``put_part`` instead. Parts are numbered from 1.
    def put_url(self, key: str, *, size: int, expires_seconds: int) -> str | None:
        """A URL a client can PUT the whole object (``size`` bytes, signed in where the store signs)
        to, or None where the store has none (local)."""
        return None

    @abc.abstractmethod
    def start_upload(self, key: str, *, content_type: str | None = None) -> str:
        """Begin a multipart upload of ``key``; returns its upload id."""

    def part_url(
        self, key: str, upload_id: str, number: int, *, size: int, expires_seconds: int
    ) -> str | None:
        """A URL a client can PUT part ``number`` (``size`` bytes) to, or None where the store has
        none (local)."""
        return None

    def put_part(self, key: str, upload_id: str, number: int, stream: IO[bytes], size: int) -> StoredPart:
        """Store part ``number`` from ``stream`` (exactly ``size`` bytes), for stores without URLs."""
        raise NotImplementedError(f"{self.backend} stores take parts through their URLs")

    @abc.abstractmethod
    def list_parts(self, key: str, upload_id: str) -> builtins.list[StoredPart]:
        """The parts received so far, by number; raises ObjectNotFound for an unknown upload."""

    @abc.abstractmethod
    def finish_upload(self, key: str, upload_id: str, parts: builtins.list[StoredPart]) -> ObjectInfo:
        """Join ``parts`` (in order) into the object ``key`` and end the upload."""

    @abc.abstractmethod
    def abort_upload(self, key: str, upload_id: str) -> None:
        """Drop an unfinished upload and its parts; an unknown upload is not an error."""

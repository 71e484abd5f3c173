"""The object store as a plain folder: one file per key under a root directory.

Used for single-host deployments and tests. The API serves videos straight from
:meth:`LocalStore.local_path` so HTTP Range requests never pass through Python.
"""

from __future__ import annotations

import builtins
import errno
import mimetypes
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from jobservice.media.types import TYPE_BY_EXTENSION
from jobservice.storage.base import (
    ObjectInfo,
    ObjectNotFound,
    ObjectStore,
    StoredPart,
    StoreFull,
    StoreUnavailable,
)
from jobservice.storage.retry import retrying

CHUNK_SIZE = 1024 * 1024
"""Bytes per chunk yielded by ``open_range`` (both back ends)."""

# Temp files live next to their target so os.replace is a same-directory rename (atomic).
# Keys may not use this prefix, so list() can skip half-written files without ambiguity.
_TMP_PREFIX = ".~jobservice-tmp-"

# Fixed answers for the media types the service produces or accepts, so head() does not
# depend on the host's /etc/mime.types (which maps .wav to audio/x-wav on some systems).
_CONTENT_TYPES = {
    ".mp4": "video/mp4",
    ".json": "application/json",
    ".txt": "text/plain",
    ".html": "text/html",
    **TYPE_BY_EXTENSION,  # the inputs jobs accept (jobservice.media.types)
}
DEFAULT_CONTENT_TYPE = "application/octet-stream"
# Unfinished multipart uploads: <root>/<this>/<upload id>/<part number>, outside every key (the
# reserved prefix), so listings never show them; finish_upload joins them into the object.
_PARTS_DIR = _TMP_PREFIX + "uploads"


def guess_content_type(key: str) -> str:
    """The media type implied by the key's extension (octet-stream when unknown)."""
    suffix = os.path.splitext(key)[1].lower()
    if suffix in _CONTENT_TYPES:
        return _CONTENT_TYPES[suffix]
    guessed, _ = mimetypes.guess_type(key, strict=False)
    return guessed or DEFAULT_CONTENT_TYPE


def validate_key(key: str) -> str:
    """Return ``key`` if it is a safe relative slash-separated key, else raise ValueError.

    Both back ends apply the same rule so a key that works locally also works on S3 and
    can never escape the local root (no absolute paths, ``..``, backslashes or NUL).
    """
    if not isinstance(key, str) or not key:
        raise ValueError("object key must be a non-empty string")
    if "\x00" in key or "\\" in key:
        raise ValueError(f"object key contains a forbidden character: {key!r}")
    if key.startswith("/"):
        raise ValueError(f"object key must be relative: {key!r}")
    for part in key.split("/"):
        if part in ("", ".", ".."):
            raise ValueError(f"object key has an empty, '.' or '..' segment: {key!r}")
        if part.startswith(_TMP_PREFIX):
            raise ValueError(f"object key uses a reserved name: {key!r}")
    return key


def clamp_range(start: int, end: int | None, size: int) -> tuple[int, int] | None:
    """Clip an inclusive byte range to an object of ``size`` bytes; None when it is empty."""
    if start < 0:
        raise ValueError("range start must be >= 0")
    if end is not None and end < start:
        raise ValueError("range end must be >= start")
    last = size - 1 if end is None else min(end, size - 1)
    if start > last:
        return None
    return start, last


def _atomic_write(target: Path, fill: Callable[[Path], object]) -> None:
    """Have ``fill`` write a temp file beside ``target``, then rename it into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=_TMP_PREFIX, dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        fill(tmp)
        # mkstemp creates 0600; objects must be readable by the API process too.
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


_NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
_REFUSED = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})
_TRANSIENT = frozenset({errno.EIO, errno.EAGAIN, errno.EINTR, errno.EBUSY, errno.ESTALE, errno.ETIMEDOUT})


def _store_write(target: Path, fill: Callable[[Path], object], key: str) -> None:
    """``_atomic_write`` into the store, its OS errors told apart: full, refused or transient.

    The temp file is gone whatever happened, so a failed write leaves nothing half-stored.
    """
    try:
        _atomic_write(target, fill)
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        if exc.errno in _NO_ROOM:
            raise StoreFull(f"the object store has no room for {key}: {reason}") from exc
        if exc.errno in _REFUSED:
            raise StoreUnavailable(f"the object store refused {key}: {reason}", transient=False) from exc
        if exc.errno in _TRANSIENT:
            raise StoreUnavailable(f"writing {key} failed: {reason}") from exc
        raise


class LocalStore(ObjectStore):
    """An ObjectStore backed by files under ``root``.

    A key cannot be both an object and a "directory" of other objects here (``a/b`` and
    ``a/b/c``), unlike S3; the service's key layout never does that.
    """

    backend = "local"

    def __init__(self, root: Path) -> None:
        """Use ``root`` (made absolute now; created lazily on first write or check())."""
        self.root = Path(root).resolve()

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*validate_key(key).split("/"))

    def _file(self, key: str) -> Path:
        """The path of an existing object, or ObjectNotFound."""
        path = self._path(key)
        if not path.is_file():
            raise ObjectNotFound(key)
        return path

    def put_file(self, key: str, path: Path, *, content_type: str | None = None) -> ObjectInfo:
        """Copy ``path`` into the store (the caller keeps its file); content_type is derived from the key."""
        target = self._path(key)
        # copyfile uses sendfile/copy_file_range on Linux, so big videos never pass through Python.
        retrying(
            lambda: _store_write(target, lambda tmp: shutil.copyfile(path, tmp), key), what=f"storing {key}"
        )
        return self.head(key)

    def put_bytes(self, key: str, data: bytes, *, content_type: str | None = None) -> ObjectInfo:
        """Write a small object from memory; content_type is derived from the key."""
        target = self._path(key)
        retrying(lambda: _store_write(target, lambda tmp: tmp.write_bytes(data), key), what=f"storing {key}")
        return self.head(key)

    def get_file(self, key: str, dest: Path) -> Path:
        """Copy the object to ``dest`` atomically and return ``dest``."""
        source = self._file(key)
        dest = Path(dest)
        _atomic_write(dest, lambda tmp: shutil.copyfile(source, tmp))
        return dest

    def get_bytes(self, key: str) -> bytes:
        """Read a small object into memory."""
        try:
            return self._file(key).read_bytes()
        except FileNotFoundError as exc:  # deleted between the check and the read
            raise ObjectNotFound(key) from exc

    def head(self, key: str) -> ObjectInfo:
        """Size and (extension-derived) content type of ``key``; raises ObjectNotFound."""
        path = self._path(key)
        try:
            st = path.stat()
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise ObjectNotFound(key) from exc
        if not path.is_file():
            raise ObjectNotFound(key)
        return ObjectInfo(key=key, size=st.st_size, content_type=guess_content_type(key))

    def delete(self, key: str) -> None:
        """Remove ``key`` if present and prune directories it leaves empty."""
        path = self._path(key)
        try:
            path.unlink()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return
        self._prune(path.parent)

    def delete_prefix(self, prefix: str) -> int:
        """Delete every key starting with ``prefix`` (must be non-empty); returns the count."""
        if not prefix:
            raise ValueError("refusing to delete the whole store: prefix is empty")
        count = 0
        for info in list(self.list(prefix)):
            path = self._path(info.key)
            try:
                path.unlink()
            except FileNotFoundError:
                continue  # a concurrent delete got there first
            count += 1
            self._prune(path.parent)
        return count

    def _prune(self, directory: Path) -> None:
        """Remove empty directories from ``directory`` up to (not including) the root."""
        while directory != self.root and self.root in directory.parents:
            try:
                directory.rmdir()
            except OSError:  # not empty (or already gone): stop climbing
                return
            directory = directory.parent

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Objects whose key starts with ``prefix`` (plain string prefix, as on S3), in key order."""
        # Only walk the deepest directory the prefix pins down, not the whole store.
        head, _, _ = prefix.rpartition("/")
        start = self._path(head) if head else self.root
        if not start.is_dir():
            return
        found: list[tuple[str, int, float]] = []
        for dirpath, dirnames, filenames in os.walk(start):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(_TMP_PREFIX))
            rel = Path(dirpath).relative_to(self.root).as_posix()
            base = "" if rel == "." else rel + "/"
            for name in filenames:
                if name.startswith(_TMP_PREFIX):
                    continue
                key = base + name
                if key.startswith(prefix):
                    try:
                        st = os.stat(os.path.join(dirpath, name))
                        found.append((key, st.st_size, st.st_mtime))
                    except FileNotFoundError:
                        continue
        # Python orders str by code point, which matches S3's UTF-8 byte order.
        for key, size, mtime in sorted(found):
            modified = datetime.fromtimestamp(mtime, UTC)
            yield ObjectInfo(key=key, size=size, content_type=guess_content_type(key), modified=modified)

    def open_range(self, key: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """Stream bytes ``start..end`` (inclusive, clipped to the object) in CHUNK_SIZE pieces.

        Raises ObjectNotFound immediately (not on first iteration) so callers can answer 404
        before they start a response.
        """
        info = self.head(key)
        span = clamp_range(start, end, info.size)
        if span is None:
            return iter(())
        return self._read_span(self._path(key), *span)

    @staticmethod
    def _read_span(path: Path, first: int, last: int) -> Iterator[bytes]:
        # The file is opened inside the generator so an iterator that is never consumed
        # does not leak an open handle.
        remaining = last - first + 1
        with open(path, "rb") as fh:
            fh.seek(first)
            while remaining > 0:
                chunk = fh.read(min(CHUNK_SIZE, remaining))
                if not chunk:
                    return
                remaining -= len(chunk)
                yield chunk

    def copy(self, source: str, key: str) -> ObjectInfo:
        """Copy ``source`` to ``key`` (copy_file_range: the bytes never pass through Python)."""
        path = self._file(source)
        return self.put_file(key, path)

    # --- direct uploads: the API takes the parts (put_part); no URLs of our own --------------------
    def _parts(self, upload_id: str) -> Path:
        try:
            name = uuid.UUID(upload_id).hex
        except ValueError:
            raise ObjectNotFound(upload_id) from None
        return self.root / _PARTS_DIR / name

    def start_upload(self, key: str, *, content_type: str | None = None) -> str:
        """A new upload id and its (empty) folder of parts."""
        validate_key(key)
        upload_id = uuid.uuid4().hex
        self._parts(upload_id).mkdir(parents=True, exist_ok=True)
        return upload_id

    def put_part(self, key: str, upload_id: str, number: int, stream: IO[bytes], size: int) -> StoredPart:
        """Write part ``number`` from ``stream`` (atomically: a broken PUT leaves the old part or none)."""
        folder = self._parts(upload_id)
        if not folder.is_dir():
            raise ObjectNotFound(upload_id)

        def fill(tmp: Path) -> None:
            remaining = size
            with tmp.open("wb") as out:
                while remaining > 0:
                    chunk = stream.read(min(CHUNK_SIZE, remaining))
                    if not chunk:
                        raise StoreUnavailable(f"part {number} of {key} ended after {size - remaining} bytes")
                    out.write(chunk)
                    remaining -= len(chunk)

        _store_write(folder / f"{number:05d}", fill, key)
        return StoredPart(number=number, size=size, etag=f"{number:05d}-{size}")

    def list_parts(self, key: str, upload_id: str) -> builtins.list[StoredPart]:
        """The parts written so far, by number."""
        folder = self._parts(upload_id)
        if not folder.is_dir():
            raise ObjectNotFound(upload_id)
        parts = []
        for path in sorted(folder.iterdir()):
            if path.name.isdecimal():
                size = path.stat().st_size
                parts.append(StoredPart(number=int(path.name), size=size, etag=f"{path.name}-{size}"))
        return parts

    def finish_upload(self, key: str, upload_id: str, parts: builtins.list[StoredPart]) -> ObjectInfo:
        """Join the parts into ``key`` (one atomic write), then drop the folder of parts."""
        folder = self._parts(upload_id)
        if not folder.is_dir():
            raise ObjectNotFound(upload_id)

        def fill(tmp: Path) -> None:
            with tmp.open("wb") as out:
                for part in parts:
                    with (folder / f"{part.number:05d}").open("rb") as src:
                        shutil.copyfileobj(src, out, CHUNK_SIZE)

        _store_write(self._path(key), fill, key)
        shutil.rmtree(folder, ignore_errors=True)
        return self.head(key)

    def abort_upload(self, key: str, upload_id: str) -> None:
        """Remove the folder of parts, if any."""
        try:
            shutil.rmtree(self._parts(upload_id), ignore_errors=True)
        except ObjectNotFound:
            return

    def local_path(self, key: str) -> Path | None:
        """The file for ``key`` (for Flask send_file); it may not exist, so head() first."""
        return self._path(key)

    def check(self) -> None:
        """Create the root if missing and prove it is a writable directory."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(prefix=_TMP_PREFIX, dir=self.root):
                pass
        except OSError as exc:
            raise StoreUnavailable(
                f"local store root {self.root} is not a writable directory: {exc}"
            ) from exc

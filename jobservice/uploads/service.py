"""Direct uploads: declare, take parts (local store only), complete, use in a job, delete, expire.

The two calls every client makes are the same whatever the store: ``declare`` answers where to PUT
the bytes (one part, or several above ``upload_multipart_threshold_mb``), ``complete`` joins the
parts and checks the object by content with the form uploads' own checks
(``jobservice.media.uploads.FILE_CHECKS``). With S3 the URLs are presigned and no byte passes
through the API; with the local store they are paths on the API, which writes each part through
``ObjectStore.put_part``.

The content check reads only what it needs where it can: the local store's file in place; on S3 a
PCM WAV's header (the first 64 KB, laid over a sparse file of the object's size, which is all that
``jobservice.media.wav`` reads), other files whole (an image or a compressed audio file, within
their size limits).

A declaration is admitted against the tenant's ``pending_uploads`` and ``pending_upload_mb``
quotas (``jobservice.quotas.admit.admit_upload``) in the transaction that inserts its row.

A job that names an upload gets a server-side copy of it among its own inputs, so the job keeps it
for the job's retention; the upload itself (unfinished parts, object and row) is deleted by its
tenant (``delete_upload``, ``DELETE /uploads/<id>``) or ``upload_expiry_hours`` after its
declaration by the retention pass (``sweep_uploads``), both through ``discard``. The row goes with
the object: nothing refers to it once the jobs hold their copies, and an id that is gone reads as
one that never was (404). A presigned PUT URL cannot be revoked: an object PUT after its upload
was deleted has no row, and the orphan sweep (``jobservice.retention.orphans``) deletes it.
"""

from __future__ import annotations

import hashlib
import logging
import math
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import IO, Any

from sqlalchemy import delete, select, update

from jobservice.auth.owned import load_owned
from jobservice.auth.principal import Principal
from jobservice.db.tables import Upload, utcnow
from jobservice.errors import Conflict, DomainError, Gone, Invalid, NotFound, TooLarge, Unsupported
from jobservice.media.types import KIND_BY_NAME, listed
from jobservice.media.uploads import FILE_CHECKS, CheckedUpload
from jobservice.media.wav import pcm_wav_facts
from jobservice.quotas.admit import admit_upload
from jobservice.quotas.limits import recent_limits
from jobservice.settings import Settings
from jobservice.storage import ObjectNotFound, StoredPart, StoreUnavailable
from jobservice.uploads.views import UploadPart, UploadView
from jobservice.wiring import Services

log = logging.getLogger(__name__)

MIB = 2**20
MIN_PART_BYTES = 5 * MIB  # S3's smallest part (but the last)
MAX_PART_BYTES = 5 * 2**30  # S3's largest part
MAX_PARTS = 10_000  # S3's most parts
MAX_NAME = 255
WAV_HEAD_BYTES = 64 * 1024
FIELDS = {"filename", "size", "content_type", "part_size"}


@dataclass(frozen=True)
class Declaration:
    """A checked ``POST /uploads`` body."""

    filename: str
    size: int
    content_type: str
    kind: str
    part_size: int | None = None


def _whole(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise Invalid(f"invalid_{name}", f"'{name}' must be a whole number of bytes.", field=name)
    return value


def parse_declaration(body: dict[str, Any], settings: Settings) -> Declaration:
    """The declaration in ``body``, or a 4xx naming what is wrong with it."""
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise Invalid(
            "unexpected_field",
            "An upload is declared with filename, size and content_type (and part_size); "
            f"not '{unknown[0]}'.",
            field=unknown[0],
        )
    name = body.get("filename")
    if not isinstance(name, str) or not name.strip():
        raise Invalid(
            "invalid_filename", "'filename' must be the file's name, a non-empty string.", field="filename"
        )
    if len(name) > MAX_NAME or any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise Invalid(
            "invalid_filename",
            f"'filename' must be at most {MAX_NAME} characters, without control characters.",
            field="filename",
        )
    ctype = body.get("content_type")
    if not isinstance(ctype, str):
        raise Invalid("invalid_content_type", "'content_type' must be a string.", field="content_type")
    kind = KIND_BY_NAME.get(ctype.strip().lower())  # what it claims; the check decides what it is
    if kind is None:
        raise Unsupported(
            "unsupported_content_type",
            f"An upload is an image ({listed('image')}) or speech audio ({listed('audio')}), "
            f"not '{ctype[:100]}'.",
            field="content_type",
        )
    size = _whole(body, "size")
    if size is None or size < 1:
        raise Invalid("invalid_size", "'size' must be the file's size in bytes, at least 1.", field="size")
    limit_mb = settings.max_image_mb if kind == "image" else settings.max_audio_mb
    if size > limit_mb * MIB:
        raise TooLarge("file_too_large", f"The {kind} is larger than {limit_mb} MB.", field="size")
    part_size = _whole(body, "part_size")
    if part_size is not None:
        if not MIN_PART_BYTES <= part_size <= MAX_PART_BYTES:
            raise Invalid(
                "invalid_part_size",
                f"'part_size' must be from {MIN_PART_BYTES} (5 MiB) to {MAX_PART_BYTES} (5 GiB) bytes.",
                field="part_size",
            )
        if math.ceil(size / part_size) > MAX_PARTS:
            raise Invalid(
                "too_many_parts",
                f"{size} bytes in parts of {part_size} would be more than {MAX_PARTS} parts; "
                "choose larger parts.",
                field="part_size",
            )
    return Declaration(
        filename=name, size=size, content_type=ctype.strip().lower(), kind=kind, part_size=part_size
    )


def plan_parts(decl: Declaration, settings: Settings) -> tuple[int, int]:
    """(part size, number of parts): one part up to the threshold, else parts of the chosen size."""
    if decl.part_size is None and decl.size <= settings.upload_multipart_threshold_mb * MIB:
        return decl.size, 1
    part = decl.part_size or max(settings.upload_part_mb * MIB, math.ceil(decl.size / MAX_PARTS))
    return part, math.ceil(decl.size / part)


def part_bounds(row: Upload, number: int) -> tuple[int, int]:
    """(offset, size) of part ``number`` of ``row``."""
    offset = (number - 1) * row.part_size
    return offset, min(row.part_size, row.size - offset)


def complete_path(upload_id: uuid.UUID | str) -> str:
    """Where a client completes the upload."""
    return f"/uploads/{upload_id}/complete"


def part_path(upload_id: uuid.UUID | str, number: int) -> str:
    """Where a client PUTs a part when the store has no URLs of its own (local)."""
    return f"/uploads/{upload_id}/parts/{number}"


def view_of(row: Upload, parts: list[UploadPart] | None = None) -> UploadView:
    """The client's view of ``row`` (with where to PUT the parts on declaration)."""
    meta = row.meta or {}
    return UploadView(
        id=str(row.id),
        status="ready" if row.status == "ready" else "pending",
        filename=row.filename,
        content_type=row.content_type,
        kind="image" if row.kind == "image" else "audio",
        size=row.size,
        multipart=row.parts > 1,
        part_size=row.part_size,
        parts=parts,
        complete_url=complete_path(row.id),
        created_at=row.created_at,
        expires_at=row.expires_at,
        completed_at=row.completed_at,
        facts=meta.get("facts"),
    )


def declare(services: Services, principal: Principal, decl: Declaration) -> UploadView:
    """Record the upload if the tenant's quotas allow it, and answer where to PUT its bytes (a
    refusal, 429 ``quota_exceeded``, leaves nothing behind)."""
    settings, store = services.settings, services.store
    limits = recent_limits(services, principal)
    upload_id = uuid.uuid4()
    key = f"uploads/{upload_id}/{decl.kind}"
    part_size, count = plan_parts(decl, settings)
    seconds = settings.upload_url_seconds
    single = store.put_url(key, size=decl.size, expires_seconds=seconds) if count == 1 else None
    multipart_id = None if single is not None else store.start_upload(key, content_type=decl.content_type)
    now = utcnow()
    row = Upload(
        id=upload_id,
        tenant=principal.tenant,
        kind=decl.kind,
        filename=decl.filename,
        content_type=decl.content_type,
        size=decl.size,
        key=key,
        multipart_id=multipart_id,
        part_size=part_size,
        parts=count,
        status="pending",
        created_at=now,
        expires_at=now + timedelta(hours=settings.upload_expiry_hours),
    )
    urls: list[UploadPart] = []
    for number in range(1, count + 1):
        offset, size = part_bounds(row, number)
        url = single if single is not None else None
        if multipart_id is not None:
            signed = store.part_url(key, multipart_id, number, size=size, expires_seconds=seconds)
            url = signed or part_path(upload_id, number)
        assert url is not None
        urls.append(UploadPart(number=number, url=url, offset=offset, size=size))
    try:
        with services.db.session() as session:
            admit_upload(session, principal, limits, decl.size, now=now)
            session.add(row)
    except BaseException:
        if multipart_id is not None:
            _abort_quietly(services, row)
        raise
    return view_of(row, urls)


def _abort_quietly(services: Services, row: Upload) -> None:
    """Abort ``row``'s multipart upload after its declaration was refused (a failure is logged: the
    store's own expiry of abandoned uploads, or the bucket's lifecycle rule, ends it)."""
    assert row.multipart_id is not None
    try:
        services.store.abort_upload(row.key, row.multipart_id)
    except StoreUnavailable:
        log.exception("upload %s: could not abort the multipart upload of a refused declaration", row.id)


def _owned_upload(services: Services, principal: Principal, raw_id: str) -> Upload:
    """The upload named ``raw_id`` if ``principal`` may see it (another tenant's is a 404 too),
    expired or not."""
    missing = NotFound("upload_not_found", f"There is no upload '{str(raw_id)[:64]}'.")
    return load_owned(raw_id, principal, partial(services.db.get, Upload), missing=missing)


def load_upload(services: Services, principal: Principal, raw_id: str) -> Upload:
    """The upload named ``raw_id`` if ``principal`` may see it and it has not expired (410)."""
    row = _owned_upload(services, principal, raw_id)
    if row.expires_at <= utcnow():
        raise Gone("upload_expired", f"Upload {row.id} expired on {row.expires_at:%Y-%m-%d %H:%M} UTC.")
    return row


def receive_part(
    services: Services, principal: Principal, raw_id: str, number: str, stream: IO[bytes], length: int | None
) -> StoredPart:
    """Store one part PUT to the API (the local store; S3 takes its parts at presigned URLs)."""
    row = load_upload(services, principal, raw_id)
    if row.status == "ready":
        raise Conflict("upload_completed", f"Upload {row.id} is complete; its parts can no longer change.")
    if row.multipart_id is None or services.store.put_url(row.key, size=1, expires_seconds=60) is not None:
        raise Conflict(
            "upload_direct_to_store",
            "This upload's bytes go straight to the object store: "
            "PUT them to the URLs POST /uploads answered.",
        )
    if not (number.isascii() and number.isdecimal() and 1 <= int(number) <= row.parts):
        raise NotFound("part_not_found", f"Upload {row.id} has parts 1 to {row.parts}, not '{number[:20]}'.")
    _, size = part_bounds(row, int(number))
    if length != size:
        raise Invalid(
            "part_size_mismatch",
            f"Part {number} of upload {row.id} is {size} bytes; send exactly that (Content-Length: {size}).",
        )
    try:
        return services.store.put_part(row.key, row.multipart_id, int(number), stream, size)
    except ObjectNotFound:
        raise NotFound("upload_not_found", f"Upload {row.id} is no longer open.") from None


def complete(services: Services, principal: Principal, raw_id: str) -> UploadView:
    """Join the parts, check the object by content, and mark the upload ready (idempotent).

    A file that fails its check is deleted with its row: the refusal leaves nothing behind.
    """
    row = load_upload(services, principal, raw_id)
    if row.status == "ready":
        return view_of(row)
    store = services.store
    if row.multipart_id is not None:
        _finish_parts(services, row)
    try:
        info = store.head(row.key)
    except ObjectNotFound:
        raise Conflict(
            "upload_incomplete", f"Nothing was PUT for upload {row.id} yet; PUT the file, then complete it."
        ) from None
    if info.size != row.size:
        store.delete(row.key)
        raise Invalid(
            "upload_size_mismatch",
            f"Upload {row.id} was declared as {row.size} bytes but {info.size} arrived; PUT it again.",
        )
    deleted = NotFound("upload_not_found", f"Upload {row.id} was deleted while it was being completed.")
    try:
        checked = check_stored(services, row)
    except DomainError:
        _forget(services, row)
        raise
    except ObjectNotFound:  # deleted (DELETE, or expired and swept) while it was read
        raise deleted from None
    facts = {k: v for k, v in checked.meta.items() if v != "" or k != "sha256"}  # no digest taken: none
    meta = {"facts": facts, "extension": checked.extension, "mime": checked.content_type}
    with services.db.session() as session:
        session.execute(
            update(Upload)
            .where(Upload.id == row.id)
            .values(status="ready", meta=meta, completed_at=utcnow(), multipart_id=None)
        )
        fresh = session.get(Upload, row.id)
        view = view_of(fresh) if fresh is not None else None
    if view is None:  # deleted meanwhile: the object this call joined must not outlive its row
        services.store.delete(row.key)
        raise deleted
    return view


def _finish_parts(services: Services, row: Upload) -> None:
    """Join the parts if every one arrived whole; else 409 naming the missing or short ones."""
    assert row.multipart_id is not None
    try:
        parts = services.store.list_parts(row.key, row.multipart_id)
    except ObjectNotFound:
        return  # finished by an earlier complete that died before marking the row
    have = {p.number: p for p in parts}
    wrong = [n for n in range(1, row.parts + 1) if n not in have or have[n].size != part_bounds(row, n)[1]]
    if wrong:
        shown = ", ".join(map(str, wrong[:20])) + (" ..." if len(wrong) > 20 else "")
        raise Conflict(
            "upload_incomplete",
            f"Upload {row.id} lacks {len(wrong)} of its {row.parts} parts, or has them short: {shown}. "
            "PUT them, then complete it.",
            details=[{"part": n, "message": "missing or not the size declared"} for n in wrong[:100]],
        )
    services.store.finish_upload(row.key, row.multipart_id, [have[n] for n in range(1, row.parts + 1)])


class _Stored:
    """A stored object as a content check reads it (``jobservice.media.uploads.Checkable``)."""

    def __init__(self, path: Path, size: int, digest: str = "") -> None:
        self.name = str(path)
        self.size = size
        self._digest = digest

    def sha256(self) -> str:
        return self._digest


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(MIB):
            sha.update(block)
    return sha.hexdigest()


def check_stored(services: Services, row: Upload) -> CheckedUpload:
    """The form's content check of ``row``'s object, reading from the store only what it needs."""
    settings, store = services.settings, services.store
    check: Callable[..., CheckedUpload] = FILE_CHECKS[row.kind]
    local = store.local_path(row.key)
    if local is not None:
        return check(row.kind, _Stored(local, row.size), settings)
    spool = settings.resolved_spool_dir()
    spool.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=spool, prefix="upload-check-") as tmp:
        path = Path(tmp) / row.kind
        if row.kind == "audio":
            head = b"".join(store.open_range(row.key, 0, WAV_HEAD_BYTES - 1))
            with path.open("wb") as sparse:  # the header, then a hole the size of the rest
                sparse.write(head)
                sparse.truncate(row.size)
            if pcm_wav_facts(path) is not None:
                return check(row.kind, _Stored(path, row.size), settings)
        store.get_file(row.key, path)
        return check(row.kind, _Stored(path, row.size, _digest(path)), settings)


def discard(services: Services, row: Upload) -> bool:
    """Delete ``row``'s unfinished parts, its object, then its row; whether the row was still there
    (False: a concurrent deletion took it). The store goes first: an outage (StoreUnavailable,
    raised) leaves the row, and the upload, for a later try, never an object that no row names."""
    if row.multipart_id is not None:
        services.store.abort_upload(row.key, row.multipart_id)
    services.store.delete(row.key)
    with services.db.session() as session:
        result = session.execute(delete(Upload).where(Upload.id == row.id))
    return bool(getattr(result, "rowcount", 0))


def delete_upload(services: Services, principal: Principal, raw_id: str) -> None:
    """Delete one of the tenant's uploads, pending, ready or expired: its unfinished parts (the S3
    multipart upload aborted, the local parts removed), its object and its row. Afterwards its id
    is unknown (404) everywhere, a second delete included; jobs that used it keep their own copies.
    """
    row = _owned_upload(services, principal, raw_id)
    if not discard(services, row):
        raise NotFound("upload_not_found", f"There is no upload '{raw_id}'.")
    log.info("upload %s deleted by %s", row.id, principal.actor)


def _forget(services: Services, row: Upload) -> None:
    """Delete the upload's object and row (a refused file leaves nothing behind; if the store is
    away, the row stays and retention deletes both)."""
    try:
        discard(services, row)
    except StoreUnavailable:
        log.exception("upload %s: could not delete %s after its check failed", row.id, row.key)


def checked_upload(services: Services, principal: Principal, raw_id: Any, field: str) -> CheckedUpload:
    """The ready upload ``raw_id`` as the checked file ``field`` of a job (``stored_key`` set)."""
    if not isinstance(raw_id, str):
        raise Invalid("invalid_upload_id", f"'{field}' must be an upload id (a string).", field=field)
    try:
        row = load_upload(services, principal, raw_id)
    except DomainError as exc:
        exc.field = field
        raise
    if row.status != "ready":
        raise Conflict(
            "upload_not_complete",
            f"Upload {row.id} is not complete; POST {complete_path(row.id)} first.",
            field=field,
        )
    if row.kind != field:
        raise Invalid(
            "wrong_upload_kind", f"Upload {row.id} is {row.kind}; '{field}' needs {field}.", field=field
        )
    meta = row.meta or {}
    return CheckedUpload(
        name=field,
        path=Path(row.key),
        extension=str(meta.get("extension", "")),
        content_type=str(meta.get("mime", row.content_type)),
        meta={**meta.get("facts", {}), "upload_id": str(row.id)},
        stored_key=row.key,
    )


def mark_used(services: Services, upload_ids: list[str]) -> None:
    """Note that a job used these uploads (the first use's time)."""
    ids = [uuid.UUID(i) for i in upload_ids]
    if not ids:
        return
    with services.db.session() as session:
        session.execute(
            update(Upload).where(Upload.id.in_(ids), Upload.used_at.is_(None)).values(used_at=utcnow())
        )


def sweep_uploads(
    services: Services, *, now: datetime | None = None, limit: int = 500, dry_run: bool = False
) -> list[str]:
    """Delete expired uploads (object, unfinished parts, row); returns their ids. A deletion that
    fails is logged and tried again next pass."""
    now = now or utcnow()
    with services.db.session() as session:
        rows = list(
            session.scalars(
                select(Upload).where(Upload.expires_at <= now).order_by(Upload.expires_at).limit(limit)
            )
        )
        session.expunge_all()
    done: list[str] = []
    for row in rows:
        if not dry_run:
            try:
                discard(services, row)
            except StoreUnavailable as exc:
                log.warning("uploads: deleting %s failed, tried again next pass: %s", row.key, exc)
                continue
        done.append(str(row.id))
    return done

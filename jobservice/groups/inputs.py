"""The file inputs of a manifest's rows: references to files, never the files themselves.

A cell of an input column (``image``, ``audio``: the names ``POST /jobs`` takes files under) says
where its file is:

- ``key:<object key>``: an object already in the store, e.g. an earlier job's input
  (``jobs/<id>/inputs/image.png``), a batch's or another group's; a non-admin caller may name only
  objects of its own tenant's jobs, batches and groups (another tenant's object and a missing one
  get the same answer). Resolved as ``jobservice.nightly.plan`` resolves a batch's ``key:`` inputs:
  copied into a spool file and content-checked exactly as an upload is (``FILE_CHECKS``).
- ``upload:<id>``: a file uploaded beforehand (``POST /uploads``), as ``POST /jobs`` takes one
  (``jobservice.uploads.service.checked_upload``); it is copied inside the store, never downloaded.
- an ``https://`` (or ``http://``) URL is refused: the service fetches nothing from the network (it
  has no fetch facility, and fetching what a caller names is a server-side request forgery risk).

Each distinct reference is resolved once per manifest (``Resolver``): 5,000 rows that share one
portrait download and decode it once.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import select

from jobservice.auth.principal import Principal
from jobservice.db.tables import Batch, Job, JobGroup
from jobservice.errors import DomainError, Invalid
from jobservice.media.uploads import FILE_CHECKS, CheckedUpload, SpoolFile
from jobservice.settings import Settings
from jobservice.storage import ObjectNotFound
from jobservice.uploads.service import checked_upload
from jobservice.wiring import Services

INPUT_COLUMNS = tuple(FILE_CHECKS)  # image, audio
KEY = "key:"
UPLOAD = "upload:"
ACCEPTED = "key:<object key> of a file in the store, or upload:<id> of an uploaded file"


def resolve_upload(services: Services, upload_id: str, *, name: str, principal: Principal) -> CheckedUpload:
    """The checked file that ``upload:<id>`` names, for input ``name`` of ``principal``'s job: the
    ready direct upload (``POST /uploads``) of the caller's tenant, checked as ``name`` when it was
    completed (``jobservice.uploads``: another tenant's id reads as unknown)."""
    return checked_upload(services, principal, upload_id.strip(), name)


def input_identity(upload: CheckedUpload) -> str:
    """What makes two inputs of a group one stored file, and its place under the group's
    ``inputs/``: ``sha256/<digest>`` of its content, or ``upload/<id>`` for a direct upload whose
    check did not read it whole (a WAV on S3 is checked by its header)."""
    digest = str(upload.meta.get("sha256") or "")
    if digest:
        return f"sha256/{digest}"
    return f"upload/{upload.meta['upload_id']}"


@dataclass
class Resolver:
    """Resolves a manifest's input references, each distinct one once; owns the spool copies."""

    services: Services
    principal: Principal
    _found: dict[tuple[str, str], CheckedUpload | DomainError] = field(default_factory=dict)
    spools: list[SpoolFile] = field(default_factory=list)

    def resolve(self, name: str, raw: object) -> CheckedUpload:
        """The checked file the cell ``raw`` of input column ``name`` names; a 4xx ``DomainError``
        saying what is wrong with it (a 5xx, an outage, propagates and stops the whole check)."""
        if not isinstance(raw, str):
            raise Invalid("invalid_input_ref", f"An input is a text reference: {ACCEPTED}.")
        ref = raw.strip()
        cached = self._found.get((name, ref))
        if cached is None:
            try:
                cached = self._resolve(name, ref)
            except DomainError as exc:
                if exc.status >= 500:
                    raise
                cached = exc
            self._found[(name, ref)] = cached
        if isinstance(cached, DomainError):
            raise cached
        return cached

    def close(self) -> None:
        """Delete the spool copies."""
        for spool in self.spools:
            spool.close()
        self.spools.clear()

    def _resolve(self, name: str, ref: str) -> CheckedUpload:
        lowered = ref.lower()
        if lowered.startswith(("https://", "http://")):
            raise Invalid(
                "url_not_fetched",
                f"'{ref[:80]}' is a URL; this service does not fetch files from the network. "
                f"Give {ACCEPTED}.",
            )
        if ref.startswith(UPLOAD):
            return resolve_upload(self.services, ref[len(UPLOAD) :], name=name, principal=self.principal)
        if not ref.startswith(KEY) or not ref[len(KEY) :].strip():
            raise Invalid("invalid_input_ref", f"'{ref[:80]}' is not an input reference; give {ACCEPTED}.")
        return self._stored(name, ref[len(KEY) :].strip())

    def _stored(self, name: str, key: str) -> CheckedUpload:
        missing = Invalid("input_not_found", f"There is no object '{key[:200]}' in the store.")
        if not self.principal.is_admin and key_owner(self.services, key) != self.principal.tenant:
            raise missing  # another tenant's object and a missing one read the same
        spool_dir = self.services.settings.resolved_spool_dir()
        spool_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=spool_dir, prefix="upload-group-") as tmp:
            try:
                local = self.services.store.get_file(key, Path(tmp) / "input")
            except ValueError as exc:  # an unsafe key
                raise Invalid(
                    "invalid_input_ref", f"'{key[:80]}' is not an object key ({exc}); give {ACCEPTED}."
                ) from None
            except ObjectNotFound:
                raise missing from None
            return check_local_file(name, local, self.services.settings, keep=self.spools)


def check_local_file(name: str, path: Path, settings: Settings, *, keep: list[SpoolFile]) -> CheckedUpload:
    """Content-check a local file as if it had been uploaded as ``name`` ("image" or "audio").

    The file is copied into a spool file first, so what is checked is exactly what is stored even if
    the original changes meanwhile; the spool file is appended to ``keep`` and deleted by its owner.
    """
    check = FILE_CHECKS.get(name)
    if check is None:
        raise Invalid("unexpected_input", f"No model takes a file named '{name}'.")
    ceiling = max(settings.max_image_mb, settings.max_audio_mb) * 2**20
    spool = SpoolFile(settings.resolved_spool_dir(), ceiling)
    keep.append(spool)
    with path.open("rb") as source:
        shutil.copyfileobj(source, spool, length=1 << 20)
    spool.flush()
    return check(name, spool, settings)


def key_owner(services: Services, key: str) -> str | None:
    """The tenant of the job, batch or job group whose folder ``key`` is in (``jobs/<id>/``,
    ``batches/<id>/``, ``groups/<id>/``)."""
    kind, _, rest = key.partition("/")
    try:
        owner_id = uuid.UUID(rest.split("/", 1)[0])
    except ValueError:
        return None
    with services.db.session() as session:
        if kind == "jobs":
            return session.scalar(select(Job.tenant).where(Job.id == owner_id))
        if kind == "batches":
            return session.scalar(select(Batch.tenant).where(Batch.id == owner_id))
        if kind == "groups":
            return session.scalar(select(JobGroup.tenant).where(JobGroup.id == owner_id))
    return None

"""Orphans: what a dead process or a failed submission left behind, found and deleted.

- Spool files and folders (``settings.resolved_spool_dir()``): an upload or resubmission of a
  process that is gone. A name carrying a pid (``upload-<pid>-...``) is an orphan once that pid is
  dead (and the file a few minutes old); a name without one once it is older than an hour.
- Scratch folders (``settings.resolved_scratch_dir()``, ``<job id>-<attempt>``, made by the worker's
  run): once their job is finished or gone and they were untouched for a while.
- Half-written files of the local object store (its temp-then-rename names), older than an hour.
- ``jobs/<id>/`` prefixes whose job row does not exist (an attempt that lost its job, a failed
  submission's leftovers), ``batches/<id>/`` prefixes without a batch row (an interrupted
  creation), ``groups/<id>/`` prefixes without a job group row (likewise) and ``uploads/<id>/``
  prefixes without an upload row (a file PUT to a presigned URL after its upload was deleted: the
  URL cannot be revoked), once their newest object is older than an hour: a submission stores its
  inputs BEFORE its row is committed, so a young prefix without a row may be one in flight.

Only names this service makes are touched; anything else in those folders is left alone.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import select

from jobservice.db.tables import TERMINAL_STATUSES, Batch, Job, JobGroup, Upload, utcnow
from jobservice.storage import LocalStore, ObjectInfo
from jobservice.wiring import Services

log = logging.getLogger(__name__)

ORPHAN_AGE = timedelta(hours=1)  # no pid to ask: older than this is abandoned
DEAD_PID_AGE = timedelta(minutes=10)  # a dead pid's file (a pid of another host or container looks dead)
SCRATCH_AGE = timedelta(minutes=15)  # a finished job's scratch folder its worker did not remove
STORE_TMP_PREFIX = ".~jobservice-tmp-"  # jobservice.storage.local's temp-then-rename names
SPOOL_NAME = re.compile(r"^(upload|resubmit)-(?:(\d+)-)?")
SCRATCH_NAME = re.compile(r"^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})(?:-(\d+))?$")
ROW_CHECK_CHUNK = 200
T = TypeVar("T")
Owner = type[Job] | type[Batch] | type[JobGroup] | type[Upload]
# The store's top-level prefixes of objects owned by a row: <top><row id>/...
STORE_TOPS: tuple[tuple[str, Owner], ...] = (
    ("jobs/", Job),
    ("batches/", Batch),
    ("groups/", JobGroup),
    ("uploads/", Upload),
)


@dataclass
class OrphanResult:
    """What one orphan pass deleted (or, with ``dry_run``, would delete)."""

    dry_run: bool = False
    spool: list[str] = field(default_factory=list)
    scratch: list[str] = field(default_factory=list)
    store_temp: list[str] = field(default_factory=list)
    prefixes: list[str] = field(default_factory=list)
    objects_deleted: int = 0
    failed: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The result as plain JSON values."""
        return asdict(self)


def sweep_orphans(
    services: Services,
    *,
    now: datetime | None = None,
    dry_run: bool = False,
    store: bool = True,
    limit: int = 500,
) -> OrphanResult:
    """One pass over the spool, the scratch folder and (``store``) the object store."""
    now = now or utcnow()
    result = OrphanResult(dry_run=dry_run)
    sweep_local_orphans(services, now=now, result=result)
    if store:
        sweep_store_orphans(services, now=now, result=result, limit=limit)
    found = result.spool + result.scratch + result.store_temp + result.prefixes
    if found or result.failed:
        verb = "would delete" if dry_run else "deleted"
        log.info(
            "orphans: %s %d (%d failed): %s", verb, len(found), len(result.failed), ", ".join(found[:20])
        )
    return result


def sweep_local_orphans(services: Services, *, now: datetime, result: OrphanResult) -> None:
    """This host's leftovers: spool files, scratch folders and the local store's temp files."""
    settings = services.settings
    for path in _children(settings.resolved_spool_dir()):
        if _spool_orphan(path.name, _age(path, now)):
            _remove(path, result.spool, result)
    _sweep_scratch(services, settings.resolved_scratch_dir(), now, result)
    if isinstance(services.store, LocalStore):
        for path in _store_temp_files(services.store.root):
            if _age(path, now) > ORPHAN_AGE:
                _remove(path, result.store_temp, result)


def _spool_orphan(name: str, age: timedelta) -> bool:
    """Whether a spool entry called ``name`` this old belongs to no live process."""
    match = SPOOL_NAME.match(name)
    if match is None:
        return False  # not ours
    if match.group(2) is None:
        return age > ORPHAN_AGE
    return age > DEAD_PID_AGE and not pid_alive(int(match.group(2)))


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (one we may not signal counts as alive)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sweep_scratch(services: Services, folder: Path, now: datetime, result: OrphanResult) -> None:
    """Scratch folders untouched for SCRATCH_AGE whose job is finished or has no row."""
    candidates: dict[uuid.UUID, list[Path]] = {}
    for path in _children(folder):
        match = SCRATCH_NAME.match(path.name)
        if match is None or not path.is_dir() or _age(path, now) <= SCRATCH_AGE:
            continue
        candidates.setdefault(uuid.UUID(match.group(1)), []).append(path)
    if not candidates:
        return
    with services.db.session() as session:
        live = set(
            session.scalars(
                select(Job.id).where(Job.id.in_(list(candidates)), Job.status.not_in(list(TERMINAL_STATUSES)))
            )
        )
    for job_id, paths in candidates.items():
        if job_id not in live:
            for path in paths:
                _remove(path, result.scratch, result)


def sweep_store_orphans(services: Services, *, now: datetime, result: OrphanResult, limit: int = 500) -> None:
    """``<top><id>/`` prefixes (``STORE_TOPS``: jobs, batches, groups, uploads) without their row,
    whose newest object is older than ORPHAN_AGE (at most ``limit`` prefixes per pass)."""
    for top, table in STORE_TOPS:
        try:
            prefixes = _old_prefixes(services, top, now)
            orphans = list(without_rows(services, table, prefixes))
        except Exception as exc:  # noqa: BLE001 - the store or database is away: next pass
            log.warning("orphans: listing %s failed: %s", top, exc)
            result.failed.append(top)
            continue
        for prefix, count in orphans:
            if len(result.prefixes) >= limit:
                return
            if result.dry_run:
                result.prefixes.append(prefix)
                result.objects_deleted += count
                continue
            try:
                result.objects_deleted += services.store.delete_prefix(prefix)
            except Exception as exc:  # noqa: BLE001 - retried next pass
                log.warning("orphans: deleting %s failed, retried next pass: %s", prefix, exc)
                result.failed.append(prefix)
                continue
            result.prefixes.append(prefix)


@dataclass(frozen=True)
class Prefix:
    """One ``<top><id>/`` prefix of the store: its owner's id, its objects, and its newest write
    (None when the store did not say for one of them)."""

    owner: uuid.UUID
    prefix: str
    objects: int
    bytes: int
    newest: datetime | None
    keys: frozenset[str]


def store_prefixes(services: Services, top: str) -> dict[uuid.UUID, Prefix]:
    """Every ``<top><uuid>/`` prefix of the store (one listing), by owner id."""
    found: dict[uuid.UUID, list[ObjectInfo]] = {}
    for info in services.store.list(top):
        owner = _owner(top, info)
        if owner is not None:
            found.setdefault(owner, []).append(info)
    prefixes = {}
    for owner, infos in found.items():
        times = [i.modified for i in infos]
        newest = None if any(t is None for t in times) else max(t for t in times if t is not None)
        prefixes[owner] = Prefix(
            owner,
            f"{top}{owner}/",
            len(infos),
            sum(i.size for i in infos),
            newest,
            frozenset(i.key for i in infos),
        )
    return prefixes


def _old_prefixes(services: Services, top: str, now: datetime) -> dict[uuid.UUID, tuple[str, int]]:
    """Each ``<top><uuid>/`` whose every object is older than ORPHAN_AGE: id -> (prefix, objects).

    An object whose age the store does not report counts as young (never deleted)."""
    cutoff = now - ORPHAN_AGE
    return {
        owner: (found.prefix, found.objects)
        for owner, found in store_prefixes(services, top).items()
        if found.newest is not None and found.newest < cutoff
    }


def _owner(top: str, info: ObjectInfo) -> uuid.UUID | None:
    """The id in ``<top><id>/...``, or None for a key that is not laid out that way."""
    head, sep, _ = info.key[len(top) :].partition("/")
    if not sep:
        return None
    try:
        return uuid.UUID(head)
    except ValueError:
        return None


def without_rows(services: Services, table: Owner, found: dict[uuid.UUID, T]) -> Iterator[T]:
    """The entries of ``found`` whose id has no row in ``table``."""
    ids = sorted(found, key=str)
    for start in range(0, len(ids), ROW_CHECK_CHUNK):
        chunk = ids[start : start + ROW_CHECK_CHUNK]
        with services.db.session() as session:
            present = set(session.scalars(select(table.id).where(table.id.in_(chunk))))
        for owner in chunk:
            if owner not in present:
                yield found[owner]


def _children(folder: Path) -> list[Path]:
    """Entries of ``folder`` (none when it does not exist)."""
    try:
        return sorted(folder.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []


def _store_temp_files(root: Path) -> Iterator[Path]:
    """The local store's half-written temp files (left by a process killed mid-write)."""
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            if name.startswith(STORE_TMP_PREFIX):
                yield Path(dirpath, name)


def _age(path: Path, now: datetime) -> timedelta:
    """Time since ``path`` (or, for a folder, anything directly in it) was last modified."""
    try:
        latest = path.stat().st_mtime
        if path.is_dir():
            for child in path.iterdir():
                latest = max(latest, child.stat().st_mtime)
    except FileNotFoundError:
        return timedelta(0)  # going away already: leave it to whoever removes it
    return timedelta(seconds=now.timestamp() - latest)


def _remove(path: Path, names: list[str], result: OrphanResult) -> None:
    """Delete a file or folder (not on a dry run) and note it; a failure is logged and noted."""
    if not result.dry_run:
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("orphans: deleting %s failed: %s", path, exc)
            result.failed.append(str(path))
            return
    names.append(str(path))

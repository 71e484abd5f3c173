"""The disk-space floor: refuse new submissions (507) when the spool or the local store runs short.

Checked before anything is stored, so a refused submission leaves nothing behind; running jobs
are not affected. An S3 store has no free space to measure; only the spool is watched then.
``os.statvfs`` answers are kept in ``Services.caches`` for ``caches.FREE_SPACE_SECONDS`` per folder (a
submission burst needs one).
"""

from __future__ import annotations

import logging
import os
from functools import partial
from pathlib import Path
from typing import Protocol

from jobservice.caches import Caches
from jobservice.errors import InsufficientStorage
from jobservice.settings import Settings
from jobservice.storage import ObjectStore

log = logging.getLogger(__name__)


class FloorHost(Protocol):
    """What the floor reads of ``Services``: the settings, the store (None: the settings' own) and the
    caches that keep a measurement briefly."""

    @property
    def settings(self) -> Settings:
        """The floor and the folders."""
        ...

    @property
    def store(self) -> ObjectStore | None:
        """The object store, whose root is watched when it is local."""
        ...

    @property
    def caches(self) -> Caches:
        """Where a folder's free space is kept for ``caches.FREE_SPACE_SECONDS``."""
        ...


MB = 2**20


def free_mb(folder: Path) -> float:
    """Megabytes an unprivileged process may still write in ``folder``'s file system."""
    stats = os.statvfs(_existing(folder))
    return stats.f_bavail * stats.f_frsize / MB


def watched_folders(settings: Settings, store: ObjectStore | None = None) -> dict[str, Path]:
    """The folders whose free space is watched: the spool, and the store's root when it is local."""
    folders = {"spool": settings.resolved_spool_dir()}
    root = getattr(store, "root", None) if store is not None else None
    if store is not None and store.backend == "local" and isinstance(root, Path):
        folders["object store"] = root
    elif store is None and settings.storage_backend == "local":
        folders["object store"] = settings.resolved_storage_root()
    return folders


def storage_problems(services: FloorHost) -> list[str]:
    """A sentence per watched folder under the floor (``[]`` when all is well), for ``/readyz``; each
    folder measured at most every ``caches.FREE_SPACE_SECONDS``."""
    floor = services.settings.min_free_mb
    if floor <= 0:
        return []
    problems = []
    for name, folder in watched_folders(services.settings, services.store).items():
        try:
            free = services.caches.free_space.get(folder, partial(_measure, folder))
        except OSError as exc:
            log.warning("cannot measure the free space of %s (%s): %s", name, folder, exc)
            continue
        if free < floor:
            problems.append(
                f"The {name} ({folder}) has {free:.0f} MB free, under the floor of {floor} MB "
                "(JOBSERVICE_MIN_FREE_MB)."
            )
    return problems


def check_free_space(services: FloorHost) -> None:
    """Raise InsufficientStorage (507 ``insufficient_storage``) when a watched folder is under the floor."""
    problems = storage_problems(services)
    if problems:
        raise InsufficientStorage(
            "insufficient_storage",
            " ".join(problems) + " New submissions are refused until space is freed; running jobs go on.",
        )


def _measure(folder: Path, _old: float | None) -> float:
    return free_mb(folder)


def _existing(folder: Path) -> Path:
    """``folder`` or its nearest existing parent (the spool may not exist yet)."""
    folder = Path(folder).resolve()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder

"""The disk-space floor: refuse new submissions (507) when the spool or the local store runs short.

Checked before anything is stored, so a refused submission leaves nothing behind; running jobs
are not affected. An S3 store has no free space to measure; only the spool is watched then.
``os.statvfs`` answers are cached for ``CACHE_SECONDS`` per folder (a submission burst needs one).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

from jobservice.errors import InsufficientStorage
from jobservice.settings import Settings
from jobservice.storage import ObjectStore

log = logging.getLogger(__name__)

CACHE_SECONDS = 1.0
MB = 2**20

_cache: dict[Path, tuple[float, float]] = {}
_lock = threading.Lock()


def free_mb(folder: Path) -> float:
    """Megabytes an unprivileged process may still write in ``folder``'s file system (cached)."""
    folder = _existing(folder)
    now = time.monotonic()
    with _lock:
        hit = _cache.get(folder)
    if hit is not None and hit[0] > now:
        return hit[1]
    stats = os.statvfs(folder)
    free = stats.f_bavail * stats.f_frsize / MB
    with _lock:
        _cache[folder] = (now + CACHE_SECONDS, free)
    return free


def watched_folders(settings: Settings, store: ObjectStore | None = None) -> dict[str, Path]:
    """The folders whose free space is watched: the spool, and the store's root when it is local."""
    folders = {"spool": settings.resolved_spool_dir()}
    root = getattr(store, "root", None) if store is not None else None
    if store is not None and store.backend == "local" and isinstance(root, Path):
        folders["object store"] = root
    elif store is None and settings.storage_backend == "local":
        folders["object store"] = settings.resolved_storage_root()
    return folders


def storage_problems(settings: Settings, store: ObjectStore | None = None) -> list[str]:
    """A sentence per watched folder under the floor (``[]`` when all is well), for ``/readyz``."""
    floor = settings.min_free_mb
    if floor <= 0:
        return []
    problems = []
    for name, folder in watched_folders(settings, store).items():
        try:
            free = free_mb(folder)
        except OSError as exc:
            log.warning("cannot measure the free space of %s (%s): %s", name, folder, exc)
            continue
        if free < floor:
            problems.append(
                f"The {name} ({folder}) has {free:.0f} MB free, under the floor of {floor} MB "
                "(JOBSERVICE_MIN_FREE_MB)."
            )
    return problems


def check_free_space(settings: Settings, store: ObjectStore | None = None) -> None:
    """Raise InsufficientStorage (507 ``insufficient_storage``) when a watched folder is under the floor."""
    problems = storage_problems(settings, store)
    if problems:
        raise InsufficientStorage(
            "insufficient_storage",
            " ".join(problems) + " New submissions are refused until space is freed; running jobs go on.",
        )


def forget_cached() -> None:
    """Drop cached measurements (tests)."""
    with _lock:
        _cache.clear()


def _existing(folder: Path) -> Path:
    """``folder`` or its nearest existing parent (the spool may not exist yet)."""
    folder = Path(folder).resolve()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder

"""Rotation of the log files under ``var/`` (``jobservice up`` sends its children's output there).

Copy-truncate: the writer keeps its descriptor (the children of ``jobservice up`` open their log
with O_APPEND and never reopen it), so the file is copied to ``<name>.1`` (older copies shifted up
to ``<name>.<keep>``, the oldest dropped) and then truncated in place; an O_APPEND writer simply
continues at the new end. Lines written between the copy and the truncation are lost, which is the
known price of copy-truncate (a few lines at most, once per rotation).
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 50 * 1024 * 1024
DEFAULT_KEEP = 3


def log_files(folder: Path) -> list[Path]:
    """The ``*.log`` files in ``folder`` and its direct subfolders (``var/logs``, ``var/redis``),
    not deeper, so the object store under ``var/objects`` is never walked."""
    if not folder.is_dir():
        return []
    found = {*folder.glob("*.log"), *folder.glob("*/*.log")}
    return sorted(p for p in found if p.is_file() and not p.is_symlink())


def rotate_logs(folder: Path, *, max_bytes: int = DEFAULT_MAX_BYTES, keep: int = DEFAULT_KEEP) -> list[Path]:
    """Rotate every log under ``folder`` larger than ``max_bytes``; returns the rotated files."""
    if keep < 1:
        raise ValueError("keep must be at least 1")
    rotated = []
    for path in log_files(Path(folder)):
        try:
            if path.stat().st_size <= max_bytes:
                continue
            rotate_one(path, keep=keep)
        except OSError as exc:  # one unreadable log must not stop the others
            log.warning("rotating %s failed: %s", path, exc)
            continue
        rotated.append(path)
    return rotated


def rotate_one(path: Path, *, keep: int = DEFAULT_KEEP) -> None:
    """``path`` -> ``path.1`` (``.1`` -> ``.2`` ... up to ``.keep``), then truncate ``path`` in place."""
    for index in range(keep - 1, 0, -1):
        older = path.with_name(f"{path.name}.{index}")
        if older.exists():
            older.replace(path.with_name(f"{path.name}.{index + 1}"))
    shutil.copyfile(path, path.with_name(f"{path.name}.1"))
    with path.open("r+b") as handle:
        handle.truncate(0)

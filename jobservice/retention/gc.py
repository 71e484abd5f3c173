"""Everything at once: a retention pass, an orphan pass and log rotation (``jobservice gc``, the beat).

``collect`` is one full sweep. ``PeriodicCollector`` is what the beat's periodic task calls every
``gc_interval_seconds``: retention each time, the orphan pass (whose store listing walks every key
under ``jobs/`` and ``batches/``) on the first call and then at most every ``ORPHAN_EVERY``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from jobservice.db.tables import utcnow
from jobservice.retention.logs import rotate_logs
from jobservice.retention.orphans import OrphanResult, sweep_orphans
from jobservice.retention.sweep import SweepResult, sweep_expired
from jobservice.wiring import Services

ORPHAN_EVERY_SECONDS = 3600.0


@dataclass
class GcReport:
    """What one collection did (or would do)."""

    dry_run: bool
    retention: SweepResult
    orphans: OrphanResult | None = None
    rotated_logs: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The report as plain JSON values."""
        return {
            "dry_run": self.dry_run,
            "retention": self.retention.as_dict(),
            "orphans": self.orphans.as_dict() if self.orphans is not None else None,
            "rotated_logs": self.rotated_logs,
        }


def collect(
    services: Services,
    *,
    now: datetime | None = None,
    dry_run: bool = False,
    orphans: bool = True,
    logs_folder: Path | None = None,
    limit: int = 500,
) -> GcReport:
    """Expired jobs' files, then orphans, then logs over their size under ``logs_folder``."""
    now = now or utcnow()
    report = GcReport(
        dry_run=dry_run, retention=sweep_expired(services, now=now, limit=limit, dry_run=dry_run)
    )
    if orphans:
        report.orphans = sweep_orphans(services, now=now, dry_run=dry_run, limit=limit)
    if logs_folder is not None and not dry_run:
        report.rotated_logs = [str(p) for p in rotate_logs(logs_folder)]
    return report


class PeriodicCollector:
    """The beat's gc task: retention every call, orphans on the first call and then hourly."""

    def __init__(self, services: Services, *, orphan_every_seconds: float = ORPHAN_EVERY_SECONDS) -> None:
        self.services = services
        self.orphan_every_seconds = orphan_every_seconds
        self._last_orphans: float | None = None
        self._lock = threading.Lock()

    def __call__(self) -> dict[str, Any]:
        """One periodic pass; returns its report as JSON values."""
        with self._lock:
            clock = time.monotonic()
            due = self._last_orphans is None or clock - self._last_orphans >= self.orphan_every_seconds
            if due:
                self._last_orphans = clock
        report = collect(self.services, orphans=due, logs_folder=self.services.settings.var_dir)
        return report.as_dict()

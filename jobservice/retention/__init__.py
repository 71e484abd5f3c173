"""Retention and garbage collection: expired jobs' files, orphans, and log rotation.

- ``sweep``: finished jobs past ``expires_at`` lose their files; their rows stay, marked.
- ``deletion``: a job deleted on request (``DELETE /jobs/<id>``, ``/v1/videos``) loses its files and
  is gone from lists and reads; its row stays, marked ``deleted_at``.
- ``orphans``: what dead processes and failed submissions left in the spool, scratch and store.
- ``logs``: copy-truncate rotation of the ``*.log`` files under ``var/``.
- ``gc``: all of it at once (``jobservice gc``) and the beat's periodic task.

A domain package: it never imports the HTTP or CLI surfaces, nor ``jobservice.nightly``.
"""

from jobservice.retention.gc import GcReport, PeriodicCollector, collect
from jobservice.retention.logs import rotate_logs
from jobservice.retention.orphans import OrphanResult, sweep_orphans
from jobservice.retention.sweep import SweepResult, mark_expired, sweep_expired

__all__ = [
    "GcReport",
    "OrphanResult",
    "PeriodicCollector",
    "SweepResult",
    "collect",
    "mark_expired",
    "rotate_logs",
    "sweep_expired",
    "sweep_orphans",
]

"""What a job group made: a CSV of results (one line per row) and a zip of its videos, both streamed.

Both are generators that read the group's jobs a page at a time in row order (a few hundred rows
per short read transaction), so a 5,000-row group is never held whole, in memory or in one
transaction. The zip is written by ``zipfile`` into a sink that hands each piece on as soon as it
is written (``_Sink``: a write-only stream without seek, so ``zipfile`` writes each entry's sizes
after its data, in a data descriptor); each video is copied from the object store in chunks
(``open_range``), stored uncompressed (an MP4 does not compress) and in ZIP64 form, and
``results.csv`` comes last, as of the moment the zip was made.
"""

from __future__ import annotations

import csv
import io
import logging
import uuid
import zipfile
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

from sqlalchemy import select

from jobservice.db.engine import Database
from jobservice.db.tables import Job, JobStatus, utcnow
from jobservice.jobs.pages import JOB_KEYS, page_of
from jobservice.storage import ObjectNotFound, ObjectStore

log = logging.getLogger(__name__)

PAGE = 500
RESULT_COLUMNS = (
    "row",
    "job_id",
    "model",
    "status",
    "verdict",
    "video_url",
    "card_seconds",
    "error_code",
    "error_message",
)
RESULTS_NAME = "results.csv"


def group_jobs(db: Database, group_id: uuid.UUID, *, page: int = PAGE) -> Iterator[Job]:
    """The group's jobs in row order, read ``page`` at a time (each page its own short read)."""
    after = None
    query = select(Job).where(Job.group_id == group_id)
    while True:
        with db.session() as session:
            rows, more = page_of(session, query, JOB_KEYS, after=after, limit=page, newest_first=False)
            session.expunge_all()
        yield from rows
        if more is None:
            return
        after = JOB_KEYS.of(rows[-1])


def result_row(job: Job, base_url: str) -> dict[str, Any]:
    """One line of the results: the row, its job and how it ended (``video_url``: while it has one)."""
    video = ""
    if job.output_key and job.expired_at is None and job.status == JobStatus.SUCCEEDED:
        video = f"{base_url.rstrip('/')}/jobs/{job.id}/video"
    usage = job.usage or {}
    return {
        "row": job.group_row,
        "job_id": str(job.id),
        "model": job.model,
        "status": JobStatus(job.status).value,
        "verdict": job.verdict or "",
        "video_url": video,
        "card_seconds": usage.get("card_seconds", ""),
        "error_code": job.error_code or "",
        "error_message": (job.error_message or "").replace("\n", " ")[:500],
    }


def results_csv(db: Database, group_id: uuid.UUID, base_url: str) -> Iterator[str]:
    """The results CSV, a piece at a time: the header, then a page of rows per piece."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=RESULT_COLUMNS, lineterminator="\r\n")
    writer.writeheader()
    for index, job in enumerate(group_jobs(db, group_id), start=1):
        writer.writerow(result_row(job, base_url))
        if index % PAGE == 0:
            yield _drain(buffer)
    yield _drain(buffer)


def _drain(buffer: io.StringIO) -> str:
    text = buffer.getvalue()
    buffer.seek(0)
    buffer.truncate()
    return text


def video_name(job: Job) -> str:
    """A video's name in the zip: its row first, so the files sort as the manifest does."""
    return f"row-{int(job.group_row or 0):05d}-{job.id}.mp4"


class _Sink(io.RawIOBase):
    """A write-only stream that keeps what was written until ``take``: ``zipfile`` writes into it
    and the generator hands the pieces on. It can tell its position but not seek."""

    def __init__(self) -> None:
        super().__init__()
        self._pieces: list[bytes] = []
        self._written = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        piece = bytes(data)
        self._pieces.append(piece)
        self._written += len(piece)
        return len(piece)

    def tell(self) -> int:
        return self._written

    def take(self) -> bytes:
        """What was written since the last ``take``."""
        data = b"".join(self._pieces)
        self._pieces.clear()
        return data


def outputs_zip(
    db: Database,
    store: ObjectStore,
    group_id: uuid.UUID,
    base_url: str,
    *,
    chunks: Callable[[str], Iterator[bytes]] | None = None,
) -> Iterator[bytes]:
    """The zip of the group's videos (succeeded jobs whose files are kept) and ``results.csv``,
    streamed; a video missing from the store is left out (and logged)."""
    return (piece for piece in _zip_pieces(db, store, group_id, base_url, chunks) if piece)


def _zip_pieces(
    db: Database,
    store: ObjectStore,
    group_id: uuid.UUID,
    base_url: str,
    chunks: Callable[[str], Iterator[bytes]] | None,
) -> Iterator[bytes]:
    read = chunks or store.open_range
    sink = _Sink()
    with zipfile.ZipFile(sink, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for job in group_jobs(db, group_id):
            if job.status != JobStatus.SUCCEEDED or not job.output_key or job.expired_at is not None:
                continue
            try:
                pieces = iter(read(job.output_key))
                first = next(pieces, b"")
            except ObjectNotFound:
                log.warning("group %s: job %s's video is missing from the store", group_id, job.id)
                continue
            info = _entry(video_name(job), job.finished_at or job.created_at)
            with archive.open(info, mode="w", force_zip64=True) as entry:
                entry.write(first)
                yield sink.take()
                for piece in pieces:
                    entry.write(piece)
                    yield sink.take()
            yield sink.take()
        with archive.open(_entry(RESULTS_NAME, utcnow()), mode="w", force_zip64=True) as entry:
            for text in results_csv(db, group_id, base_url):
                entry.write(text.encode())
                yield sink.take()
    yield sink.take()  # the central directory


def _entry(name: str, moment: datetime) -> zipfile.ZipInfo:
    """A zip entry: its time (the format starts in 1980) and plain file permissions (rw-r--r--)."""
    when = (max(1980, moment.year), moment.month, moment.day, moment.hour, moment.minute, moment.second)
    info = zipfile.ZipInfo(name, date_time=when)
    info.external_attr = 0o644 << 16
    return info

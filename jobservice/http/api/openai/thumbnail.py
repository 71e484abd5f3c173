"""A video's thumbnail: one JPEG frame made by ffmpeg from the stored output, on first request.

Made lazily in the API process (an ffmpeg subprocess; nothing heavier is imported) and kept in the
object store beside the output (``.../thumbnail.jpg``), so later requests read it back, and
retention deletes it with the job's other files.
"""

from __future__ import annotations

import logging
import os
import subprocess
import tempfile
from pathlib import Path

from jobservice.db.tables import Job
from jobservice.errors import Unavailable
from jobservice.media.probe import MediaToolMissing, ffmpeg_path
from jobservice.storage import ObjectNotFound
from jobservice.wiring import Services

log = logging.getLogger(__name__)

THUMBNAIL_NAME = "thumbnail.jpg"
FFMPEG_TIMEOUT_S = 30.0
MAX_SIDE = 720  # a preview, not a frame grab at full size


def thumbnail_key(output_key: str) -> str:
    """Where a video's thumbnail is kept: beside its output."""
    return output_key.rsplit("/", 1)[0] + "/" + THUMBNAIL_NAME


def thumbnail_of(services: Services, job: Job) -> bytes:
    """The JPEG thumbnail of ``job``'s output (which must exist), made and stored on first use.

    Raises ObjectNotFound when the output is missing from the store, Unavailable when ffmpeg
    is missing or cannot read the video.
    """
    assert job.output_key is not None
    store, key = services.store, thumbnail_key(job.output_key)
    try:
        return store.get_bytes(key)
    except ObjectNotFound:
        pass
    data = _make(services, job.output_key)
    store.put_bytes(key, data, content_type="image/jpeg")
    return data


def _make(services: Services, output_key: str) -> bytes:
    spool = services.settings.resolved_spool_dir()
    spool.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=spool, prefix=f"thumb-{os.getpid()}-") as tmp:
        source = services.store.local_path(output_key)
        if source is None or not source.exists():
            source = services.store.get_file(output_key, Path(tmp) / "video.mp4")  # ObjectNotFound
        target = Path(tmp) / THUMBNAIL_NAME
        try:
            argv = [ffmpeg_path("ffmpeg"), "-hide_banner", "-nostdin", "-v", "error", "-i", str(source)]
        except MediaToolMissing as exc:
            raise Unavailable("media_tools_missing", str(exc)) from None
        scale = f"scale='min({MAX_SIDE},iw)':-2"
        argv += ["-frames:v", "1", "-vf", scale, "-q:v", "3", "-f", "image2", "-y", str(target)]
        try:
            done = subprocess.run(argv, capture_output=True, timeout=FFMPEG_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise Unavailable("thumbnail_failed", "Making the thumbnail took too long; try again.") from None
        if done.returncode != 0 or not target.exists() or target.stat().st_size == 0:
            log.error("thumbnail of %s failed: %s", output_key, done.stderr.decode(errors="replace")[-500:])
            raise Unavailable("thumbnail_failed", "The thumbnail could not be made from the video.")
        return target.read_bytes()

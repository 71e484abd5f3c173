"""Streaming uploads and content sniffing.

Multipart file parts are streamed straight into named spool files (hashing as they go) instead
of being held in memory; the request-wide size limit is enforced by Werkzeug while it reads.
Files are then checked by content, never by name: images must open and fully decode under
Pillow within pixel limits (decompression bombs refused), audio must decode under ffprobe with a
duration within limits, judged by the samples that really decode (the decode capped just past the
limit), never by the header's claim; a plain PCM WAV is judged by the sample bytes it really holds,
without starting ffmpeg (jobservice.media.wav).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from flask import Request
from PIL import Image, UnidentifiedImageError

from jobservice.errors import DomainError, Invalid, Malformed, TooLarge, Unavailable, Unsupported
from jobservice.media.probe import MediaToolMissing, ProbeError, decoded_seconds, probe_media
from jobservice.media.types import TYPE_BY_EXTENSION, of_kind
from jobservice.media.wav import pcm_wav_facts
from jobservice.settings import Settings

# Pillow's format (images), ffprobe's format_name (audio) -> (a stored copy's extension, its type),
# read from the one table of accepted types.
IMAGE_FORMATS = {t.check_name: (t.extensions[0], t.mime) for t in of_kind("image")}
AUDIO_FORMATS = {t.check_name: (t.extensions[0], t.mime) for t in of_kind("audio")}


class Checkable(Protocol):
    """What a content check reads of a file: its path, its size and a digest of its bytes (empty
    where none was taken: a direct upload checked in the store, ``jobservice.uploads``)."""

    @property
    def name(self) -> str:
        """Path of the file on disk."""
        ...

    @property
    def size(self) -> int:
        """Its size in bytes."""
        ...

    def sha256(self) -> str:
        """Hex digest of its bytes, or empty."""
        ...


class SpoolFile:
    """A named temporary file that hashes and counts what is written to it."""

    def __init__(self, directory: Path, max_bytes: int) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._file = tempfile.NamedTemporaryFile(dir=directory, prefix=f"upload-{os.getpid()}-", delete=True)  # noqa: SIM115
        self._hash = hashlib.sha256()
        self.size = 0
        self.max_bytes = max_bytes

    @property
    def name(self) -> str:
        """Path of the spool file on disk."""
        return self._file.name

    def write(self, data: bytes) -> int:
        """Append ``data``; refuses to grow past the per-file ceiling."""
        self.size += len(data)
        if self.size > self.max_bytes:
            raise TooLarge("file_too_large", f"An uploaded file is larger than {self.max_bytes // 2**20} MB.")
        self._hash.update(data)
        return self._file.write(data)

    def sha256(self) -> str:
        """Hex digest of everything written."""
        return self._hash.hexdigest()

    def seek(self, offset: int, whence: int = 0) -> int:
        """Reposition (Werkzeug rewinds files after parsing)."""
        return self._file.seek(offset, whence)

    def read(self, size: int = -1) -> bytes:
        """Read back from the spool file."""
        return self._file.read(size)

    def tell(self) -> int:
        """Current position."""
        return self._file.tell()

    def flush(self) -> None:
        """Flush to disk so other processes (ffprobe) see all bytes."""
        self._file.flush()

    def close(self) -> None:
        """Close and delete the spool file."""
        self._file.close()

    @property
    def closed(self) -> bool:
        """Whether the spool file is closed."""
        return self._file.closed


class UploadRequest(Request):
    """A Flask request whose multipart files stream into spool files and are always cleaned up."""

    spool_dir: Path = Path(tempfile.gettempdir())
    max_file_bytes: int = 100 * 2**20

    def _get_file_stream(
        self,
        total_content_length: int | None,
        content_type: str | None,
        filename: str | None = None,
        content_length: int | None = None,
    ) -> IO[bytes]:
        spool = SpoolFile(self.spool_dir, self.max_file_bytes)
        self.__dict__.setdefault("_spools", []).append(spool)
        return spool  # type: ignore[return-value]

    def close(self) -> None:
        """Close the request and delete every spool file, even after a failed parse."""
        try:
            super().close()
        finally:
            for spool in self.__dict__.get("_spools", []):
                spool.close()


@dataclass
class CheckedUpload:
    """An uploaded file that passed its content checks."""

    name: str  # the form field: "image" or "audio"
    path: Path
    extension: str
    content_type: str
    meta: dict[str, Any]
    # Already in the object store (a direct upload, jobservice.uploads): copied there to the job's
    # inputs instead of ``path`` being stored.
    stored_key: str | None = None


def spool_of(storage: Any) -> SpoolFile:
    """The SpoolFile behind a Werkzeug FileStorage."""
    stream = storage.stream
    if not isinstance(stream, SpoolFile):
        raise Malformed("invalid_upload", f"The '{storage.name}' part could not be read as a file upload.")
    stream.flush()
    return stream


def _sized(spool: Checkable, kind: str, limit_mb: int) -> Path:
    """The spooled ``kind`` file's path once its size is within ``limit_mb`` and not zero."""
    if spool.size > limit_mb * 2**20:
        raise TooLarge("file_too_large", f"The {kind} is larger than {limit_mb} MB.")
    if spool.size == 0:
        raise Invalid(f"invalid_{kind}", f"The {kind} file is empty.")
    return Path(spool.name)


def check_image(field: str, spool: Checkable, settings: Settings) -> CheckedUpload:
    """Open and fully decode an uploaded image; refuse unknown formats, bombs and tiny images."""
    path = _sized(spool, "image", settings.max_image_mb)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            # Only the formats we take are even parsed: Pillow's other plugins (PSD, TIFF, EPS...)
            # are code no upload needs to reach.
            with Image.open(path, formats=list(IMAGE_FORMATS)) as image:
                fmt = image.format or ""
                width, height = image.size
                if fmt not in IMAGE_FORMATS:
                    raise Unsupported(
                        "unsupported_image_type",
                        f"The image is {fmt or 'not a known image format'}; send PNG, JPEG or WebP.",
                    )
                if width * height > settings.max_image_pixels:
                    raise Invalid(
                        "image_too_large",
                        f"The image is {width}x{height} pixels; "
                        f"at most {settings.max_image_pixels:,} pixels are accepted.",
                    )
                if min(width, height) < settings.min_image_side:
                    raise Invalid(
                        "image_too_small",
                        f"The image is {width}x{height}; "
                        f"each side must be at least {settings.min_image_side} pixels.",
                    )
                image.load()  # a full decode: truncated or corrupt files fail here
    except DomainError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise Invalid("image_too_large", "The image declares too many pixels to be decoded safely.") from None
    except UnidentifiedImageError:
        # Pillow's message names our spool file; say what matters to the sender instead.
        other = _other_image_type(path)
        if other:
            message = f"The image is {other}; send PNG, JPEG or WebP."
            raise Unsupported("unsupported_image_type", message) from None
        raise Invalid("invalid_image", "The file is not a readable image; send PNG, JPEG or WebP.") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise Invalid("invalid_image", f"The image could not be decoded: {exc}.") from None
    extension, mime = IMAGE_FORMATS[fmt]
    meta = {"format": fmt, "width": width, "height": height, "bytes": spool.size, "sha256": spool.sha256()}
    return CheckedUpload(name=field, path=path, extension=extension, content_type=mime, meta=meta)


# Signatures of image types people send by mistake, to answer 415 rather than "not an image".
_OTHER_IMAGE_TYPES = {
    b"GIF8": "GIF",
    b"BM": "BMP",
    b"II*\x00": "TIFF",
    b"MM\x00*": "TIFF",
    b"8BPS": "PSD",
    b"\x00\x00\x01\x00": "ICO",
    b"\x00\x00\x00\x0cjP": "JPEG 2000",
}


def _other_image_type(path: Path) -> str:
    with path.open("rb") as handle:
        head = handle.read(16)
    if head[4:12] in (b"ftypavif", b"ftypheic", b"ftypheix", b"ftypmif1"):
        return "HEIF/AVIF"
    return next((name for magic, name in _OTHER_IMAGE_TYPES.items() if head.startswith(magic)), "")


def check_audio(field: str, spool: Checkable, settings: Settings) -> CheckedUpload:
    """Decode an uploaded audio file under ffprobe; refuse non-audio and out-of-range durations."""
    path = _sized(spool, "audio", settings.max_audio_mb)
    wav = pcm_wav_facts(path)  # a plain PCM WAV needs no ffmpeg (jobservice/media/wav.py)
    facts: tuple[str, str | None, int | None, int | None, float] = (
        ("wav", wav.codec_name, wav.sample_rate, wav.channels, wav.duration_s)
        if wav is not None
        else _decoded_facts(path, settings)
    )
    fmt, codec, rate, channels, duration = facts
    if duration <= 0:
        raise Invalid("invalid_audio", "The audio stream holds no decodable frames.")
    if duration < settings.min_audio_seconds:
        raise Invalid(
            "audio_too_short",
            f"The audio lasts {duration:.2f} s; at least {settings.min_audio_seconds} s is needed.",
        )
    if duration > settings.max_audio_seconds:
        raise Invalid(
            "audio_too_long",
            f"The audio decodes to more than {settings.max_audio_seconds:g} s (whatever its header says); "
            f"at most {settings.max_audio_seconds:g} s is accepted.",
        )
    extension, mime = AUDIO_FORMATS[fmt]
    meta = {
        "format": fmt.split(",")[0] if extension != "m4a" else "m4a",
        "codec": codec,
        "duration_s": round(duration, 4),
        "sample_rate": rate,
        "channels": channels,
        "bytes": spool.size,
        "sha256": spool.sha256(),
    }
    return CheckedUpload(name=field, path=path, extension=extension, content_type=mime, meta=meta)


def _decoded_facts(path: Path, settings: Settings) -> tuple[str, str | None, int | None, int | None, float]:
    """(container, codec, sample rate, channels, decoded seconds) from ffprobe and a counting decode."""
    try:
        facts = probe_media(path, timeout=30.0)  # the header: container, codec, rate, channels
        audio = facts.audio
        if audio is None:
            raise Invalid("invalid_audio", "The file has no audio stream.")
        fmt = facts.format_name or ""
        if fmt not in AUDIO_FORMATS:
            raise Unsupported(
                "unsupported_audio_type",
                f"The audio container is {fmt or 'unknown'}; send WAV, MP3, FLAC, OGG or M4A.",
            )
        # The length is what decodes, not what the header claims; the decode stops just past the limit.
        duration = decoded_seconds(path, cap_s=settings.max_audio_seconds + 1.0, timeout=60.0)
    except MediaToolMissing as exc:
        raise Unavailable("media_tools_missing", str(exc)) from None
    except ProbeError as exc:
        raise Invalid("invalid_audio", f"The audio could not be decoded: {exc}") from None
    return fmt, audio.codec_name, audio.sample_rate, audio.channels, duration


FILE_CHECKS = {"image": check_image, "audio": check_audio}
"""The content check of each file input, by form field name."""


def stored_upload(name: str, path: Path, meta: dict[str, Any]) -> CheckedUpload:
    """An input that passed its checks earlier (copied back from the object store) as an upload."""
    extension = path.suffix.lstrip(".")
    return CheckedUpload(
        name=name,
        path=path,
        extension=extension,
        content_type=TYPE_BY_EXTENSION.get("." + extension, "application/octet-stream"),
        meta=dict(meta),
    )

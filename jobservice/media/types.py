"""The one table of the media types jobs accept: what the API, the web form, its script, the
direct uploads, the object store and the Python client all read.

Each type has its name (the one the service declares and stores), the other names clients and
browsers send for it (``audio/x-wav``...), its file extensions (the first is the one a stored copy
gets) and the name the content check knows it by (Pillow's format, ffprobe's ``format_name``). A
declared or guessed type only says what a file claims to be; the check (``jobservice.media.uploads``)
decides what it is.

A leaf: it imports nothing (the client, which must not import Flask or the database, reads it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["image", "audio"]


@dataclass(frozen=True)
class MediaType:
    """One accepted media type."""

    kind: Kind
    mime: str  # the name declared for it and stored with it
    extensions: tuple[str, ...]  # without the dot; the first is a stored copy's
    check_name: str  # Pillow's format (images), ffprobe's format_name (audio)
    aliases: tuple[str, ...] = ()  # other names clients and browsers send


ACCEPTED: tuple[MediaType, ...] = (
    MediaType("image", "image/png", ("png",), "PNG"),
    MediaType("image", "image/jpeg", ("jpg", "jpeg"), "JPEG"),
    MediaType("image", "image/webp", ("webp",), "WEBP"),
    MediaType("audio", "audio/wav", ("wav",), "wav", ("audio/x-wav", "audio/wave", "audio/vnd.wave")),
    MediaType("audio", "audio/mpeg", ("mp3",), "mp3", ("audio/mp3",)),
    MediaType("audio", "audio/flac", ("flac",), "flac", ("audio/x-flac",)),
    MediaType("audio", "audio/ogg", ("ogg", "oga"), "ogg"),
    # ffprobe names M4A by the whole ISO-BMFF family; browsers call .m4a audio/x-m4a, some audio/aac.
    MediaType("audio", "audio/mp4", ("m4a",), "mov,mp4,m4a,3gp,3g2,mj2", ("audio/x-m4a", "audio/aac")),
)


def of_kind(kind: Kind) -> tuple[MediaType, ...]:
    """The accepted types of one kind, in the table's order."""
    return tuple(t for t in ACCEPTED if t.kind == kind)


def names_of(kind: Kind) -> tuple[str, ...]:
    """Every name a file of ``kind`` may be declared with: each type's own, then its aliases."""
    return tuple(name for t in of_kind(kind) for name in (t.mime, *t.aliases))


def extensions_of(kind: Kind) -> tuple[str, ...]:
    """Every extension (without the dot) of ``kind``."""
    return tuple(ext for t in of_kind(kind) for ext in t.extensions)


KIND_BY_NAME: dict[str, Kind] = {name: t.kind for t in ACCEPTED for name in (t.mime, *t.aliases)}
TYPE_BY_EXTENSION: dict[str, str] = {"." + ext: t.mime for t in ACCEPTED for ext in t.extensions}
BY_CHECK_NAME: dict[str, MediaType] = {t.check_name: t for t in ACCEPTED}


def accept_attribute(kind: Kind) -> str:
    """An HTML file input's ``accept``: the extensions and the names of ``kind``."""
    return ",".join([*("." + ext for ext in extensions_of(kind)), *names_of(kind)])


def listed(kind: Kind) -> str:
    """The types of ``kind`` for a sentence: ``image/png, image/jpeg, image/webp``."""
    return ", ".join(t.mime for t in of_kind(kind))

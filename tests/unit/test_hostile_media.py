"""Hostile uploads: audio whose header lies about its length, audio far past the limit, images of
formats Pillow could parse but we do not take, and decompression bombs. The audio limit is 10 s here;
each case is a 4xx with a code and leaves nothing (``tests/unit/hostile.py``)."""

from __future__ import annotations

import io
import struct
import subprocess
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from PIL import Image

from jobservice.http.app import create_app
from jobservice.media.probe import decoded_seconds, probe_media
from jobservice.wiring import Services
from tests.unit.hostile import Case, assert_refused, hostile_services
from tests.unit.test_api import a2v_form, png_bytes, post_form

MAX_AUDIO_S = 10.0


def _ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", *args], check=True)


def _mp3(folder: Path, name: str, seconds: float, bitrate: str, rate: int = 44100) -> bytes:
    out = folder / name
    source = f"sine=frequency=440:sample_rate={rate}:duration={seconds}"
    _ffmpeg("-f", "lavfi", "-i", source, "-ac", "1", "-c:a", "libmp3lame", "-b:a", bitrate,
            "-write_xing", "0", "-id3v2_version", "0", str(out))  # fmt: skip
    return out.read_bytes()


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The hostile files, made once: see each entry."""
    folder = tmp_path_factory.mktemp("hostile-media")
    loud = _mp3(folder, "loud.mp3", 2, "320k")
    quiet = _mp3(folder, "quiet.mp3", 60, "32k")
    second = _mp3(folder, "second.mp3", 1.0, "8k", rate=8000)
    wav = folder / "long.wav"
    _ffmpeg(
        "-f", "lavfi", "-i", "sine=frequency=300:sample_rate=8000:duration=30", "-c:a", "pcm_s16le", str(wav)
    )
    raw = bytearray(wav.read_bytes())
    data = raw.index(b"data")
    raw[data + 4 : data + 8] = struct.pack("<I", 0xFFFFFFFF)  # "as long as the file", then more
    raw[4:8] = struct.pack("<I", 36)  # a RIFF size that claims an empty file
    return {
        # No Xing header: ffprobe times it by the first frames' bit rate, 8 s; it decodes to 62 s.
        "lying mp3": loud + quiet,
        # One second of 8 kbps MP3 repeated: an hour of audio in 3.6 MB, made in no time.
        "an hour of mp3": second * 3600,
        "wav with size 0xFFFFFFFF": bytes(raw),
    }


@pytest.fixture
def small_limit(
    tmp_path: Path, clean_redis: str, migrated_sqlite: Path
) -> Iterator[tuple[FlaskClient, Services]]:
    """The hostile app with a 10-second audio limit."""
    services = hostile_services(tmp_path, migrated_sqlite, max_audio_seconds=MAX_AUDIO_S)
    app = create_app(services=services)
    app.config["TESTING"] = True
    yield app.test_client(), services
    services.db.dispose()


def _image(fmt: str, size: tuple[int, int] = (256, 256)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, (120, 80, 60)).save(buf, format=fmt)
    return buf.getvalue()


def _png_declaring(width: int, height: int) -> bytes:
    """A tiny PNG whose header claims ``width`` x ``height`` (a decompression bomb's first step)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\0" * 64))
        + chunk(b"IEND", b"")
    )


def _upload(image: bytes, audio_key: str | None = None, audio: bytes | None = None) -> Any:
    def send(client: FlaskClient) -> Any:
        sound = audio if audio_key is None else MEDIA[audio_key]
        return post_form(client, a2v_form(image, sound, model="reference-talking-head"))

    return send


MEDIA: dict[str, bytes] = {}
SPEECH = (Path(__file__).resolve().parents[2] / "samples" / "speech.wav").read_bytes()

CASES: dict[str, Case] = {
    "an mp3 whose header says 8 s and decodes to 62 s": (
        _upload(png_bytes(), "lying mp3"),
        422,
        "audio_too_long",
    ),
    "an hour of mp3": (_upload(png_bytes(), "an hour of mp3"), 422, "audio_too_long"),
    "a wav whose sizes lie": (_upload(png_bytes(), "wav with size 0xFFFFFFFF"), 422, "audio_too_long"),
    "a GIF portrait": (_upload(_image("GIF"), audio=SPEECH), 415, "unsupported_image_type"),
    "a BMP portrait": (_upload(_image("BMP"), audio=SPEECH), 415, "unsupported_image_type"),
    "a TIFF portrait": (_upload(_image("TIFF"), audio=SPEECH), 415, "unsupported_image_type"),
    "a PNG declaring 100000 x 100000": (
        _upload(_png_declaring(100_000, 100_000), audio=SPEECH),
        422,
        "image_too_large",
    ),
    "a PNG declaring 9000 x 9000": (
        _upload(_png_declaring(9000, 9000), audio=SPEECH),
        422,
        "image_too_large",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_hostile_upload_is_refused_and_leaves_nothing(
    small_limit: tuple[FlaskClient, Services], media: dict[str, bytes], name: str
) -> None:
    MEDIA.update(media)
    client, services = small_limit
    assert_refused(client, services, CASES[name])


def test_the_lying_mp3_really_lies(media: dict[str, bytes], tmp_path: Path) -> None:
    path = tmp_path / "lying.mp3"
    path.write_bytes(media["lying mp3"])
    claimed = probe_media(path).duration_s
    assert claimed is not None and claimed < MAX_AUDIO_S, "the header claims less than the limit"
    assert decoded_seconds(path, cap_s=100) == pytest.approx(62, abs=0.3)


def test_the_decode_stops_just_past_the_cap(media: dict[str, bytes], tmp_path: Path) -> None:
    path = tmp_path / "hour.mp3"
    path.write_bytes(media["an hour of mp3"])
    assert 6.0 <= decoded_seconds(path, cap_s=6.0) <= 7.0
    assert 3500 < decoded_seconds(path, cap_s=5000) < 5000, "the whole hour decodes when the cap allows"


def test_an_honest_short_file_is_measured_by_its_samples(tmp_path: Path) -> None:
    path = tmp_path / "speech.wav"
    path.write_bytes(SPEECH)
    claimed = probe_media(path).duration_s
    assert claimed is not None and decoded_seconds(path, cap_s=600) == pytest.approx(claimed, abs=0.01)

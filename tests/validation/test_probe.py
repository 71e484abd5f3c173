"""ffprobe facts: strings parsed to numbers, errors turned into ProbeError sentences."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from jobservice.media.probe import (
    MediaToolMissing,
    ProbeError,
    ffmpeg_path,
    parse_probe_json,
    parse_rate,
    probe_media,
)


def test_clean_file_facts(media: Callable[[str], Path]) -> None:
    facts = probe_media(media("clean"), count_packets=True)
    assert facts.format_name is not None and "mp4" in facts.format_name
    assert facts.duration_s == pytest.approx(4.0, abs=0.03)
    assert facts.size_bytes == media("clean").stat().st_size
    video, audio = facts.video, facts.audio
    assert video is not None and audio is not None
    assert (video.codec_name, video.width, video.height, video.pix_fmt) == ("h264", 256, 256, "yuv420p")
    assert video.fps == 25.0
    assert video.nb_frames == 100 and video.nb_read_packets == 100
    assert video.nb_read_frames is None  # only with count_frames
    assert (audio.codec_name, audio.sample_rate, audio.channels) == ("aac", 48000, 1)
    assert audio.fps is None  # "0/0"


def test_count_frames_surfaces_decoded_count(media: Callable[[str], Path]) -> None:
    facts = probe_media(media("clean"), count_frames=True)
    assert facts.video is not None and facts.video.nb_read_frames == 100


def test_truncated_file_fools_plain_ffprobe(media: Callable[[str], Path]) -> None:
    facts = probe_media(media("truncated"), count_packets=True)
    assert facts.video is not None
    assert facts.video.nb_frames == 150  # the moov at the front still claims everything
    assert facts.video.nb_read_packets is not None and facts.video.nb_read_packets < 150


def test_garbage_raises_a_sentence(media: Callable[[str], Path]) -> None:
    with pytest.raises(ProbeError, match=r"^It is not a readable media file \(.+\)\.$") as info:
        probe_media(media("garbage"))
    assert str(media("garbage").parent) not in str(info.value)  # no private paths in user messages


def test_missing_file_raises(tmp_path: Path) -> None:
    with pytest.raises(ProbeError):
        probe_media(tmp_path / "absent.wav")


def test_tools_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MediaToolMissing, match="ffprobe was not found.*install FFmpeg"):
        probe_media(tmp_path / "x.mp4")
    with pytest.raises(MediaToolMissing):
        ffmpeg_path()


def test_rates() -> None:
    assert parse_rate("25/1") == 25.0
    assert parse_rate("30000/1001") == pytest.approx(29.97, abs=0.001)
    assert parse_rate("0/0") is None
    assert parse_rate(None) is None


def test_parse_json_strings_and_fallbacks() -> None:
    data = {
        "format": {"format_name": "matroska,webm", "duration": "5.000000", "size": "1234", "bit_rate": "N/A"},
        "streams": [
            {"index": 0, "codec_type": "video", "codec_name": "mjpeg", "disposition": {"attached_pic": 1}},
            {
                "index": 1,
                "codec_type": "video",
                "codec_name": "vp9",
                "width": 320,
                "height": 240,
                "avg_frame_rate": "0/0",
                "r_frame_rate": "24/1",
                "tags": {"DURATION": "00:00:05.000000000"},
            },
            {"index": 2, "codec_type": "audio", "codec_name": "opus", "sample_rate": "48000", "channels": 2},
        ],
    }
    facts = parse_probe_json(data)
    assert facts.bit_rate is None and facts.size_bytes == 1234
    assert facts.video is not None and facts.video.index == 1  # cover art skipped
    assert facts.video.fps == 24.0 and facts.video.duration_s == 5.0
    assert facts.audio is not None and facts.audio.sample_rate == 48000

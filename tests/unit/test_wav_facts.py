"""Plain PCM WAVs judged without ffmpeg (jobservice.media.wav) say what ffprobe and the counting
decode say; anything the module does not fully understand is left to ffmpeg."""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

import pytest

from jobservice.media.probe import decoded_seconds, probe_media
from jobservice.media.wav import pcm_wav_facts

DECODE_STEP_S = 2 / 8000  # the counting decode counts at 8 kHz, resampling at the edges


def make_wav(path: Path, *, codec: str, rate: int, channels: int, seconds: float = 1.3, **extra: str) -> Path:
    argv = ["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", f"sine=frequency=440:sample_rate={rate}"]
    argv += ["-t", str(seconds), "-ac", str(channels), "-c:a", codec]
    for name, value in extra.items():
        argv += ["-metadata", f"{name}={value}"]
    subprocess.run([*argv, str(path)], check=True)
    return path


def assert_agrees_with_ffmpeg(path: Path) -> None:
    facts = pcm_wav_facts(path)
    assert facts is not None, path.name
    probed = probe_media(path)
    assert probed.format_name == "wav" and probed.audio is not None
    assert facts.codec_name == probed.audio.codec_name
    assert (facts.sample_rate, facts.channels) == (probed.audio.sample_rate, probed.audio.channels)
    assert facts.duration_s == pytest.approx(decoded_seconds(path, cap_s=600), abs=DECODE_STEP_S)


@pytest.mark.parametrize(
    ("codec", "rate", "channels"),
    [
        ("pcm_s16le", 16000, 1),
        ("pcm_s16le", 44100, 2),
        ("pcm_u8", 8000, 1),
        ("pcm_s24le", 48000, 2),  # WAVE_FORMAT_EXTENSIBLE from ffmpeg
        ("pcm_s32le", 22050, 1),
        ("pcm_f32le", 48000, 6),
        ("pcm_f64le", 16000, 1),
        ("pcm_s16le", 192000, 6),
    ],
)
def test_plain_pcm_wavs_match_ffprobe_and_the_decode(
    tmp_path: Path, codec: str, rate: int, channels: int
) -> None:
    assert_agrees_with_ffmpeg(make_wav(tmp_path / "a.wav", codec=codec, rate=rate, channels=channels))


def test_chunks_before_the_data_a_streamed_size_and_a_truncated_file(tmp_path: Path) -> None:
    tagged = make_wav(
        tmp_path / "tagged.wav", codec="pcm_s16le", rate=16000, channels=1, title="a LIST chunk"
    )
    assert b"LIST" in tagged.read_bytes()[:200]
    assert_agrees_with_ffmpeg(tagged)

    raw = bytearray(make_wav(tmp_path / "base.wav", codec="pcm_s16le", rate=16000, channels=2).read_bytes())
    data_at = raw.index(b"data")
    streamed = tmp_path / "streamed.wav"  # sizes a recorder writes before it knows the length
    streamed.write_bytes(
        raw[:4] + b"\xff\xff\xff\xff" + raw[8 : data_at + 4] + b"\xff\xff\xff\xff" + raw[data_at + 8 :]
    )
    assert_agrees_with_ffmpeg(streamed)
    truncated = tmp_path / "truncated.wav"  # the header claims more than the file holds
    truncated.write_bytes(raw[: len(raw) - 12_345])
    assert_agrees_with_ffmpeg(truncated)
    facts = pcm_wav_facts(truncated)
    assert facts is not None and facts.duration_s < 1.3 - 0.1


def test_what_it_does_not_fully_understand_is_left_to_ffmpeg(tmp_path: Path) -> None:
    for codec in ("pcm_mulaw", "adpcm_ms", "pcm_s16be"):
        path = tmp_path / f"{codec}.{'aiff' if codec == 'pcm_s16be' else 'wav'}"
        assert pcm_wav_facts(make_wav(path, codec=codec, rate=8000, channels=1)) is None, codec
    base = make_wav(tmp_path / "base.wav", codec="pcm_s16le", rate=16000, channels=1).read_bytes()
    fmt_at = base.index(b"fmt ") + 8
    cases = {
        "rf64": b"RF64" + base[4:],
        "not_riff": b"JUNK" + base[4:],
        "header_only": base[:30],
        "no_data_chunk": base[: base.index(b"data")],
        "inconsistent_block": base[: fmt_at + 12] + struct.pack("<H", 3) + base[fmt_at + 14 :],
        "rate_zero": base[: fmt_at + 4] + struct.pack("<I", 0) + base[fmt_at + 8 :],
        "empty": b"",
    }
    for name, body in cases.items():
        path = tmp_path / f"{name}.wav"
        path.write_bytes(body)
        assert pcm_wav_facts(path) is None, name
    assert pcm_wav_facts(tmp_path / "missing.wav") is None

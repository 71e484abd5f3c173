"""ffprobe on the API side and in workers: what a media file holds, as typed facts.

Shared by the API (sniffing uploaded audio) and the workers' output gate, so it imports nothing
heavy. ffprobe prints every number as a string (``"nb_frames": "250"``, ``"r_frame_rate": "25/1"``,
audio streams carry ``"0/0"``); everything is parsed here once so callers only see numbers or None.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import threading
from fractions import Fraction
from pathlib import Path
from typing import Any

from jobservice.reports.run_report import ProbeFacts, StreamFacts

_INSTALL_HINT = "install FFmpeg (Debian/Ubuntu: apt-get install ffmpeg; macOS: brew install ffmpeg)"


class MediaToolMissing(RuntimeError):
    """ffmpeg or ffprobe is not installed; a deployment problem, not a problem with the file."""


class ProbeError(Exception):
    """The file could not be read as media; the message is a sentence fit for a user."""


def ffmpeg_path(name: str = "ffmpeg") -> str:
    """Absolute path of ``ffmpeg``/``ffprobe``: on PATH, else beside the running Python (an offline
    bundle installs them into its venv's bin/, which need not be on PATH); or MediaToolMissing with
    an install hint."""
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        raise MediaToolMissing(f"{name} was not found on PATH; {_INSTALL_HINT}.")
    return found


def probe_media(
    path: Path, *, count_packets: bool = False, count_frames: bool = False, timeout: float = 60.0
) -> ProbeFacts:
    """Read container and stream facts of ``path`` with ffprobe.

    ``count_packets`` reads the whole file without decoding (cheap; shows truncation as
    nb_read_packets < nb_frames); ``count_frames`` decodes everything (slow; nb_read_frames).
    Raises ProbeError when the file is not readable media, MediaToolMissing without ffprobe.
    """
    argv = [
        ffmpeg_path("ffprobe"),
        "-hide_banner",
        "-v",
        "error",
        "-of",
        "json",
        "-show_format",
        "-show_streams",
    ]
    if count_packets:
        argv.append("-count_packets")
    if count_frames:
        argv.append("-count_frames")
    # "file:" keeps a name with a colon from being taken for a protocol.
    argv.append(f"file:{Path(path).resolve()}")
    try:
        done = subprocess.run(
            argv, capture_output=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise ProbeError(f"Reading the file took longer than {timeout:g} s.") from None
    stderr = done.stderr.decode("utf-8", "replace")
    if done.returncode != 0:
        raise ProbeError(f"It is not a readable media file ({_first_error(stderr, path)}).")
    try:
        data = json.loads(done.stdout or b"{}")
    except json.JSONDecodeError:
        raise ProbeError("ffprobe returned output that is not JSON.") from None
    facts = parse_probe_json(data)
    if facts.video is None and facts.audio is None:
        detail = _first_error(stderr, path) if stderr.strip() else "no audio or video stream"
        raise ProbeError(f"It is not a readable media file ({detail}).")
    return facts


DECODE_RATE = 8000  # samples per second of the counting decode: the count, not the sound, matters


def decoded_seconds(path: Path, *, cap_s: float, timeout: float = 60.0) -> float:
    """Seconds of audio that the first audio stream of ``path`` really decodes to, counting at most
    ``cap_s`` (a file that decodes longer returns a little more than ``cap_s``).

    A header's duration can lie: an MP3 without a Xing header is timed from its first frame's bit
    rate, a WAV's data size may say 0xFFFFFFFF. Decoded samples cannot lie, and capping the decode
    just past the limit keeps a ten-hour file to a second of work. The samples are counted as they
    arrive (mono, 8 kHz), so the cap holds even when the stream's timestamps are nonsense.
    Raises ProbeError when ffmpeg cannot decode the stream, MediaToolMissing without ffmpeg.
    """
    argv = [ffmpeg_path("ffmpeg"), "-hide_banner", "-nostdin", "-nostats", "-v", "error"]
    argv += ["-i", f"file:{Path(path).resolve()}", "-map", "0:a:0", "-t", f"{cap_s:.3f}"]
    argv += ["-ac", "1", "-ar", str(DECODE_RATE), "-f", "s16le", "pipe:1"]
    ceiling = int((cap_s + 1.0) * DECODE_RATE * 2)  # bytes: one second past the cap
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=errors, stdin=subprocess.DEVNULL)
        watchdog = threading.Timer(timeout, proc.kill)  # a read blocks: the timer ends a stuck decode
        watchdog.start()
        total = 0
        try:
            assert proc.stdout is not None
            while total <= ceiling and (chunk := proc.stdout.read(1 << 16)):
                total += len(chunk)
        finally:
            timed_out = not watchdog.is_alive()
            watchdog.cancel()
            proc.kill()  # done, or past the ceiling: either way nothing more is wanted
            returncode = proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        errors.seek(0)
        stderr = errors.read(4096).decode("utf-8", "replace")
    if timed_out:
        raise ProbeError(f"Decoding the audio took longer than {timeout:g} s.")
    if total == 0 and returncode != 0:
        raise ProbeError(f"It is not decodable audio ({_first_error(stderr, path)}).")
    return total / (2 * DECODE_RATE)


def parse_probe_json(data: dict[str, Any]) -> ProbeFacts:
    """Turn ffprobe's JSON (strings everywhere) into ProbeFacts; first video and first audio stream."""
    fmt = data.get("format") or {}
    video: StreamFacts | None = None
    audio: StreamFacts | None = None
    for raw in data.get("streams") or []:
        kind = raw.get("codec_type")
        # Cover art in M4A/MP3 shows up as a one-frame video stream; it is not the video.
        attached = bool((raw.get("disposition") or {}).get("attached_pic"))
        if kind == "video" and video is None and not attached:
            video = _stream(raw)
        elif kind == "audio" and audio is None:
            audio = _stream(raw)
    return ProbeFacts(
        format_name=fmt.get("format_name"),
        duration_s=_float(fmt.get("duration")),
        size_bytes=_int(fmt.get("size")),
        bit_rate=_int(fmt.get("bit_rate")),
        video=video,
        audio=audio,
    )


def parse_rate(value: Any) -> float | None:
    """``"25/1"`` -> 25.0, ``"30000/1001"`` -> 29.97..., ``"0/0"``/missing -> None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        rate = Fraction(value)
    except (ValueError, ZeroDivisionError):
        return None
    return float(rate) if rate > 0 else None


def _stream(raw: dict[str, Any]) -> StreamFacts:
    duration = _float(raw.get("duration"))
    if duration is None:
        # Matroska/WebM keep per-stream durations only as a "HH:MM:SS.frac" tag.
        duration = _clock((raw.get("tags") or {}).get("DURATION"))
    return StreamFacts(
        index=_int(raw.get("index")) or 0,
        codec_type=str(raw.get("codec_type")),
        codec_name=raw.get("codec_name"),
        width=_int(raw.get("width")),
        height=_int(raw.get("height")),
        fps=parse_rate(raw.get("avg_frame_rate")) or parse_rate(raw.get("r_frame_rate")),
        duration_s=duration,
        nb_frames=_int(raw.get("nb_frames")),
        nb_read_packets=_int(raw.get("nb_read_packets")),
        nb_read_frames=_int(raw.get("nb_read_frames")),
        sample_rate=_int(raw.get("sample_rate")),
        channels=_int(raw.get("channels")),
        pix_fmt=raw.get("pix_fmt"),
    )


def _float(value: Any) -> float | None:
    if value is None or value == "N/A":
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _int(value: Any) -> int | None:
    number = _float(value)
    return int(number) if number is not None else None


def _clock(value: Any) -> float | None:
    if not isinstance(value, str) or value.count(":") != 2:
        return None
    hours, minutes, seconds = value.split(":")
    try:
        return int(hours) * 3600 + int(minutes) * 60 + float(seconds)
    except ValueError:
        return None


def _first_error(stderr: str, path: Path) -> str:
    """The first line of ffprobe's complaint, without our private file path."""
    for line in stderr.splitlines():
        line = line.strip()
        if line:
            for prefix in (f"file:{Path(path).resolve()}", str(Path(path).resolve()), str(path)):
                line = line.replace(prefix, Path(path).name)
            return line.rstrip(".")
    return "ffprobe failed without a message"

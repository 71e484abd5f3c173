"""The argv of the streaming pipeline's two ffmpeg processes (what runs, not how it is driven)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

from jobservice.catalog import ValidationPolicy
from workers.video.detect import detector_filter

TS_UTF8 = "\x15"  # DVB's marker of a UTF-8 string (EN 300 468, annex A)


def ffmpeg_rate(fps: float) -> str:
    """ffmpeg's spelling of a frame rate: 25 -> "25", 29.97... -> "30000/1001"."""
    rate = Fraction(fps).limit_denominator(1001)
    return str(rate.numerator) if rate.denominator == 1 else f"{rate.numerator}/{rate.denominator}"


def _tee_file(path: Path) -> str:
    # The tee muxer splits on "|" and honours backslash escapes; "file:" stops a colon in the name
    # from being read as a protocol.
    escaped = str(path).replace("\\", "\\\\").replace("'", "\\'").replace("|", "\\|")
    return f"file:{escaped}"


def tee_target(path: Path, preview_path: Path | None = None) -> str:
    """The tee spec: the final +faststart MP4, and a video-only MPEG-TS copy on stdout; with
    ``preview_path``, a third copy (video and audio) as MPEG-TS flushed at every packet, which a
    preview is remuxed from while the model still renders (workers/video/preview.py). Its failure
    (``onfail=ignore``) never stops the encode."""
    target = f"[f=mp4:movflags=+faststart]{_tee_file(path)}|[f=mpegts:select=v]pipe:1"
    if preview_path is not None:
        target += f"|[f=mpegts:onfail=ignore:flush_packets=1]{_tee_file(preview_path)}"
    return target


def encoder_argv(
    ffmpeg: str,
    *,
    out_path: Path,
    width: int,
    height: int,
    fps: float,
    audio_path: Path | None,
    duration_s: float | None,
    preset: str,
    crf: int,
    preview_path: Path | None = None,
) -> list[str]:
    """Raw RGB frames on stdin (+ optional audio file) -> H.264/AAC MP4 and MPEG-TS on stdout."""
    argv = [ffmpeg, "-hide_banner", "-nostats", "-v", "error", "-y"]
    argv += ["-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{width}x{height}", "-r", ffmpeg_rate(fps)]
    argv += ["-i", "pipe:0"]
    # The tee muxer selects no streams by itself: every stream must be mapped explicitly.
    maps = ["-map", "0:v:0"]
    if audio_path is not None:
        if duration_s is None:
            raise ValueError("duration_s is required with audio_path")
        # Cut on the input side: the audio ends at exactly num_frames/fps and video is never
        # trimmed by a rounding of an output -t. Audio runs ahead of slow video harmlessly: it
        # waits in the muxer's interleaving queue (checked with 60 s of audio at 2 frames/s).
        argv += ["-t", f"{duration_s:.6f}", "-i", f"file:{Path(audio_path).resolve()}"]
        maps += ["-map", "1:a:0"]
    argv += maps
    # zerolatency: no lookahead or B-frames, so each frame leaves the encoder (and reaches the
    # detectors) right away instead of tens of frames later.
    argv += ["-c:v", "libx264", "-preset", preset, "-tune", "zerolatency", "-crf", str(crf)]
    argv += ["-pix_fmt", "yuv420p"]
    if audio_path is not None:
        argv += ["-c:a", "aac", "-b:a", "128k"]
    # The MPEG-TS copies' service names, marked UTF-8 (the leading 0x15): unmarked, a reader takes
    # them as ISO 6937 and converts them with iconv, which crashes the static ffmpeg builds (static
    # glibc cannot load its iconv modules) that an offline bundle carries.
    argv += ["-metadata", f"service_provider={TS_UTF8}jobservice", "-metadata", f"service_name={TS_UTF8}job"]
    # Headroom for packets queued before every stream has produced its first packet (the
    # audio is ready long before a model's first frame); the default 128 could overflow.
    argv += ["-max_muxing_queue_size", "4096", "-f", "tee", tee_target(out_path, preview_path)]
    return argv


def decoder_argv(ffmpeg: str, policy: ValidationPolicy) -> list[str]:
    """MPEG-TS on stdin -> detector events on stderr (info level), frame counts on stdout."""
    argv = [ffmpeg, "-hide_banner", "-nostdin", "-nostats", "-v", "repeat+level+info"]
    argv += ["-f", "mpegts", "-i", "pipe:0", "-map", "0:v:0", "-vf", detector_filter(policy)]
    argv += ["-an", "-sn", "-dn", "-f", "null", "-", "-progress", "pipe:1"]
    return argv

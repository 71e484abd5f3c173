"""A preview of a video still being rendered: the stream so far, remuxed into an MP4 a plain
``<video>`` plays.

While the model renders, the encoder's tee writes a third copy of its output, video and audio, as
MPEG-TS flushed at every packet (``workers.video.commands.tee_target``). MPEG-TS can be cut
anywhere: the file as it stands is every frame encoded so far with the audio of their span (the
muxer interleaves the audio with the video, so it runs at most a packet ahead). A preview is that
file remuxed, without re-encoding (``-c copy``), into a ``+faststart`` MP4: a few tenths of a
second for minutes of video, whatever the model's speed, and a file every browser plays
progressively. (An HLS playlist of segments would need hls.js in Chromium; a fragmented MP4 is
only needed to append to a file being played, and each preview is a new, complete file.)
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from jobservice.media.probe import ffmpeg_path


class PreviewError(RuntimeError):
    """The preview could not be made (the message carries ffmpeg's complaint)."""


def preview_argv(ffmpeg: str, ts_path: Path, out_path: Path) -> list[str]:
    """The remux: the MPEG-TS so far -> a +faststart MP4 of the same streams, nothing re-encoded."""
    argv = [ffmpeg, "-hide_banner", "-nostdin", "-nostats", "-v", "error", "-y"]
    argv += ["-f", "mpegts", "-i", f"file:{Path(ts_path).resolve()}", "-map", "0:v:0", "-map", "0:a?"]
    argv += ["-c", "copy", "-movflags", "+faststart", "-f", "mp4", f"file:{Path(out_path).resolve()}"]
    return argv


def build_preview(ts_path: Path, out_path: Path, *, timeout: float = 30.0) -> Path:
    """Make ``out_path``, an MP4 of what ``ts_path`` holds now (its last, unfinished packet left out)."""
    if not ts_path.exists() or ts_path.stat().st_size == 0:
        raise PreviewError("nothing has been encoded yet")
    try:
        done = subprocess.run(
            preview_argv(ffmpeg_path("ffmpeg"), ts_path, out_path),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        out_path.unlink(missing_ok=True)
        raise PreviewError(f"the remux took longer than {timeout:g} s") from None
    if done.returncode != 0 or not out_path.exists() or out_path.stat().st_size == 0:
        out_path.unlink(missing_ok=True)
        complaint = done.stderr.decode(errors="replace").strip()[-500:]
        raise PreviewError(f"ffmpeg exited with status {done.returncode}: {complaint}")
    return out_path

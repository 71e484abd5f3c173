"""An ffprobe started before the file exists, fed the finished file through its stdin.

Starting ffprobe costs ~80-110 ms here (loading FFmpeg's libraries), more than reading a 10 s
clip. On the job's tail that start-up is pure waiting, so the streaming encoder starts this probe
together with its other processes and, once the MP4 is complete, pipes the file's bytes in: the
probe then takes ~20-40 ms. Our MP4s are written with +faststart (moov first), so the mov demuxer
reads them fine from a pipe. A pipe has no size, so ``size_bytes``/``bit_rate`` come from the file.
Any failure here is not a verdict: callers fall back to a plain ``probe_media`` of the file.
"""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

from jobservice.media.probe import ProbeError, ffmpeg_path, parse_probe_json
from jobservice.reports.run_report import ProbeFacts
from workers.video.procs import PipeReader, kill_and_reap, wait_exit


class PrestartedProbe:
    """ffprobe -count_packets of an MP4 that will arrive on stdin."""

    def __init__(self) -> None:
        argv = [ffmpeg_path("ffprobe"), "-hide_banner", "-v", "error", "-of", "json"]
        argv += ["-show_format", "-show_streams", "-count_packets", "-f", "mp4", "-i", "pipe:0"]
        self._proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert self._proc.stdout is not None and self._proc.stderr is not None
        self._out = PipeReader(self._proc.stdout, name="probe-stdout")
        self._err = PipeReader(self._proc.stderr, tail_bytes=8192, name="probe-stderr")

    def run(self, path: Path, timeout: float = 60.0) -> ProbeFacts:
        """Feed ``path`` (complete, +faststart MP4) to the waiting ffprobe and parse its answer."""
        feeder = threading.Thread(target=self._feed, args=(Path(path),), name="probe-feed", daemon=True)
        feeder.start()
        try:
            rc = wait_exit(self._proc, timeout)
        except subprocess.TimeoutExpired:
            raise ProbeError(f"Reading the file took longer than {timeout:g} s.") from None
        finally:
            self.close()
        feeder.join(1.0)
        self._out.join(1.0)
        if rc != 0:
            raise ProbeError(f"It is not a readable media file ({self._err.text().strip()[:200]}).")
        try:
            facts = parse_probe_json(json.loads(self._out.text() or "{}"))
        except json.JSONDecodeError:
            raise ProbeError("ffprobe returned output that is not JSON.") from None
        size = Path(path).stat().st_size
        duration = facts.duration_s
        # ffprobe computes a file's bit_rate the same way when the container gives none.
        bit_rate = facts.bit_rate or (int(size * 8 / duration) if duration else None)
        return facts.model_copy(update={"size_bytes": size, "bit_rate": bit_rate})

    def close(self) -> None:
        """Kill the probe if it is still waiting (unused, or timed out). Idempotent."""
        kill_and_reap(self._proc)
        for reader in (self._out, self._err):
            reader.join(1.0)

    def _feed(self, path: Path) -> None:
        stdin = self._proc.stdin
        assert stdin is not None
        try:
            with path.open("rb") as source:
                while block := source.read(1 << 20):
                    stdin.write(block)
        except (BrokenPipeError, OSError, ValueError):
            pass  # ffprobe stopped reading (it failed or has seen enough); its exit status tells
        finally:
            try:
                stdin.close()
            except OSError:
                pass

"""Streaming encode with the gate's decode pass running alongside it.

Frames go from the model into an ENCODER ffmpeg (raw RGB on stdin). Its ``tee`` muxer writes the
final MP4 and, at the same time, a video-only MPEG-TS copy to stdout, which is an OS pipe straight
into a DECODER ffmpeg running blackdetect+freezedetect with ``-progress``. So the decode pass over
the actual encoded bitstream is nearly done when the last frame is written; after it, only the
encoder flush, the decoder drain and one ffprobe of the final file remain (the ffprobe overlaps the
drain, and was started ahead so its start-up is off the tail). No Python sits between the two
ffmpeg processes; every pipe we do not feed is drained on a thread, so none can fill and stall.
"""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from jobservice.catalog import ValidationPolicy
from jobservice.media.probe import ProbeError, ffmpeg_path, probe_media
from jobservice.reports.run_report import ProbeFacts, Segment
from workers.video.commands import decoder_argv, encoder_argv
from workers.video.detect import error_lines, parse_detections, parse_progress_frames
from workers.video.fastprobe import PrestartedProbe
from workers.video.procs import PipeReader, kill_and_reap, wait_exit, wait_with_rusage

_LOG_TAIL = 16384
_DETECTOR_LOG = 4 * 2**20


class EncoderError(RuntimeError):
    """The encoder (or its decode pass) failed; the message carries ffmpeg's stderr tail."""


@dataclass
class EncodeResult:
    """What a finished streaming encode produced and what its decode pass saw."""

    path: Path
    frames_written: int
    decoded_frames: int | None
    black_segments: list[Segment]  # closed at frames_written / fps
    freeze_segments: list[Segment]  # raw: black stretches show up here too (see detect.freeze_beyond_black)
    finish_ms: float
    decode_cpu_ms: float | None
    encoder_log: str
    fps: float = 0.0
    decoder_returncode: int | None = None
    decoder_errors: list[str] = field(default_factory=list)
    # ffprobe -count_packets of the final file, run while the decoder drained; None if it failed.
    probe: ProbeFacts | None = None
    probe_error: str | None = None


def _check_format(
    width: int, height: int, fps: float, audio_path: Path | None, duration_s: float | None
) -> None:
    if width <= 0 or height <= 0 or width % 2 or height % 2:
        raise ValueError(f"width and height must be positive and even for yuv420p, got {width}x{height}")
    if fps <= 0:
        raise ValueError(f"fps must be positive, got {fps}")
    if audio_path is not None and (duration_s is None or duration_s <= 0):
        raise ValueError("duration_s (num_frames / fps) is required with audio_path: the audio is cut to it")


class StreamingEncoder:
    """Encodes streamed RGB frames to MP4 while the detectors decode the same bitstream.

    Use as a context manager: leaving the block with an exception, or without ``finish()``,
    aborts (kills every child process and removes the partial file).
    """

    def __init__(
        self,
        *,
        out_path: Path,
        width: int,
        height: int,
        fps: float,
        policy: ValidationPolicy,
        audio_path: Path | None = None,
        duration_s: float | None = None,
        preset: str = "veryfast",
        crf: int = 20,
        preview_path: Path | None = None,
    ) -> None:
        """Start the encoder, decoder and probe processes; ``duration_s`` is required with ``audio_path``;
        ``preview_path``: where the encoder also writes the stream for previews (MPEG-TS)."""
        _check_format(width, height, fps, audio_path, duration_s)
        self.out_path = Path(out_path).resolve()
        self.width, self.height, self.fps = width, height, float(fps)
        self.frames_written = 0
        self._finished = False
        self._aborted = False
        self._lock = threading.Lock()

        ffmpeg = ffmpeg_path("ffmpeg")
        encode = encoder_argv(
            ffmpeg,
            out_path=self.out_path,
            width=width,
            height=height,
            fps=self.fps,
            audio_path=audio_path,
            duration_s=duration_s,
            preset=preset,
            crf=crf,
            preview_path=preview_path,
        )
        self.out_path.parent.mkdir(parents=True, exist_ok=True)
        self._start(encode, decoder_argv(ffmpeg, policy))

    def _start(self, encode: list[str], decode: list[str]) -> None:
        """Start the encoder with the decoder reading its output, the probe, and the pipe readers."""
        self._encoder = subprocess.Popen(
            encode, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        try:
            self._decoder = subprocess.Popen(
                decode, stdin=self._encoder.stdout, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
            # Started now so its ~0.1 s start-up is not paid on the tail (see fastprobe).
            self._probe = PrestartedProbe()
        except BaseException:
            kill_and_reap(self._encoder)
            kill_and_reap(getattr(self, "_decoder", None))
            raise
        # Only the decoder may hold the read end, or the encoder would never see EPIPE if it died.
        assert self._encoder.stdout is not None and self._encoder.stdin is not None
        self._encoder.stdout.close()
        self._stdin = self._encoder.stdin
        assert self._decoder.stdout is not None and self._decoder.stderr is not None
        assert self._encoder.stderr is not None
        self._enc_err = PipeReader(self._encoder.stderr, tail_bytes=_LOG_TAIL, name="encoder-stderr")
        self._dec_out = PipeReader(self._decoder.stdout, tail_bytes=_LOG_TAIL, name="decoder-progress")
        # Detector lines are few (a handful per event), so a generous tail keeps all of them.
        self._dec_err = PipeReader(self._decoder.stderr, tail_bytes=_DETECTOR_LOG, name="decoder-stderr")

    def write(self, frames: Any) -> None:
        """Append frames: a uint8 numpy array [N,H,W,3] or [H,W,3] of RGB pixels."""
        if self._finished or self._aborted:
            raise EncoderError("the encoder is already finished or aborted")
        if not isinstance(frames, np.ndarray):
            raise TypeError(f"frames must be a numpy array, got {type(frames).__name__}")
        if frames.dtype != np.uint8:
            raise ValueError(f"frames must be uint8, got {frames.dtype}")
        if frames.ndim == 3:
            frames = frames[np.newaxis]
        if frames.ndim != 4 or frames.shape[1:] != (self.height, self.width, 3):
            raise ValueError(f"frames must be [N,{self.height},{self.width},3], got {list(frames.shape)}")
        if frames.shape[0] == 0:
            return
        frames = np.ascontiguousarray(frames)
        try:
            self._stdin.write(frames.data)
            # Flush per call: a frame left in Python's buffer would not reach the detectors.
            self._stdin.flush()
        except (BrokenPipeError, ValueError, OSError) as exc:
            raise EncoderError(self._died_message(f"the encoder stopped accepting frames ({exc})")) from exc
        self.frames_written += frames.shape[0]
        # ffmpeg ignores SIGPIPE and its MPEG-TS muxer does not check write errors, so a dead
        # decoder would go unnoticed until the end; it cannot exit on its own before finish().
        if self._decoder.poll() is not None:
            raise EncoderError(
                self._died_message(f"the detector pass exited early ({self._decoder.returncode})")
            )

    def finish(self, timeout: float = 120.0) -> EncodeResult:
        """Close the input, wait for both processes and collect the decode pass's findings."""
        if self._aborted:
            raise EncoderError("the encoder was aborted")
        if self._finished:
            raise EncoderError("finish() was already called")
        started = time.perf_counter()
        if self.frames_written == 0:
            self.abort()
            raise EncoderError("no frames were written")
        try:
            self._stdin.close()
        except OSError:
            pass  # the encoder died (broken pipe on the last flush); its exit status says how
        deadline = time.monotonic() + timeout
        self._wait_for_encoder(timeout)
        dec_rc, cpu_ms, probe_box = self._drain(deadline, timeout)
        self._finished = True
        return self._result(started, dec_rc, cpu_ms, probe_box)

    def _wait_for_encoder(self, timeout: float) -> None:
        """The encoder's exit, which must be clean (else abort and say why)."""
        try:
            enc_rc = wait_exit(self._encoder, timeout)
        except subprocess.TimeoutExpired:
            self.abort()
            raise EncoderError(f"the encoder did not finish within {timeout:g} s") from None
        if enc_rc != 0:
            message = self._died_message(f"the encoder exited with status {enc_rc}")
            self.abort()
            raise EncoderError(message)

    def _drain(self, deadline: float, timeout: float) -> tuple[int, float | None, dict[str, Any]]:
        """Probe the finished MP4 while the decoder drains; the decoder's status, CPU time and the probe."""
        # The MP4 is complete now: probe it while the decoder drains the last frames.
        probe_box: dict[str, Any] = {}
        prober = threading.Thread(target=self._probe_into, args=(probe_box,), name="final-probe", daemon=True)
        prober.start()
        try:
            self._dec_out.join(max(0.0, deadline - time.monotonic()))
            dec_rc, cpu_ms = wait_with_rusage(self._decoder, max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.abort()
            raise EncoderError(f"the detector pass did not finish within {timeout:g} s") from None
        self._dec_err.join(5.0)
        self._enc_err.join(5.0)
        prober.join(max(0.1, deadline - time.monotonic()))
        self._probe.close()  # only does something if the probe overran the deadline
        return dec_rc, cpu_ms, probe_box

    def _result(
        self, started: float, dec_rc: int, cpu_ms: float | None, probe_box: dict[str, Any]
    ) -> EncodeResult:
        """What the decode pass found, as an EncodeResult."""
        log = self._dec_err.text()
        stream_end = self.frames_written / self.fps
        found = parse_detections(log, stream_end_s=stream_end, frame_s=1.0 / self.fps)
        errors = error_lines(log)
        if dec_rc != 0 and not errors:
            errors = log.strip().splitlines()[-3:]
        return EncodeResult(
            path=self.out_path,
            frames_written=self.frames_written,
            decoded_frames=parse_progress_frames(self._dec_out.text()),
            black_segments=found.black,
            freeze_segments=found.freeze,
            finish_ms=(time.perf_counter() - started) * 1000.0,
            decode_cpu_ms=cpu_ms,
            encoder_log=self._enc_err.text(),
            fps=self.fps,
            decoder_returncode=dec_rc,
            decoder_errors=errors,
            probe=probe_box.get("facts"),
            probe_error=probe_box.get(
                "error", None if "facts" in probe_box else "the final probe did not finish"
            ),
        )

    def abort(self) -> None:
        """Kill both processes and remove the partial output. Idempotent; a no-op after finish()."""
        with self._lock:
            if self._aborted or self._finished:
                return
            self._aborted = True
        try:
            self._stdin.close()
        except OSError:
            pass
        kill_and_reap(self._encoder)
        kill_and_reap(self._decoder)
        self._probe.close()
        for reader in (self._enc_err, self._dec_out, self._dec_err):
            reader.join(5.0)
        self.out_path.unlink(missing_ok=True)

    def __enter__(self) -> StreamingEncoder:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is not None or not self._finished:
            self.abort()

    @property
    def pids(self) -> tuple[int, int]:
        """Process ids of (encoder, decoder), for diagnostics and tests."""
        return self._encoder.pid, self._decoder.pid

    def _probe_into(self, box: dict[str, Any]) -> None:
        try:
            box["facts"] = self._probe.run(self.out_path, timeout=60.0)
            return
        except (ProbeError, OSError):
            pass  # not a verdict: ask again the ordinary way, which gives the real reason
        try:
            box["facts"] = probe_media(self.out_path, count_packets=True, timeout=60.0)
        except ProbeError as exc:
            box["error"] = str(exc)

    def _died_message(self, what: str) -> str:
        # Give the readers a moment to collect a dying process's last words (a live one's stderr
        # pipe never reaches EOF, so the joins are short).
        if self._encoder.poll() is None and self._decoder.poll() is None:
            try:
                self._encoder.wait(1.0)
            except subprocess.TimeoutExpired:
                pass
        self._enc_err.join(1.0 if self._encoder.poll() is not None else 0.05)
        parts = [what]
        if enc := self._enc_err.text().strip():
            parts.append(f"encoder: {enc[-2000:]}")
        if self._decoder.poll() is not None:
            self._dec_err.join(1.0)
            dec = "\n".join(error_lines(self._dec_err.text())) or self._dec_err.text().strip()[-1000:]
            parts.append(f"decoder: {dec}")
        return "; ".join(parts)

"""The output gate: a job may succeed only if its video passes these checks.

Two entry points judge by the same rules (``checks.build_checks``):

* ``validate_streamed``: frames went through ``StreamingEncoder``, whose decode pass already ran on
  the encoded bitstream; only ffprobe of the final file is left (and usually already done while the
  decoder drained).
* ``validate_file``: a finished file from an external model; ffprobe -count_packets and ONE ffmpeg
  pass with both detectors, run concurrently.

A bad video never raises: it yields a failed Validation. Only missing tools raise.

Why no ``-xerror`` in the decode pass: it stops at the first error, so the detectors and the frame
count would stop there too and the report would say nothing about the rest. Instead the pass always
runs to the end and errors are caught twice over: decoded frames must equal the container's
nb_frames and the packets read (a truncated +faststart MP4 passes ffprobe with rc=0 and only this
shows it), and any error-level line from the decoder fails the ``decode_errors`` check.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from jobservice.catalog import ValidationPolicy
from jobservice.media.probe import ProbeError, ffmpeg_path, probe_media
from jobservice.reports.run_report import ProbeFacts, Validation
from workers.validation.checks import FILE_CODECS, STREAMED_CODECS, Expectation, Findings, build_checks
from workers.video.detect import detector_filter, error_lines, parse_detections, parse_progress_frames
from workers.video.procs import PipeReader, kill_and_reap, wait_with_rusage

if TYPE_CHECKING:  # at runtime workers.video imports this package, not the other way round
    from workers.video.encoder import EncodeResult

__all__ = ["Expectation", "validate_file", "validate_streamed"]


def validate_streamed(
    *, path: Path, encode: EncodeResult, expect: Expectation, policy: ValidationPolicy
) -> Validation:
    """Judge a streamed encode: its decode-pass results plus ffprobe -count_packets of ``path``."""
    started = time.perf_counter()
    probe: ProbeFacts | None = None
    probe_error: str | None = None
    if encode.probe is not None and Path(encode.path).resolve() == Path(path).resolve():
        probe = encode.probe
    else:
        try:
            probe = probe_media(path, count_packets=True)
        except ProbeError as exc:
            probe_error = str(exc)
    problem = None
    if encode.decoder_returncode != 0:
        problem = f"the detector pass exited with status {encode.decoder_returncode}"
    elif encode.decoded_frames is None:
        problem = "the detector pass reported no frame count"
    found = Findings(
        probe=probe,
        probe_error=probe_error,
        decoded_frames=encode.decoded_frames,
        black=encode.black_segments,
        freeze=encode.freeze_segments,
        decoder_errors=encode.decoder_errors,
        decoder_problem=problem,
        frames_written=encode.frames_written,
    )
    return _verdict("streamed", found, expect, policy, STREAMED_CODECS, started, encode.decode_cpu_ms)


def validate_file(
    *, path: Path, expect: Expectation, policy: ValidationPolicy, timeout: float = 600.0
) -> Validation:
    """Judge a finished file: ffprobe -count_packets and one detector decode pass, side by side."""
    started = time.perf_counter()
    argv = [ffmpeg_path("ffmpeg"), "-hide_banner", "-nostdin", "-nostats", "-v", "repeat+level+info"]
    argv += ["-i", f"file:{Path(path).resolve()}", "-map", "0:v:0", "-vf", detector_filter(policy)]
    argv += ["-an", "-sn", "-dn", "-f", "null", "-", "-progress", "pipe:1"]
    ffmpeg_path("ffprobe")  # fail fast, before starting anything, when either tool is missing
    decoder = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert decoder.stdout is not None and decoder.stderr is not None
        progress = PipeReader(decoder.stdout, tail_bytes=16384, name="gate-progress")
        log = PipeReader(decoder.stderr, tail_bytes=4 * 2**20, name="gate-stderr")
        try:
            probe = probe_media(path, count_packets=True, timeout=min(timeout, 120.0))
        except ProbeError as exc:
            kill_and_reap(decoder)
            found = Findings(probe=None, probe_error=str(exc))
            return _verdict("file", found, expect, policy, FILE_CODECS, started, None)

        cpu_ms: float | None = None
        problem: str | None = None
        timed_out = False
        remaining = max(0.1, timeout - (time.perf_counter() - started))
        try:
            progress.join(remaining)
            rc, cpu_ms = wait_with_rusage(decoder, max(0.1, timeout - (time.perf_counter() - started)))
            if rc != 0:
                problem = f"the decode pass exited with status {rc}"
        except subprocess.TimeoutExpired:
            kill_and_reap(decoder)
            timed_out = True
            problem = f"the decode pass did not finish within {timeout:g} s"
        log.join(5.0)
        text = log.text()
        # A killed pass's last count is only how far it got, not what the file holds.
        decoded = None if timed_out else parse_progress_frames(progress.text())
        video = probe.video
        fps = video.fps if video is not None else None
        found = Findings(
            probe=probe,
            decoded_frames=decoded,
            decoder_errors=error_lines(text),
            decoder_problem=problem,
        )
        detections = parse_detections(
            text, stream_end_s=_stream_end(probe, decoded), frame_s=1.0 / fps if fps else None
        )
        found.black, found.freeze = detections.black, detections.freeze
        return _verdict("file", found, expect, policy, FILE_CODECS, started, cpu_ms)
    finally:
        kill_and_reap(decoder)


def _stream_end(probe: ProbeFacts, decoded: int | None) -> float | None:
    """Where open-ended events are closed: the end of what actually decoded.

    The container's video duration, unless fewer frames decoded than it claims (truncation),
    then the decoded frames' span at the nominal rate.
    """
    video = probe.video
    ends: list[float] = []
    if video is not None and video.duration_s is not None:
        ends.append(video.duration_s)
    elif probe.duration_s is not None:
        ends.append(probe.duration_s)
    if video is not None and video.fps and decoded is not None:
        ends.append(decoded / video.fps)
    return min(ends) if ends else None


def _verdict(
    mode: Literal["streamed", "file"],
    found: Findings,
    expect: Expectation,
    policy: ValidationPolicy,
    codecs: tuple[str, ...],
    started: float,
    cpu_ms: float | None,
) -> Validation:
    checks, frozen = build_checks(found, expect, policy, codecs)
    return Validation(
        verdict="passed" if all(c.passed for c in checks) else "failed",
        mode=mode,
        probe=found.probe or ProbeFacts(),
        decoded_frames=found.decoded_frames,
        black_segments=found.black,
        freeze_segments=frozen,
        checks=checks,
        elapsed_ms=round((time.perf_counter() - started) * 1000.0, 3),
        decode_cpu_ms=None if cpu_ms is None else round(cpu_ms, 3),
    )

"""The gate's checks: expectations and thresholds against what ffprobe and the decode pass found.

Pure functions over already-collected facts, shared by the streamed and the file gate, so both
judge a video by exactly the same rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jobservice.catalog import ValidationPolicy
from jobservice.reports.run_report import Check, ProbeFacts, Segment, StreamFacts
from workers.video.detect import freeze_beyond_black, total_seconds

STREAMED_CODECS = ("h264",)
FILE_CODECS = ("h264", "hevc", "vp9", "av1")


@dataclass(frozen=True)
class Expectation:
    """What the output should be; None means "not checked"."""

    width: int | None = None
    height: int | None = None
    fps: float | None = None
    num_frames: int | None = None
    duration_s: float | None = None  # e.g. the input audio's duration (audio2video)
    require_audio: bool = False


@dataclass
class Findings:
    """Everything measured about one video, before judging it."""

    probe: ProbeFacts | None
    probe_error: str | None = None
    decoded_frames: int | None = None
    black: list[Segment] = field(default_factory=list)
    freeze: list[Segment] = field(default_factory=list)  # raw, black stretches included
    decoder_errors: list[str] = field(default_factory=list)
    decoder_problem: str | None = None  # why the decode pass gave no usable count
    frames_written: int | None = None  # streamed: what the encoder was fed


def build_checks(
    found: Findings, expect: Expectation, policy: ValidationPolicy, codecs: tuple[str, ...]
) -> tuple[list[Check], list[Segment]]:
    """All checks in a fixed order, plus the freeze segments as reported (black removed)."""
    probe = found.probe
    video = probe.video if probe is not None else None
    readable = video is not None
    container_actual = probe.format_name if probe is not None else None
    detail = found.probe_error or ("" if readable else "no video stream")
    checks = [_check("container", readable, "readable media with a video stream", container_actual, detail)]
    if probe is None or video is None:
        # Nothing below means anything without a readable video stream.
        return checks, []

    checks.append(_check("video_codec", video.codec_name in codecs, list(codecs), video.codec_name))
    checks.extend(_stream_checks(found, expect, policy, video))
    checks.extend(_duration_checks(expect, policy, probe))
    frozen = freeze_beyond_black(found.freeze, found.black, policy.freeze_min_seconds)
    checks.extend(_content_checks(found, policy, frozen))
    return checks, frozen


def _stream_checks(
    found: Findings, expect: Expectation, policy: ValidationPolicy, video: StreamFacts
) -> list[Check]:
    """Size, rate, frame counts (container and decoded) and decode errors of the video stream."""
    checks: list[Check] = []
    if expect.width is not None:
        checks.append(_check("width", video.width == expect.width, expect.width, video.width))
    if expect.height is not None:
        checks.append(_check("height", video.height == expect.height, expect.height, video.height))
    if expect.fps is not None:
        ok = video.fps is not None and abs(video.fps - expect.fps) <= policy.fps_tolerance
        checks.append(_check("fps", ok, expect.fps, video.fps, f"tolerance {policy.fps_tolerance:g}"))

    container_frames = video.nb_frames if video.nb_frames is not None else video.nb_read_packets
    want_frames = expect.num_frames if expect.num_frames is not None else found.frames_written
    if want_frames is not None:
        ok = container_frames is not None and abs(container_frames - want_frames) <= policy.frame_tolerance
        checks.append(
            _check(
                "frame_count", ok, want_frames, container_frames, f"tolerance {policy.frame_tolerance} frames"
            )
        )
    checks.append(_decoded_check(found, video.nb_frames, video.nb_read_packets))
    errors = found.decoder_errors
    checks.append(_check("decode_errors", not errors, 0, len(errors), "; ".join(errors[:5])))
    return checks


def _duration_checks(expect: Expectation, policy: ValidationPolicy, probe: ProbeFacts) -> list[Check]:
    """The video's duration, and the audio's presence and duration when the job has speech."""
    checks: list[Check] = []
    video = probe.video
    assert video is not None  # the container check returned early without one
    video_duration = video.duration_s if video.duration_s is not None else probe.duration_s
    if expect.duration_s is not None:
        checks.append(_duration_check("duration", video_duration, expect.duration_s, policy))
    if expect.require_audio:
        audio = probe.audio
        checks.append(_check("audio_present", audio is not None, True, audio is not None))
        if audio is not None and expect.duration_s is not None:
            audio_duration = audio.duration_s if audio.duration_s is not None else probe.duration_s
            checks.append(_duration_check("audio_duration", audio_duration, expect.duration_s, policy))
    return checks


def _content_checks(found: Findings, policy: ValidationPolicy, frozen: list[Segment]) -> list[Check]:
    """Black and frozen stretches (frozen time inside black counts as black only)."""
    black_total = total_seconds(found.black)
    frozen_total = total_seconds(frozen)
    note = "frozen time inside black segments counts as black only" if found.black else ""
    return [
        _check(
            "black",
            black_total <= policy.max_black_seconds + 1e-6,
            f"<= {policy.max_black_seconds:g} s",
            black_total,
            _describe(found.black),
        ),
        _check(
            "freeze",
            frozen_total <= policy.max_freeze_seconds + 1e-6,
            f"<= {policy.max_freeze_seconds:g} s",
            frozen_total,
            "; ".join(part for part in (_describe(frozen), note) if part),
        ),
    ]


def _decoded_check(found: Findings, nb_frames: int | None, nb_read_packets: int | None) -> Check:
    """Decoded frames must equal every other count; a truncated file decodes fewer than it claims."""
    decoded = found.decoded_frames
    expected: dict[str, int] = {}
    if nb_frames is not None:
        expected["container nb_frames"] = nb_frames
    if nb_read_packets is not None:
        expected["packets read"] = nb_read_packets
    if found.frames_written is not None:
        expected["frames written"] = found.frames_written
    if decoded is None:
        return _check("decoded_frames", False, expected, None, found.decoder_problem or "no frame count")
    mismatched = [f"{name} {count}" for name, count in expected.items() if count != decoded]
    # A decode pass that failed may have counted everything and still not judged every frame.
    ok = decoded > 0 and not mismatched and found.decoder_problem is None
    detail = f"decoded {decoded}, but " + ", ".join(mismatched) if mismatched else ""
    if mismatched and nb_frames is not None and decoded < nb_frames:
        detail += " (the file is truncated or corrupt)"
    if found.decoder_problem:
        detail = "; ".join(part for part in (detail, found.decoder_problem) if part)
    return _check("decoded_frames", ok, expected, decoded, detail)


def _duration_check(name: str, actual: float | None, want: float, policy: ValidationPolicy) -> Check:
    ok = actual is not None and abs(actual - want) <= policy.duration_tolerance_seconds + 1e-9
    return _check(
        name,
        ok,
        round(want, 4),
        None if actual is None else round(actual, 4),
        f"tolerance {policy.duration_tolerance_seconds:g} s",
    )


def _describe(segments: list[Segment]) -> str:
    return ", ".join(
        f"{s.start_s:.2f}-{s.end_s:.2f} s" + (" (to the end)" if s.open_ended else "") for s in segments
    )


def _check(name: str, passed: bool, expected: Any, actual: Any, detail: str = "") -> Check:
    return Check(name=name, passed=bool(passed), expected=expected, actual=actual, detail=detail)

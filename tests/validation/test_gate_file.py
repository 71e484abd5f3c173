"""The file gate on crafted media: one verdict per kind of bad output, never an exception."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from jobservice.catalog import ValidationPolicy
from jobservice.reports.run_report import Check, Validation
from workers.validation import Expectation, validate_file

FRAME = 0.04  # one frame at 25 fps
FULL = Expectation(width=256, height=256, fps=25, num_frames=100, duration_s=4.0, require_audio=True)


def failed(v: Validation) -> set[str]:
    return {c.name for c in v.failed_checks}


def check(v: Validation, name: str) -> Check:
    return next(c for c in v.checks if c.name == name)


def test_clean_passes_every_check(media: Callable[[str], Path], policy: ValidationPolicy) -> None:
    v = validate_file(path=media("clean"), expect=FULL, policy=policy)
    assert v.verdict == "passed", v.failed_checks
    assert v.mode == "file"
    assert v.decoded_frames == 100
    assert [c.name for c in v.checks] == [
        "container", "video_codec", "width", "height", "fps", "frame_count", "decoded_frames",
        "decode_errors", "duration", "audio_present", "audio_duration", "black", "freeze",
    ]  # fmt: skip
    assert v.black_segments == [] and v.freeze_segments == []
    assert v.elapsed_ms > 0 and v.decode_cpu_ms is not None and v.decode_cpu_ms > 0


def test_half_black_fails_on_black_closed_at_eof(
    media: Callable[[str], Path], policy: ValidationPolicy
) -> None:
    v = validate_file(path=media("half_black"), expect=FULL, policy=policy)
    assert failed(v) == {"black"}
    [black] = v.black_segments
    assert black.start_s == pytest.approx(2.0, abs=FRAME)
    assert black.end_s == pytest.approx(4.0, abs=1e-6) and black.open_ended
    # The black half is also a freeze, but it is reported once, as black.
    assert v.freeze_segments == []


def test_black_allowed_by_policy(media: Callable[[str], Path]) -> None:
    lenient = ValidationPolicy(max_black_seconds=2.5)
    v = validate_file(path=media("half_black"), expect=FULL, policy=lenient)
    assert v.verdict == "passed"
    assert len(v.black_segments) == 1


def test_frozen_middle_fails_on_freeze(media: Callable[[str], Path], policy: ValidationPolicy) -> None:
    v = validate_file(path=media("frozen_mid"), expect=Expectation(num_frames=125), policy=policy)
    assert failed(v) == {"freeze"}
    [freeze] = v.freeze_segments
    assert freeze.start_s == pytest.approx(1.6, abs=FRAME)
    assert freeze.end_s == pytest.approx(4.0, abs=FRAME)
    assert not freeze.open_ended
    assert check(v, "freeze").actual == pytest.approx(2.4, abs=2 * FRAME)


def test_freeze_to_eof_is_closed_at_the_end(media: Callable[[str], Path], policy: ValidationPolicy) -> None:
    v = validate_file(path=media("frozen_eof"), expect=Expectation(num_frames=125), policy=policy)
    assert failed(v) == {"freeze"}
    [freeze] = v.freeze_segments
    assert freeze.start_s == pytest.approx(2.0, abs=FRAME)
    assert freeze.end_s == pytest.approx(5.0, abs=1e-6)
    assert freeze.open_ended


def test_truncated_faststart_fails_on_decoded_frames(
    media: Callable[[str], Path], policy: ValidationPolicy
) -> None:
    v = validate_file(path=media("truncated"), expect=Expectation(num_frames=150), policy=policy)
    assert v.verdict == "failed"
    assert "decoded_frames" in failed(v) and "decode_errors" in failed(v)
    assert check(v, "container").passed and check(v, "frame_count").passed  # the container lies
    assert v.decoded_frames is not None and 0 < v.decoded_frames < 150
    assert "truncated" in check(v, "decoded_frames").detail


def test_wrong_size_fails_width_and_height(media: Callable[[str], Path], policy: ValidationPolicy) -> None:
    v = validate_file(path=media("clean"), expect=Expectation(width=320, height=240), policy=policy)
    assert failed(v) == {"width", "height"}
    assert (check(v, "width").actual, check(v, "height").actual) == (256, 256)


def test_missing_audio_when_required(media: Callable[[str], Path], policy: ValidationPolicy) -> None:
    v = validate_file(path=media("no_audio"), expect=FULL, policy=policy)
    assert failed(v) == {"audio_present"}
    assert "audio_duration" not in {c.name for c in v.checks}


def test_wrong_duration_against_audio(media: Callable[[str], Path], policy: ValidationPolicy) -> None:
    expect = Expectation(duration_s=5.0, require_audio=True)
    v = validate_file(path=media("clean"), expect=expect, policy=policy)
    assert failed(v) == {"duration", "audio_duration"}
    assert check(v, "duration").actual == pytest.approx(4.0, abs=0.01)
    # Within tolerance passes.
    ok = validate_file(path=media("clean"), expect=Expectation(duration_s=4.1), policy=policy)
    assert ok.verdict == "passed"


def test_wrong_frame_count_and_fps(media: Callable[[str], Path], policy: ValidationPolicy) -> None:
    v = validate_file(path=media("clean"), expect=Expectation(fps=24, num_frames=98), policy=policy)
    assert failed(v) == {"fps", "frame_count"}


def test_garbage_fails_container_without_raising(
    media: Callable[[str], Path], policy: ValidationPolicy
) -> None:
    v = validate_file(path=media("garbage"), expect=FULL, policy=policy)
    assert v.verdict == "failed"
    assert [c.name for c in v.checks] == ["container"]
    assert "not a readable media file" in v.checks[0].detail
    assert v.decoded_frames is None


def test_missing_file_fails_container(tmp_path: Path, policy: ValidationPolicy) -> None:
    v = validate_file(path=tmp_path / "absent.mp4", expect=Expectation(), policy=policy)
    assert failed(v) == {"container"}

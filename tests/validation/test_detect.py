"""Parsing of the detector pass's output, on the exact lines ffmpeg 5.1 prints."""

from __future__ import annotations

import pytest

from jobservice.catalog import ValidationPolicy
from jobservice.reports.run_report import Segment
from workers.video.detect import (
    detector_filter,
    error_lines,
    freeze_beyond_black,
    parse_detections,
    parse_progress_frames,
    total_seconds,
)

# Lines as printed with -v repeat+level+info (stack-probe section 1, half-black 10 s clip).
HALF_BLACK_LOG = """\
[freezedetect @ 0x555f90588440] [info] lavfi.freezedetect.freeze_start: 5
[blackdetect @ 0x55e3a4c036c0] [info] black_start:5 black_end:9.96 black_duration:4.96
"""
FROZEN_LOG = """\
[freezedetect @ 0x555f90588440] [info] lavfi.freezedetect.freeze_start: 3
[freezedetect @ 0x555f90588440] [info] lavfi.freezedetect.freeze_duration: 4.04
[freezedetect @ 0x555f90588440] [info] lavfi.freezedetect.freeze_end: 7.04
"""


def seg(start: float, end: float, open_ended: bool = False) -> Segment:
    return Segment(start_s=start, end_s=end, duration_s=end - start, open_ended=open_ended)


def test_filter_uses_every_policy_threshold() -> None:
    policy = ValidationPolicy(
        black_min_seconds=0.25,
        black_pixel_threshold=0.08,
        black_picture_ratio=0.9,
        freeze_noise_db=-50,
        freeze_min_seconds=1.5,
    )
    assert detector_filter(policy) == (
        "scale=w='min(128,iw)':h=-2:flags=neighbor,"  # a point sample: detectors judge means
        "blackdetect=d=0.25:pix_th=0.08:pic_th=0.9,freezedetect=n=-50dB:d=1.5"
    )


def test_black_at_eof_is_extended_and_open_freeze_closed() -> None:
    found = parse_detections(HALF_BLACK_LOG, stream_end_s=10.0, frame_s=0.04)
    assert found.black == [seg(5.0, 10.0, open_ended=True)]
    assert found.freeze == [seg(5.0, 10.0, open_ended=True)]


def test_closed_freeze_is_kept_as_printed() -> None:
    found = parse_detections(FROZEN_LOG, stream_end_s=10.0, frame_s=0.04)
    assert found.black == []
    assert found.freeze == [Segment(start_s=3.0, end_s=7.04, duration_s=4.04, open_ended=False)]


def test_black_ending_mid_stream_is_not_extended() -> None:
    log = "[blackdetect @ 0x1] [info] black_start:1 black_end:2.5 black_duration:1.5\n"
    found = parse_detections(log, stream_end_s=10.0, frame_s=0.04)
    assert found.black == [seg(1.0, 2.5)]


def test_unknown_stream_end_leaves_events_as_printed() -> None:
    found = parse_detections(HALF_BLACK_LOG, stream_end_s=None, frame_s=None)
    assert found.black == [Segment(start_s=5.0, end_s=9.96, duration_s=4.96)]
    assert found.freeze == [Segment(start_s=5.0, end_s=5.0, duration_s=0.0, open_ended=True)]


def test_freeze_inside_black_is_not_double_reported() -> None:
    black = [seg(5.0, 10.0, True)]
    assert freeze_beyond_black([seg(5.0, 10.0, True)], black, 2.0) == []


def test_freeze_partly_outside_black_keeps_the_rest() -> None:
    # Frozen 1-8 s, black 4-8 s: the 3 s before the black are a real freeze.
    kept = freeze_beyond_black([seg(1.0, 8.0)], [seg(4.0, 8.0)], 2.0)
    assert kept == [seg(1.0, 4.0)]
    # A remnant shorter than freezedetect's own d= is an edge effect and dropped.
    assert freeze_beyond_black([seg(3.5, 8.04)], [seg(4.0, 8.0)], 2.0) == []


def test_freeze_split_by_black_in_its_middle() -> None:
    kept = freeze_beyond_black([seg(0.0, 10.0, True)], [seg(4.0, 5.0)], 2.0)
    assert kept == [seg(0.0, 4.0), seg(5.0, 10.0, True)]
    assert total_seconds(kept) == 9.0


def test_progress_takes_the_last_frame_count() -> None:
    progress = "frame=10\nfps=0.00\nprogress=continue\nframe=250\nout_time_us=1\nprogress=end\n"
    assert parse_progress_frames(progress) == 250
    assert parse_progress_frames("progress=end\n") is None


def test_error_lines_pick_error_levels_without_addresses() -> None:
    log = (
        "[h264 @ 0x55fc2c476580] [error] Invalid NAL unit size (2088 > 219).\n"
        "[mov,mp4 @ 0x55fc2c42c140] [warning] Packet corrupt (stream = 0, dts = 36864).\n"
        "[error] Error while decoding stream #0:0: Invalid data found when processing input\n"
        "[info] frame=   74 fps=0.0\n"
    )
    assert error_lines(log) == [
        "[h264] [error] Invalid NAL unit size (2088 > 219).",
        "[error] Error while decoding stream #0:0: Invalid data found when processing input",
    ]


@pytest.mark.parametrize("log", ["", "[info] nothing to see\n"])
def test_no_events(log: str) -> None:
    found = parse_detections(log, stream_end_s=4.0, frame_s=0.04)
    assert found.black == [] and found.freeze == []

"""The detector pass: the ffmpeg filter string and the parsing of what it prints.

One ffmpeg pass runs ``blackdetect`` and ``freezedetect`` together (about the cost of one decode)
at log level info, since their lines are info-level and ``-v error`` would hide them. We run it with
``-v repeat+level+info`` so identical lines are never collapsed and every line carries its level,
which lets us pick out decoder errors. ``-progress pipe:1`` gives the decoded frame count.

Events that run to the end of the stream are reported incompletely (stack-probe section 1):
freezedetect prints only ``freeze_start``, blackdetect ends one frame short at the last frame's
pts. Both are closed here at the stream end and marked ``open_ended``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from jobservice.catalog import ValidationPolicy
from jobservice.reports.run_report import Segment

_BLACK = re.compile(r"black_start:(?P<start>-?[\d.]+) black_end:(?P<end>-?[\d.]+) black_duration:[\d.]+")
_FREEZE = re.compile(r"lavfi\.freezedetect\.freeze_(?P<key>start|end): (?P<value>-?[\d.]+)")
_FRAME = re.compile(r"^frame=\s*(\d+)\s*$", re.MULTILINE)
_ERROR_LEVEL = re.compile(r"\[(error|fatal|panic)\] ")
_ADDRESS = re.compile(r" @ 0x[0-9a-f]+")
# Slack when comparing timestamps printed with limited precision.
_EPS = 1e-3


@dataclass
class Detections:
    """What one detector pass found, with events closed at the stream end."""

    black: list[Segment] = field(default_factory=list)
    freeze: list[Segment] = field(default_factory=list)


# The detectors judge a point sample of the picture, at most this wide (never upscaled): both
# threshold a MEAN over pixels (blackdetect the share of dark pixels, freezedetect the mean
# absolute difference), which nearest-neighbour decimation estimates without bias, while a
# smoothing scaler would lower the difference that freezedetect compares with its noise floor.
# It costs less than what it saves (measured: bicubic or bilinear scaling cost more than the
# detectors at full size); the decode itself, and so the frame count and decode errors, are
# unchanged.
DETECT_MAX_WIDTH = 128


def detector_filter(policy: ValidationPolicy) -> str:
    """The ``-vf`` chain running blackdetect and freezedetect with the model's thresholds."""
    return (
        f"scale=w='min({DETECT_MAX_WIDTH},iw)':h=-2:flags=neighbor,"
        f"blackdetect=d={policy.black_min_seconds:g}:pix_th={policy.black_pixel_threshold:g}"
        f":pic_th={policy.black_picture_ratio:g},"
        f"freezedetect=n={policy.freeze_noise_db:g}dB:d={policy.freeze_min_seconds:g}"
    )


def parse_detections(log: str, *, stream_end_s: float | None, frame_s: float | None) -> Detections:
    """Black and freeze segments from the detector pass's stderr, closed at ``stream_end_s``.

    ``frame_s`` is one frame's duration: a black segment ending within one frame of the end ran to
    the end (blackdetect stops at the last frame's pts) and is extended to ``stream_end_s``.
    """
    black: list[Segment] = []
    for match in _BLACK.finditer(log):
        start, end = float(match["start"]), float(match["end"])
        open_ended = False
        if stream_end_s is not None and end >= stream_end_s - (frame_s or 0.0) - _EPS:
            end, open_ended = max(end, stream_end_s), True
        black.append(_segment(start, end, open_ended))

    freeze: list[Segment] = []
    pending: float | None = None
    for match in _FREEZE.finditer(log):
        value = float(match["value"])
        if match["key"] == "start":
            pending = value
        elif pending is not None:
            freeze.append(_segment(pending, value, False))
            pending = None
    if pending is not None:
        # Only freeze_start was printed: the freeze lasted to the end of the stream.
        end = stream_end_s if stream_end_s is not None and stream_end_s > pending else pending
        freeze.append(_segment(pending, end, True))
    return Detections(black=black, freeze=freeze)


def freeze_beyond_black(freeze: list[Segment], black: list[Segment], min_seconds: float) -> list[Segment]:
    """Frozen stretches that black does not explain.

    Every black stretch is also a freeze (its frames are identical), so the parts of a freeze that
    lie inside black segments are reported once, as black. What is left of a freeze is kept only if
    it still lasts ``min_seconds`` (freezedetect's own ``d``); shorter remnants are edge effects.
    """
    spans = sorted((b.start_s, b.end_s) for b in black)
    kept: list[Segment] = []
    for seg in freeze:
        pieces = [(seg.start_s, seg.end_s)]
        for b_start, b_end in spans:
            next_pieces: list[tuple[float, float]] = []
            for start, end in pieces:
                if b_end <= start or b_start >= end:
                    next_pieces.append((start, end))
                    continue
                if b_start > start:
                    next_pieces.append((start, b_start))
                if b_end < end:
                    next_pieces.append((b_end, end))
            pieces = next_pieces
        for start, end in pieces:
            if end - start >= min_seconds - _EPS:
                kept.append(_segment(start, end, seg.open_ended and abs(end - seg.end_s) < _EPS))
    return kept


def total_seconds(segments: list[Segment]) -> float:
    """Summed duration of the segments, in seconds (rounded to milliseconds)."""
    return round(float(sum(s.duration_s for s in segments)), 3)


def parse_progress_frames(progress: str) -> int | None:
    """The decoded frame count from ``-progress`` output: the last ``frame=N`` line."""
    found = _FRAME.findall(progress)
    return int(found[-1]) if found else None


def error_lines(log: str, limit: int = 20) -> list[str]:
    """Lines logged at error level or worse (needs ``-v level+...``); at most ``limit`` of them."""
    # Context addresses ("[h264 @ 0x55...]") differ on every run and mean nothing to a reader.
    return [_ADDRESS.sub("", line.strip()) for line in log.splitlines() if _ERROR_LEVEL.search(line)][:limit]


def _segment(start: float, end: float, open_ended: bool) -> Segment:
    start, end = round(start, 6), round(end, 6)
    return Segment(start_s=start, end_s=end, duration_s=round(end - start, 6), open_ended=open_ended)

"""The output gate: ffprobe facts plus one black/freeze decode pass, judged against a policy.

Imports ``workers.video`` and the ``jobservice`` catalog, probe and reports; the run uses it.
"""

from workers.validation.checks import Expectation
from workers.validation.gate import validate_file, validate_streamed
from workers.video.detect import Detections, detector_filter, parse_detections

__all__ = [
    "Detections",
    "Expectation",
    "detector_filter",
    "parse_detections",
    "validate_file",
    "validate_streamed",
]

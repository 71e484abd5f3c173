"""Face finding for the reference talking head: OpenCV's Haar cascade, with a centred fallback.

The detector only has to place the face well enough to know where the eyes, mouth and jaw are;
the proportions below are those of the frontal-face cascade's boxes (eyes at ~40% of the box
height, the mouth at ~75-78%, the chin just below the box).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

CASCADE_FILE = "haarcascade_frontalface_default.xml"
DETECT_MAX_SIDE = 480  # detection runs on a copy at most this large: faster, and enough to find a face


@dataclass(frozen=True)
class FaceBox:
    """A face rectangle in output pixels and how it was found ("haar" or "fallback")."""

    x: float
    y: float
    w: float
    h: float
    detector: str

    def as_list(self) -> list[int]:
        """[x, y, w, h] rounded, for telemetry."""
        return [round(self.x), round(self.y), round(self.w), round(self.h)]


@dataclass(frozen=True)
class FaceLayout:
    """Where the animated features are, in output pixels, derived from a face box."""

    box: FaceBox
    mouth: tuple[float, float]  # centre of the lips' meeting line
    mouth_width: float
    eyes: tuple[tuple[float, float], tuple[float, float]]
    eye_radii: tuple[float, float]  # (horizontal, vertical)
    chin_y: float
    pivot: tuple[float, float]  # the neck point the head turns around

    @classmethod
    def from_box(cls, box: FaceBox, rgb: np.ndarray | None = None) -> FaceLayout:
        """Typical frontal-face proportions relative to a Haar box; the mouth line is refined on
        ``rgb`` (the portrait, [H, W, 3] uint8) when given."""
        cx = box.x + box.w / 2
        eye_y = box.y + 0.41 * box.h
        mouth_y = box.y + 0.76 * box.h
        if rgb is not None:
            mouth_y = find_lip_line(rgb, cx, box) or mouth_y
        return cls(
            box=box,
            mouth=(cx, mouth_y),
            mouth_width=0.30 * box.w,
            eyes=((box.x + 0.34 * box.w, eye_y), (box.x + 0.66 * box.w, eye_y)),
            eye_radii=(0.095 * box.w, 0.055 * box.w),
            chin_y=box.y + 1.0 * box.h,
            pivot=(cx, box.y + 1.15 * box.h),
        )


class FaceDetector:
    """The frontal-face Haar cascade, loaded once per worker process."""

    def __init__(self, cascade_path: Path | None = None) -> None:
        path = cascade_path or Path(cv2.data.haarcascades) / CASCADE_FILE  # type: ignore[attr-defined]
        self.classifier = cv2.CascadeClassifier(str(path))
        if self.classifier.empty():
            raise RuntimeError(f"could not load the Haar cascade {path}")

    def detect(self, rgb: np.ndarray) -> FaceBox | None:
        """The largest frontal face in an [H, W, 3] uint8 RGB image, or None."""
        height, width = rgb.shape[:2]
        scale = min(1.0, DETECT_MAX_SIDE / max(height, width))
        gray = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
        if scale < 1.0:
            size = (max(1, round(width * scale)), max(1, round(height * scale)))
            gray = cv2.resize(gray, size, interpolation=cv2.INTER_AREA)
        # Equalising evens out lighting so the cascade's light/dark features respond.
        gray = cv2.equalizeHist(gray)
        smallest = max(24, int(0.12 * min(gray.shape[:2])))
        faces = self.classifier.detectMultiScale(
            gray, scaleFactor=1.1, minNeighbors=5, minSize=(smallest, smallest)
        )
        if len(faces) == 0:
            return None
        x, y, w, h = max(faces, key=lambda f: int(f[2]) * int(f[3]))
        return FaceBox(float(x) / scale, float(y) / scale, float(w) / scale, float(h) / scale, "haar")


def fallback_box(width: int, height: int) -> FaceBox:
    """Where a face usually is in a head-and-shoulders portrait: centred, in the upper half."""
    side = 0.45 * min(width, height)
    return FaceBox(width / 2 - side / 2, 0.42 * height - side / 2, side, side, "fallback")


def find_lip_line(rgb: np.ndarray, cx: float, box: FaceBox) -> float | None:
    """The row where the lips meet: the darkest row across the mouth's centre, if it stands out.

    Faces differ in where the mouth sits in the detector's box; the line between the lips is
    reliably the darkest horizontal stretch of the lower face.
    """
    height, width = rgb.shape[:2]
    y0, y1 = int(box.y + 0.64 * box.h), int(box.y + 0.88 * box.h)
    x0, x1 = int(cx - 0.1 * box.w), int(cx + 0.1 * box.w) + 1
    y0, y1, x0, x1 = max(0, y0), min(height, y1), max(0, x0), min(width, x1)
    if y1 - y0 < 5 or x1 - x0 < 3:
        return None
    luma = rgb[y0:y1, x0:x1].astype(np.float32) @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
    rows = np.convolve(luma.mean(axis=1), np.ones(3) / 3.0, mode="same")[1:-1]
    darkest = int(np.argmin(rows))
    # Only trust a clear dark line; a beard or shadow-free drawing keeps the typical position.
    if float(np.median(rows) - rows[darkest]) < 12.0:
        return None
    return float(y0 + 1 + darkest)

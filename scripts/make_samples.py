"""Regenerate the sample inputs of the reference talking head: a drawn portrait and a speech clip.

    .venv/bin/python scripts/make_samples.py [--out samples]

``portrait.png`` is drawn with PIL (no randomness), so it is identical on every run; it is tuned
so that OpenCV's frontal-face Haar cascade detects it. ``speech.wav`` is English speech from
espeak-ng (16 kHz mono, 16-bit) with a pause in the middle, so silence handling is exercised;
it is reproducible for a given espeak-ng version.
"""

from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
import wave
from pathlib import Path

from PIL import Image, ImageDraw, ImageFilter

WIDTH, HEIGHT = 512, 640
SAMPLE_RATE = 16000
SENTENCES = (
    "Hello! This is the reference talking head.",
    "After a short pause, its lips follow my voice.",
)
PAUSE_S = 0.9

SKIN = (226, 182, 150)
SKIN_SHADE = (196, 146, 116)
HAIR = (58, 38, 28)
SHIRT = (52, 84, 130)


def _ellipse(draw: ImageDraw.ImageDraw, cx: float, cy: float, rx: float, ry: float, fill: tuple) -> None:
    draw.ellipse((cx - rx, cy - ry, cx + rx, cy + ry), fill=fill)


def draw_portrait() -> Image.Image:
    """A frontal head-and-shoulders portrait, drawn with soft shading so the face reads as one."""
    img = Image.new("RGB", (WIDTH, HEIGHT))
    draw = ImageDraw.Draw(img)
    # Background: a vertical gradient, as from a studio backdrop.
    for y in range(HEIGHT):
        shade = int(168 - 40 * y / HEIGHT)
        draw.line([(0, y), (WIDTH, y)], fill=(shade - 20, shade, shade + 14))

    cx, cy = WIDTH / 2, 290.0  # face centre
    # Shoulders and neck.
    draw.ellipse((40, 500, 472, 800), fill=SHIRT)
    draw.rectangle((cx - 48, 380, cx + 48, 560), fill=SKIN_SHADE)
    draw.polygon([(cx - 60, 510), (cx, 580), (cx + 60, 510)], fill=SKIN)
    # Hair behind the head, then the face oval and ears.
    _ellipse(draw, cx, cy - 40, 150, 170, HAIR)
    _ellipse(draw, cx - 118, cy + 10, 20, 34, SKIN_SHADE)
    _ellipse(draw, cx + 118, cy + 10, 20, 34, SKIN_SHADE)
    _ellipse(draw, cx, cy + 10, 118, 150, SKIN)
    # Fringe: the hairline covers the top of the forehead.
    draw.chord((cx - 124, cy - 178, cx + 124, cy - 28), 180, 360, fill=HAIR)

    # Brows, eyes (white, iris, pupil, highlight) and upper lids.
    for side in (-1, 1):
        ex, ey = cx + side * 46, cy - 6
        draw.line([(ex - 30, ey - 30), (ex, ey - 38), (ex + 30, ey - 30)], fill=HAIR, width=9, joint="curve")
        _ellipse(draw, ex, ey + 4, 30, 22, SKIN_SHADE)  # eye socket shadow
        _ellipse(draw, ex, ey, 24, 12, (246, 244, 240))
        _ellipse(draw, ex, ey, 11, 11, (92, 62, 40))
        _ellipse(draw, ex, ey, 5, 5, (18, 12, 10))
        _ellipse(draw, ex + 4, ey - 4, 2, 2, (255, 255, 255))
        draw.arc((ex - 25, ey - 13, ex + 25, ey + 13), 190, 350, fill=(60, 36, 30), width=3)

    # Nose: a shaded bridge and nostrils.
    draw.polygon(
        [(cx - 6, cy + 4), (cx - 20, cy + 58), (cx + 20, cy + 58), (cx + 6, cy + 4)], fill=SKIN_SHADE
    )
    _ellipse(draw, cx, cy + 52, 16, 10, SKIN)
    _ellipse(draw, cx - 10, cy + 60, 5, 3, (120, 76, 64))
    _ellipse(draw, cx + 10, cy + 60, 5, 3, (120, 76, 64))
    # Lips: upper and lower, with the dark line where they meet.
    my = cy + 98
    draw.chord((cx - 36, my - 12, cx + 36, my + 8), 180, 360, fill=(170, 84, 84))
    draw.chord((cx - 32, my - 10, cx + 32, my + 16), 0, 180, fill=(186, 96, 94))
    draw.line([(cx - 36, my - 1), (cx + 36, my - 1)], fill=(104, 44, 46), width=3)

    # A light blur turns the flat drawing into soft shading (and keeps the PNG small).
    return img.filter(ImageFilter.GaussianBlur(1.6))


def speech_wav() -> bytes:
    """English speech from espeak-ng with a pause, as 16 kHz mono 16-bit WAV bytes."""
    espeak = shutil.which("espeak-ng")
    ffmpeg = shutil.which("ffmpeg")
    if espeak is None or ffmpeg is None:
        sys.exit("espeak-ng and ffmpeg are needed to make speech.wav")
    pcm = bytearray()
    for i, sentence in enumerate(SENTENCES):
        if i:
            pcm += b"\x00\x00" * int(PAUSE_S * SAMPLE_RATE)
        raw = subprocess.run(
            [espeak, "-v", "en-us", "-s", "160", "--stdout", sentence], check=True, capture_output=True
        )
        # espeak-ng speaks at 22.05 kHz; ffmpeg resamples to 16 kHz mono s16le.
        pcm += subprocess.run(
            [
                ffmpeg,
                "-v",
                "error",
                "-i",
                "pipe:0",
                "-ac",
                "1",
                "-ar",
                str(SAMPLE_RATE),
                "-f",
                "s16le",
                "pipe:1",
            ],
            input=raw.stdout,
            check=True,
            capture_output=True,
        ).stdout
    buf = io.BytesIO()
    with wave.open(buf, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(SAMPLE_RATE)
        out.writeframes(bytes(pcm))
    return buf.getvalue()


def main() -> None:
    """Write ``portrait.png`` and ``speech.wav`` into the output folder."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "samples")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    draw_portrait().save(args.out / "portrait.png", optimize=True)
    (args.out / "speech.wav").write_bytes(speech_wav())
    for name in ("portrait.png", "speech.wav"):
        print(f"{args.out / name}: {(args.out / name).stat().st_size} bytes")


if __name__ == "__main__":
    main()

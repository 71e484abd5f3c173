"""Stand-in for the one ``librosa`` call jobservice's FlashTalk resident makes, which a real
checkout's environment provides (SoulX-FlashTalk's requirements.txt):
``librosa.load(path, sr=16000, mono=True)`` -> (float32 samples in -1..1, sr). Decoded by ffmpeg.
"""

import os
import subprocess

import numpy as np


def load(
    path: str | os.PathLike[str],
    *,
    sr: int = 22050,
    mono: bool = True,
    offset: float = 0.0,
    duration: float | None = None,
) -> tuple[np.ndarray, int]:
    """Decode ``path`` to float32 PCM at ``sr`` Hz (one channel when ``mono``)."""
    cmd = ["ffmpeg", "-v", "error", "-i", str(path), "-f", "f32le", "-ar", str(sr)]
    cmd += ["-ac", "1"] if mono else []
    raw = subprocess.run([*cmd, "-"], capture_output=True, check=True).stdout
    return np.frombuffer(raw, dtype=np.float32).copy(), sr

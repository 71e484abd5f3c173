"""Audio for the reference talking head: decoding with ffmpeg and a speech loudness envelope.

The envelope is what drives the mouth: per video frame, the energy of the speech band
(300-3400 Hz, where voiced speech carries most of its energy) from a short-time Fourier
transform on the worker's device, in dB, normalised robustly against the surrounding audio (its
quiet floor and loud peaks), so the mouth reaches full opening on loud syllables whatever the
recording level, and stays shut in silence.
"""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import numpy as np
import torch

from workers.adapters.base import AdapterError
from workers.video.audio_cap import FALLBACK_MAX_AUDIO_S

SAMPLE_RATE = 16000
N_FFT = 512
WIN_LENGTH = 400  # 25 ms
HOP = 160  # 10 ms
SPEECH_BAND_HZ = (300.0, 3400.0)
SILENCE_DB = -55.0  # mean-square level (dBFS) below which there is nothing to say
MIN_DYNAMIC_DB = 15.0  # floor-to-peak range used when the audio around is uniformly loud or quiet
CONTEXT_S = 4.0  # audio either side of a chunk that sets its normalisation
DECODE_TIMEOUT_S = 120.0
MIN_DURATION_S = 0.1


def decode_audio(
    path: Path, ffmpeg: str = "ffmpeg", *, max_seconds: float = FALLBACK_MAX_AUDIO_S
) -> np.ndarray:
    """Decode any audio ffmpeg reads to 16 kHz mono float32 samples in [-1, 1], at most ``max_seconds``
    of it (``workers.video.audio_cap``: a header that lies about the length cannot make it decode hours).

    Raises AdapterError("invalid_audio") when the file is not audio or holds (almost) nothing.
    """
    argv = [ffmpeg, "-nostdin", "-v", "error", "-i", str(path), "-vn", "-ac", "1", "-ar", str(SAMPLE_RATE)]
    argv += ["-t", f"{max_seconds:.3f}", "-f", "f32le", "pipe:1"]
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=DECODE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise AdapterError(
            "invalid_audio",
            f"Decoding the audio took longer than {DECODE_TIMEOUT_S:.0f} s; is it a valid audio file?",
        ) from exc
    if proc.returncode != 0:
        lines = proc.stderr.decode(errors="replace").strip().splitlines()
        reason = lines[-1] if lines else f"ffmpeg exited with status {proc.returncode}"
        raise AdapterError("invalid_audio", f"The audio file could not be decoded ({reason}).")
    samples = np.frombuffer(proc.stdout, dtype="<f4")
    if samples.size < MIN_DURATION_S * SAMPLE_RATE:
        raise AdapterError(
            "invalid_audio",
            f"The audio holds no sound or is shorter than {MIN_DURATION_S:g} s; nothing to animate.",
        )
    return np.nan_to_num(samples, nan=0.0, posinf=1.0, neginf=-1.0).astype(np.float32)


class SpeechEnvelope:
    """Per-video-frame mouth openness in [0, 1] from speech-band energy, computed on a device."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.window = torch.hann_window(WIN_LENGTH, device=device)
        freqs = torch.fft.rfftfreq(N_FFT, d=1.0 / SAMPLE_RATE)
        band = (freqs >= SPEECH_BAND_HZ[0]) & (freqs <= SPEECH_BAND_HZ[1])
        self.band = band.to(device=device, dtype=torch.float32)
        # Parseval: twice the one-sided spectral energy over (n_fft * sum(w^2)) is the mean
        # square of the frame, so a full-scale sine in the band reads about -3 dBFS.
        self.scale = 2.0 / (N_FFT * float(self.window.pow(2).sum()))

    def band_power(self, samples: torch.Tensor) -> torch.Tensor:
        """Mean-square power of the speech band, one value per 10 ms hop (centred frames)."""
        if samples.numel() < N_FFT:
            samples = torch.nn.functional.pad(samples, (0, N_FFT - samples.numel()))
        spec = torch.stft(
            samples,
            n_fft=N_FFT,
            hop_length=HOP,
            win_length=WIN_LENGTH,
            window=self.window,
            center=True,
            return_complex=True,
        )
        power = spec.real.pow(2) + spec.imag.pow(2)  # [freq, hops]
        return (self.band @ power) * self.scale

    def openness(self, audio: torch.Tensor, first_frame: int, frames: int, fps: float) -> torch.Tensor:
        """Raw openness of video frames [first_frame, first_frame + frames), before smoothing.

        Works on this chunk's audio window plus CONTEXT_S either side, which also sets the
        normalisation: the window's 10th percentile level is the floor, its 95th the peak.
        """
        t0, t1 = first_frame / fps, (first_frame + frames) / fps
        start = max(0, int((t0 - CONTEXT_S) * SAMPLE_RATE))
        stop = min(audio.numel(), int(math.ceil((t1 + CONTEXT_S) * SAMPLE_RATE)))
        power = self.band_power(audio[start:stop]) if stop > start else torch.zeros(1, device=self.device)
        level_db = 10.0 * torch.log10(power + 1e-10)

        floor = torch.quantile(level_db, 0.10).clamp_min(SILENCE_DB)
        peak = torch.maximum(torch.quantile(level_db, 0.95), floor + MIN_DYNAMIC_DB)

        # Average the power over each video frame's interval (hop i is centred at start + i * HOP).
        edges = torch.arange(frames + 1, device=self.device, dtype=torch.float64) + first_frame
        hop_edges = ((edges / fps * SAMPLE_RATE - start) / HOP).ceil().long().clamp(0, power.numel())
        lo, hi = hop_edges[:-1], torch.maximum(hop_edges[1:], hop_edges[:-1] + 1).clamp_max(power.numel())
        lo = torch.minimum(lo, hi - 1).clamp_min(0)
        cumulative = torch.cat([torch.zeros(1, device=self.device), power.cumsum(0)])
        frame_power = (cumulative[hi] - cumulative[lo]) / (hi - lo).clamp_min(1)
        frame_db = 10.0 * torch.log10(frame_power + 1e-10)

        # A few dB above the floor before the lips part, so breaths and room noise stay closed.
        raw = ((frame_db - floor - 3.0) / (peak - floor - 3.0)).clamp(0.0, 1.0)
        return torch.where(frame_db > SILENCE_DB, raw, torch.zeros_like(raw))


def smooth_attack_release(
    values: list[float], start: float, fps: float, attack_s: float, release_s: float
) -> list[float]:
    """One-pole follower: rises with time constant ``attack_s``, falls with ``release_s``.

    ``start`` is the follower's state before the first value (carried over from the previous
    chunk), so the envelope is continuous across chunk boundaries.
    """
    up = 1.0 - math.exp(-1.0 / (fps * attack_s))
    down = 1.0 - math.exp(-1.0 / (fps * release_s))
    out, state = [], start
    for v in values:
        state += (up if v > state else down) * (v - state)
        out.append(state)
    return out

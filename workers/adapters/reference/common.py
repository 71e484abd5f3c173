"""Small torch helpers shared by the built-in reference models.

Nothing here runs torch at import time: workers fork after importing adapter modules, and a
torch op in the parent process leaves a thread pool behind that hangs the children.
"""

from __future__ import annotations

import time

import numpy as np
import torch


def resolve_device(torch_device: str) -> torch.device:
    """The torch device named by a worker's ``DeviceContext.torch_device`` ("cpu", "cuda:0", "npu:0").

    ``npu`` needs the ``torch_npu`` plug-in, which registers the device type when imported.
    """
    if torch_device.startswith("npu"):
        import torch_npu  # noqa: F401 - registers the "npu" device

    return torch.device(torch_device)


def synchronize(device: torch.device) -> None:
    """Wait for queued kernels, so wall-clock timings of accelerator work are honest."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "npu":
        torch.npu.synchronize(device)  # type: ignore[attr-defined]


class Stopwatch:
    """Milliseconds since construction or the last ``lap``, synchronising the device first."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._t = time.perf_counter()

    def restart(self) -> None:
        """Start the next lap now, discarding the time since the last one."""
        synchronize(self.device)
        self._t = time.perf_counter()

    def lap(self) -> float:
        """Milliseconds since the previous lap (device work included)."""
        synchronize(self.device)
        now = time.perf_counter()
        ms = (now - self._t) * 1000.0
        self._t = now
        return ms


def to_uint8_frames(rgb: torch.Tensor) -> np.ndarray:
    """[N, 3, H, W] floats in 0..1 on any device -> [N, H, W, 3] uint8 RGB on the host.

    Quantisation happens on the device so only bytes cross to the host.
    """
    # +0.5 then truncation rounds the (non-negative) values; in place to spare memory passes.
    as_bytes = (rgb * 255.0).add_(0.5).clamp_(0.0, 255.0).to(torch.uint8)
    return as_bytes.permute(0, 2, 3, 1).contiguous().cpu().numpy()

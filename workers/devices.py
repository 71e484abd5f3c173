"""Device helpers that only a worker needs: per-run peak memory of the process and its cards."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from jobservice.fleet.placement import DeviceContext, inventory, parse_devices, pinning_env

__all__ = ["inventory", "memory_report", "parse_devices", "pinning_env", "reset_peak_memory"]

PROC_SELF = Path("/proc/self")


def _device_module(device: DeviceContext) -> Any:
    """torch.cuda / torch.npu when torch already runs in this process on that kind of card."""
    torch = sys.modules.get("torch")
    if torch is None or device.kind == "cpu":
        return None
    module = torch.cuda if device.kind == "cuda" else getattr(torch, "npu", None)
    try:
        return module if module is not None and module.is_available() else None
    except Exception:  # noqa: BLE001 - telemetry must never fail a job
        return None


def reset_peak_memory(device: DeviceContext) -> None:
    """Start a run's peak-memory window: a resident worker's lifetime peak says nothing per job."""
    try:
        # Writing 5 to clear_refs resets VmHWM (the peak RSS) of this process (Linux >= 4.0).
        (PROC_SELF / "clear_refs").write_text("5")
    except OSError:
        pass
    module = _device_module(device)
    if module is not None:
        try:
            module.reset_peak_memory_stats()
        except Exception:  # noqa: BLE001, S110 - telemetry must never fail a job
            pass


def _peak_rss_mb() -> float:
    try:
        for line in (PROC_SELF / "status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    import resource  # no /proc: the lifetime peak is the best there is

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def memory_report(device: DeviceContext) -> dict[str, float]:
    """Peak memory since ``reset_peak_memory``: host RSS always, card memory when torch runs there."""
    report = {"peak_rss_mb": _peak_rss_mb()}
    module = _device_module(device)
    if module is not None:
        try:
            report["peak_mb"] = round(module.max_memory_allocated() / 2**20, 1)
        except Exception:  # noqa: BLE001, S110 - telemetry must never fail a job
            pass
    return report

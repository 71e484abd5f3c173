"""Device helpers that only a worker needs (peak memory of the pinned cards)."""

from __future__ import annotations

import sys

from jobservice.placement import DeviceContext, inventory, parse_devices, pinning_env

__all__ = ["inventory", "memory_report", "parse_devices", "pinning_env"]


def memory_report(device: DeviceContext) -> dict[str, float]:
    """Peak memory of this process: host RSS always, device memory when torch already runs there."""
    import resource

    report = {"peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    torch = sys.modules.get("torch")
    if torch is None or device.kind == "cpu":
        return report
    try:
        module = torch.cuda if device.kind == "cuda" else getattr(torch, "npu", None)
        if module is not None and module.is_available():
            report["peak_mb"] = round(module.max_memory_allocated() / 2**20, 1)
    except Exception:  # noqa: BLE001, S110 - telemetry must never fail a job
        pass
    return report

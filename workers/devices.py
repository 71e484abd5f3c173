"""Device helpers that only a worker needs: per-run peak memory of the process and its cards, and
what the cards' own tools say of them (``workers.card_health``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from jobservice.fleet.placement import DeviceContext, inventory, parse_devices, pinning_env
from workers.card_health import CardHealth

__all__ = [
    "card_placement",
    "inventory",
    "memory_report",
    "parse_devices",
    "pinning_env",
    "reset_peak_memory",
]

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


def memory_report(device: DeviceContext, cards: list[CardHealth] | None = None) -> dict[str, float]:
    """Peak memory since ``reset_peak_memory``: host RSS always, card memory when torch runs there;
    with ``cards`` (read by NVML or npu-smi), the memory in use on the group's cards now, by every
    process (``card_used_mb``), and their total (``card_total_mb``)."""
    report = {"peak_rss_mb": _peak_rss_mb()}
    if cards and all(c.memory_used_mb is not None and c.memory_total_mb is not None for c in cards):
        report["card_used_mb"] = round(sum(c.memory_used_mb or 0.0 for c in cards), 1)
        report["card_total_mb"] = round(sum(c.memory_total_mb or 0.0 for c in cards), 1)
    module = _device_module(device)
    if module is not None:
        try:
            report["peak_mb"] = round(module.max_memory_allocated() / 2**20, 1)
        except Exception:  # noqa: BLE001, S110 - telemetry must never fail a job
            pass
    return report


def card_placement(cards: list[CardHealth] | None) -> dict[str, str]:
    """What a RunReport's ``device_placement`` says of the cards' health: ``ok``, or each unhealthy
    card with its problems; nothing when the cards could not be read."""
    if not cards:
        return {}
    sick = [f"{c.kind}:{c.index}: {' '.join(c.problems)}" for c in cards if not c.healthy]
    names = sorted({c.name for c in cards if c.name})
    return {
        "card_health": "; ".join(sick) if sick else "ok",
        "card_health_source": cards[0].source,
        **({"card_name": ", ".join(names)} if names else {}),
    }

"""Device memory: the budget check before a model loads, and recognising out-of-memory failures.

The budget check compares the free memory of the worker's visible cards with what the model
declares (``ModelSpec.min_memory_gb``) and fails fast with ``insufficient_device_memory`` instead
of running out mid-job. Free memory comes from torch (``torch.cuda.mem_get_info`` /
``torch_npu.npu.mem_get_info``) for models loaded in this process, and from ``nvidia-smi`` /
``npu-smi`` for models run by a child process, so the worker never creates a device context
(hundreds of MB on every card) just to look. Unknown memory (the CPU, no tool) skips the check,
and the report says so.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jobservice.fleet.placement import DeviceContext, inventory
from workers.adapters.base import AdapterError

# What CUDA, torch_npu/CANN and the allocators print when a card runs out of memory.
_OOM = re.compile(
    r"out of memory|OutOfMemoryError|ACL_ERROR_RT_MEMORY_ALLOCATION|CUBLAS_STATUS_ALLOC_FAILED"
    r"|cudaErrorMemoryAllocation|NPU memory allocation failed|DRV_ERROR_OUT_OF_MEMORY",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class CardMemory:
    """Free and total memory of one card, by its physical index."""

    kind: str
    index: int
    free_mb: float
    total_mb: float | None = None
    source: str = ""


MemoryReader = Callable[[DeviceContext], list[CardMemory] | None]


def is_out_of_memory(text: str) -> bool:
    """Whether a log or error message says a device ran out of memory."""
    return bool(_OOM.search(text or ""))


def read_with_smi(device: DeviceContext) -> list[CardMemory] | None:
    """Free memory of the group's cards from nvidia-smi / npu-smi (no device context); None if unknown."""
    if device.kind == "cpu":
        return None
    cards = [
        CardMemory(device.kind, c["index"], float(c["free_mb"]), c.get("total_mb"), f"{device.kind}-smi")
        for c in inventory()["cards"]
        if c["kind"] == device.kind and c["index"] in device.indices and "free_mb" in c
    ]
    return cards if len(cards) == len(device.indices) else None


def read_with_torch(device: DeviceContext) -> list[CardMemory] | None:
    """Free memory from torch in this process (cards renumbered from 0 after pinning); None if unknown."""
    if device.kind == "cpu":
        return None
    try:
        if device.kind == "cuda":
            import torch

            module: Any = torch.cuda
        else:
            import torch_npu

            module = torch_npu.npu
        if not module.is_available():
            return None
        cards = []
        for local, physical in enumerate(device.indices):
            free, total = module.mem_get_info(local)
            cards.append(CardMemory(device.kind, physical, free / 2**20, total / 2**20, "torch"))
        return cards
    except Exception:  # noqa: BLE001 - unknown memory skips the check; it never fails a job
        return None


def read_free_memory(device: DeviceContext, *, in_process: bool) -> list[CardMemory] | None:
    """Torch first for in-process models, the vendor tool as the fallback (and only source otherwise)."""
    if in_process and ("torch" in sys.modules or device.kind != "cpu"):
        found = read_with_torch(device)
        if found:
            return found
    return read_with_smi(device)


def check_budget(
    *,
    model_id: str,
    need_gb: float | None,
    scope: str,
    device: DeviceContext,
    reader: MemoryReader,
) -> dict[str, Any]:
    """Raise ``insufficient_device_memory`` when the cards cannot hold the model; returns what was found.

    ``aggregate``: the group's free memory together must reach ``need_gb`` (a model sharded over the
    cards, as OmniRT counts it); ``per_card``: every card must have ``need_gb`` free.
    """
    if not need_gb or device.kind == "cpu":
        return {"checked": False, "reason": "no requirement" if not need_gb else "cpu"}
    cards = reader(device)
    if not cards:
        return {"checked": False, "reason": "free memory unknown (no torch device, nvidia-smi or npu-smi)"}
    free_gb = [c.free_mb / 1024 for c in cards]
    have = min(free_gb) if scope == "per_card" else sum(free_gb)
    free_by_card = {f"{c.kind}:{c.index}": round(c.free_mb / 1024, 2) for c in cards}
    found = {
        "checked": True,
        "need_gb": need_gb,
        "scope": scope,
        "free_gb": free_by_card,
        "source": cards[0].source,
    }
    if have + 1e-9 < need_gb:
        per_card = ", ".join(f"{name} {gb:.1f} GB" for name, gb in free_by_card.items())
        wanted = f"{need_gb:g} GB per card" if scope == "per_card" else f"{need_gb:g} GB in total"
        raise AdapterError(
            "insufficient_device_memory",
            f"{model_id} needs {wanted} on {device.label} but only {have:.1f} GB is free ({per_card}); "
            "free the cards or give the worker more of them.",
        )
    return found


def release_cached_memory(device: DeviceContext) -> None:
    """After an out-of-memory error in this process: drop the allocator's cache so the card is usable."""
    try:
        if device.kind == "cuda" and "torch" in sys.modules:
            import torch

            torch.cuda.empty_cache()
        elif device.kind == "npu" and "torch_npu" in sys.modules:
            import torch_npu

            torch_npu.npu.empty_cache()
    except Exception:  # noqa: BLE001, S110 - best effort; the job is failing anyway
        pass

"""Card health: what the cards of one card group say of their memory and health.

NVIDIA cards are read through NVML (``nvidia-ml-py``'s ``pynvml``, imported on the first read, so a
worker without it still runs): memory, volatile uncorrected ECC errors, pages pending retirement or
row remapping that failed or waits for a reset (where the card reports them), and the critical XID
events that arrived since the last read. A card NVML cannot reach at all is unhealthy. Without
NVML, ``nvidia-smi`` gives the same facts but the XID events. Ascend cards are read from the Health
column of ``npu-smi info`` (OK is healthy; Warning, Alarm and Critical are not).

NVML counts cards the way ``nvidia-smi`` does and ignores ``CUDA_VISIBLE_DEVICES``: the indices are
the group's physical ones (``cuda:2,3`` reads cards 2 and 3), so a worker pinned to its cards still
reads the right ones. This module only reads; what a group with an unhealthy card does is the
fleet's decision.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jobservice.fleet.placement import DeviceContext, npu_smi_text, nvidia_smi_rows, parse_npu_smi

log = logging.getLogger(__name__)

# XIDs that an application causes, not the card (NVIDIA's Kubernetes device plugin skips the same):
# 13 graphics engine exception, 31 GPU memory page fault, 43 GPU stopped processing, 45 preemptive
# cleanup, 68 video decoder exception, 109 context switch timeout.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
# Fields of the nvidia-smi fallback, and the ones every driver knows (asked when the first fail).
SMI_FIELDS = (
    "index",
    "name",
    "memory.total",
    "memory.used",
    "ecc.errors.uncorrected.volatile.total",
    "retired_pages.pending",
    "remapped_rows.pending",
    "remapped_rows.failure",
)
SMI_BASIC_FIELDS = SMI_FIELDS[:4]
_EVENTS_DRAINED_PER_READ = 1000  # a card spewing events cannot hold a read forever


@dataclass(frozen=True)
class CardHealth:
    """One card as its vendor's tool reads it."""

    kind: str  # "cuda" | "npu"
    index: int  # the physical index, as in the group's device spec (npu:4-7 -> 4..7)
    name: str | None
    memory_total_mb: float | None
    memory_used_mb: float | None
    healthy: bool
    problems: tuple[str, ...]  # why not healthy, each a short human sentence
    source: str  # "nvml" | "nvidia-smi" | "npu-smi"


class CardMonitor:
    """Reads the cards of one group; keeps NVML initialised and its XID event set between reads."""

    def __init__(
        self,
        device: DeviceContext,
        *,
        nvml: Any | None = None,
        npu_smi: Callable[[], str] | None = None,
    ) -> None:
        self.device = device
        self._nvml: Any | None = nvml  # the pynvml module (or a stand-in); imported on the first read
        self._npu_smi: Callable[[], str | None] = npu_smi or npu_smi_text
        self._started = False  # nvmlInit succeeded
        self._no_nvml = False  # NVML cannot be used here: nvidia-smi is asked instead
        self._events: Any | None = None  # the XID event set
        self._registered: set[int] = set()  # cards whose XID events come into the set
        self._events_unsupported: set[int] = set()

    # --- reading --------------------------------------------------------------------------------
    def read(self) -> list[CardHealth] | None:
        """Each of the group's cards, in the group's order; None: nothing to read (a CPU group, or
        neither NVML nor nvidia-smi / npu-smi here)."""
        if self.device.kind == "npu":
            return self._read_npu()
        if self.device.kind != "cuda":
            return None
        nvml = self._start_nvml()
        if nvml is None:
            return self._read_nvidia_smi()
        cards = [self._read_nvml_card(nvml, index) for index in self.device.indices]
        xids = self._drain_xids(nvml)
        return [_with_problems(card, xids.get(card.index, [])) for card in cards]

    def close(self) -> None:
        """Free the event set and shut NVML down (a later read starts it again)."""
        nvml = self._nvml
        if nvml is None or not self._started:
            return
        if self._events is not None:
            try:
                nvml.nvmlEventSetFree(self._events)
            except nvml.NVMLError:
                log.debug("freeing NVML's event set failed", exc_info=True)
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            log.debug("nvmlShutdown failed", exc_info=True)
        self._started, self._events = False, None
        self._registered.clear()
        self._events_unsupported.clear()

    # --- NVML -----------------------------------------------------------------------------------
    def _start_nvml(self) -> Any | None:
        if self._started:
            return self._nvml
        if self._no_nvml:
            return None
        try:
            nvml = self._nvml if self._nvml is not None else importlib.import_module("pynvml")
        except ImportError:
            self._no_nvml = True
            log.info("card health: pynvml (nvidia-ml-py) is not installed; asking nvidia-smi")
            return None
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as error:  # no driver, no library: not a card's fault
            self._no_nvml = True
            log.info("card health: NVML did not start (%s); asking nvidia-smi", error)
            return None
        self._nvml, self._started = nvml, True
        try:
            self._events = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as error:
            log.info("card health: no NVML event set (%s): XID events are not read", error)
        return nvml

    def _read_nvml_card(self, nvml: Any, index: int) -> CardHealth:
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except nvml.NVMLError as error:
            return CardHealth(
                "cuda", index, None, None, None, False, (f"NVML cannot reach it: {error}.",), "nvml"
            )
        self._register_xids(nvml, index, handle)
        problems: list[str] = []

        def ask(what: str, call: Callable[[], Any]) -> Any:
            """A query's answer; None when the card does not support it (not a health statement)."""
            try:
                return call()
            except (nvml.NVMLError_NotSupported, nvml.NVMLError_NoPermission):
                return None
            except nvml.NVMLError as error:
                problems.append(f"NVML could not read its {what}: {error}.")
                return None

        name = ask("name", lambda: nvml.nvmlDeviceGetName(handle))
        memory = ask("memory", lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        ecc = ask(
            "ECC errors",
            lambda: nvml.nvmlDeviceGetTotalEccErrors(
                handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
            ),
        )
        if ecc:
            problems.append(f"{int(ecc)} uncorrected ECC errors since the driver loaded.")
        pending = ask("retired pages", lambda: nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle))
        if pending == nvml.NVML_FEATURE_ENABLED:
            problems.append("Memory pages are pending retirement: the card needs a reset.")
        remapped = ask("row remapping", lambda: nvml.nvmlDeviceGetRemappedRows(handle))
        if remapped is not None:
            _corrected, _uncorrected, remap_pending, remap_failed = remapped
            if remap_failed:
                problems.append("Row remapping failed: the card's memory cannot be repaired.")
            elif remap_pending:
                problems.append("Memory rows are pending remapping: the card needs a reset.")
        return CardHealth(
            kind="cuda",
            index=index,
            name=name.decode() if isinstance(name, bytes) else name,
            memory_total_mb=None if memory is None else round(memory.total / 2**20, 1),
            memory_used_mb=None if memory is None else round(memory.used / 2**20, 1),
            healthy=not problems,
            problems=tuple(problems),
            source="nvml",
        )

    def _register_xids(self, nvml: Any, index: int, handle: Any) -> None:
        if self._events is None or index in self._registered or index in self._events_unsupported:
            return
        try:
            nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, self._events)
            self._registered.add(index)
        except nvml.NVMLError as error:  # e.g. not supported in a virtual machine
            self._events_unsupported.add(index)
            log.info("card health: cuda:%s gives no XID events (%s)", index, error)

    def _drain_xids(self, nvml: Any) -> dict[int, list[str]]:
        """The critical XID events that arrived since the last read, as problems by card."""
        found: dict[int, list[str]] = {}
        if self._events is None or not self._registered:
            return found
        wait = getattr(nvml, "nvmlEventSetWait_v2", None) or nvml.nvmlEventSetWait
        for _ in range(_EVENTS_DRAINED_PER_READ):
            try:
                event = wait(self._events, 0)
            except nvml.NVMLError_Timeout:
                break  # none left
            except nvml.NVMLError as error:
                log.warning("card health: reading XID events failed: %s", error)
                break
            xid = int(event.eventData)
            if event.eventType != nvml.nvmlEventTypeXidCriticalError or xid in APPLICATION_XIDS:
                continue
            try:
                cards = [int(nvml.nvmlDeviceGetIndex(event.device))]
            except nvml.NVMLError:
                cards = sorted(self._registered)  # one of them: each is suspect
            for index in cards:
                found.setdefault(index, []).append(f"Critical XID {xid} since the last read.")
        return found

    # --- without NVML: the vendors' tools -------------------------------------------------------
    def _read_nvidia_smi(self) -> list[CardHealth] | None:
        rows = nvidia_smi_rows(SMI_FIELDS)
        if rows is None:  # an older driver that lacks a field: memory alone
            rows = nvidia_smi_rows(SMI_BASIC_FIELDS)
        if rows is None:
            return None
        return cards_from_nvidia_smi(rows, self.device)

    def _read_npu(self) -> list[CardHealth] | None:
        text = self._npu_smi()
        if not text:
            return None
        return cards_from_npu_smi(text, self.device)


def cards_from_nvidia_smi(rows: list[dict[str, str]], device: DeviceContext) -> list[CardHealth]:
    """The group's cards from nvidia-smi's rows (``SMI_FIELDS`` or ``SMI_BASIC_FIELDS``); a card
    that nvidia-smi does not list is unhealthy."""
    by_index = {int(row["index"]): row for row in rows if row.get("index", "").isdigit()}
    cards = []
    for index in device.indices:
        row = by_index.get(index)
        if row is None:
            cards.append(
                CardHealth(
                    "cuda", index, None, None, None, False, ("nvidia-smi does not list it.",), "nvidia-smi"
                )
            )
            continue
        problems = []
        ecc = _number(row.get("ecc.errors.uncorrected.volatile.total"))
        if ecc:
            problems.append(f"{int(ecc)} uncorrected ECC errors since the driver loaded.")
        if _yes(row.get("retired_pages.pending")):
            problems.append("Memory pages are pending retirement: the card needs a reset.")
        if _yes(row.get("remapped_rows.failure")):
            problems.append("Row remapping failed: the card's memory cannot be repaired.")
        elif _yes(row.get("remapped_rows.pending")):
            problems.append("Memory rows are pending remapping: the card needs a reset.")
        cards.append(
            CardHealth(
                kind="cuda",
                index=index,
                name=row.get("name") or None,
                memory_total_mb=_number(row.get("memory.total")),
                memory_used_mb=_number(row.get("memory.used")),
                healthy=not problems,
                problems=tuple(problems),
                source="nvidia-smi",
            )
        )
    return cards


def cards_from_npu_smi(text: str, device: DeviceContext) -> list[CardHealth]:
    """The group's cards from ``npu-smi info`` (parsed by ``placement.parse_npu_smi``); a card that
    npu-smi does not list is unhealthy."""
    by_index = {card["index"]: card for card in parse_npu_smi(text)}
    cards = []
    for index in device.indices:
        card = by_index.get(index)
        if card is None:
            cards.append(
                CardHealth("npu", index, None, None, None, False, ("npu-smi does not list it.",), "npu-smi")
            )
            continue
        total = card.get("total_mb")
        used = None if total is None else round(total - card["free_mb"], 1)
        healthy = card["health"] == "OK"
        cards.append(
            CardHealth(
                kind="npu",
                index=index,
                name=card["name"],
                memory_total_mb=total,
                memory_used_mb=used,
                healthy=healthy,
                problems=() if healthy else (f"npu-smi reports its health as {card['health']}.",),
                source="npu-smi",
            )
        )
    return cards


def _with_problems(card: CardHealth, more: list[str]) -> CardHealth:
    if not more:
        return card
    problems = (*card.problems, *more)
    return CardHealth(
        card.kind,
        card.index,
        card.name,
        card.memory_total_mb,
        card.memory_used_mb,
        False,
        problems,
        card.source,
    )


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None


def _yes(text: str | None) -> bool:
    return (text or "").strip().lower() in ("yes", "1", "true", "enabled")

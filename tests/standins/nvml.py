"""STAND-IN for NVML as ``nvidia-ml-py``'s ``pynvml`` presents it: not NVML, no driver behind it.

It keeps pynvml's real names, error classes (``NVMLError`` and its ``NVMLError_<Name>`` subclasses,
with NVML's numeric codes and messages), constants and return shapes (memory in bytes as
``.total/.free/.used``; events as ``.device/.eventType/.eventData``), for the calls that
``workers.card_health`` makes. Cards are set up by the test; ``fail`` makes a call raise an NVML
error. ``tests/unit/test_card_health.py`` checks every name and code here against the real pynvml.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

# Constants, as pynvml defines them.
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
nvmlEventTypeSingleBitEccError = 0x0000000000000001
nvmlEventTypeDoubleBitEccError = 0x0000000000000002
nvmlEventTypeXidCriticalError = 0x0000000000000008

# NVML's return codes and pynvml's messages for them.
CODES = {
    "Uninitialized": (1, "Uninitialized"),
    "InvalidArgument": (2, "Invalid Argument"),
    "NotSupported": (3, "Not Supported"),
    "NoPermission": (4, "Insufficient Permissions"),
    "NotFound": (6, "Not Found"),
    "DriverNotLoaded": (9, "Driver Not Loaded"),
    "Timeout": (10, "Timeout"),
    "LibraryNotFound": (12, "NVML Shared Library Not Found"),
    "GpuIsLost": (15, "GPU is lost"),
    "ResetRequired": (16, "GPU requires restart"),
    "Unknown": (999, "Unknown Error"),
}


class NVMLError(Exception):
    """pynvml's base error: ``.value`` is NVML's return code; ``str()`` is pynvml's message."""

    value = 999

    def __init__(self, value: int | None = None) -> None:
        if value is not None:
            self.value = value
        super().__init__(self.value)

    def __str__(self) -> str:
        return next(
            (text for code, text in CODES.values() if code == self.value), f"Unknown Error {self.value}"
        )


def _error_class(name: str, code: int) -> type[NVMLError]:
    return type(f"NVMLError_{name}", (NVMLError,), {"value": code})


NVMLError_Uninitialized = _error_class("Uninitialized", 1)
NVMLError_InvalidArgument = _error_class("InvalidArgument", 2)
NVMLError_NotSupported = _error_class("NotSupported", 3)
NVMLError_NoPermission = _error_class("NoPermission", 4)
NVMLError_NotFound = _error_class("NotFound", 6)
NVMLError_DriverNotLoaded = _error_class("DriverNotLoaded", 9)
NVMLError_Timeout = _error_class("Timeout", 10)
NVMLError_LibraryNotFound = _error_class("LibraryNotFound", 12)
NVMLError_GpuIsLost = _error_class("GpuIsLost", 15)
NVMLError_ResetRequired = _error_class("ResetRequired", 16)
NVMLError_Unknown = _error_class("Unknown", 999)

# The calls workers.card_health makes (checked against pynvml by name).
FUNCTIONS = (
    "nvmlInit",
    "nvmlShutdown",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetIndex",
    "nvmlDeviceGetName",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceRegisterEvents",
    "nvmlEventSetCreate",
    "nvmlEventSetWait_v2",
    "nvmlEventSetWait",
    "nvmlEventSetFree",
)
ERRORS = tuple(f"NVMLError_{name}" for name in CODES)
CONSTANTS = (
    "NVML_FEATURE_DISABLED",
    "NVML_FEATURE_ENABLED",
    "NVML_MEMORY_ERROR_TYPE_CORRECTED",
    "NVML_MEMORY_ERROR_TYPE_UNCORRECTED",
    "NVML_VOLATILE_ECC",
    "NVML_AGGREGATE_ECC",
    "nvmlEventTypeSingleBitEccError",
    "nvmlEventTypeDoubleBitEccError",
    "nvmlEventTypeXidCriticalError",
)


@dataclass
class Card:
    """One card as the stand-in reports it; ``None`` for a query means the card does not support it."""

    name: str = "NVIDIA H100 80GB HBM3"
    total_mb: float = 81559.0
    used_mb: float = 512.0
    ecc_uncorrected: int | None = 0
    retired_pending: bool | None = None  # pre-Ampere cards
    remapped_rows: tuple[int, int, int, int] | None = (0, 0, 0, 0)  # corr, unc, pending, failure
    lost: bool = False  # every call on it raises GpuIsLost


@dataclass
class Memory:
    total: int
    free: int
    used: int


@dataclass
class EventData:
    device: Any
    eventType: int  # noqa: N815 - pynvml's field name
    eventData: int  # noqa: N815
    gpuInstanceId: int = 0  # noqa: N815
    computeInstanceId: int = 0  # noqa: N815


@dataclass
class Handle:
    index: int


@dataclass
class EventSet:
    registered: dict[int, int] = field(default_factory=dict)  # card index -> event type mask
    pending: deque[EventData] = field(default_factory=deque)
    freed: bool = False


class StandInNVML:
    """A pynvml-shaped object: pass it as ``CardMonitor(device, nvml=StandInNVML(...))``."""

    def __init__(self, cards: dict[int, Card] | None = None, *, init_error: type[NVMLError] | None = None):
        self.cards = cards if cards is not None else {0: Card()}
        self.init_error = init_error
        self.fail: dict[str, type[NVMLError]] = {}  # function name -> error it raises
        self.events_supported = True
        self.initialised = 0  # nvmlInit minus nvmlShutdown calls
        self.init_calls = 0
        self.sets: list[EventSet] = []
        for name in ("NVMLError", *ERRORS):
            setattr(self, name, globals()[name])
        for name in CONSTANTS:
            setattr(self, name, globals()[name])

    # --- the test's side ------------------------------------------------------------------------
    def xid(self, index: int, xid: int, *, event_type: int = nvmlEventTypeXidCriticalError) -> None:
        """The driver reports XID ``xid`` on card ``index`` (to every set registered for it)."""
        for events in self.sets:
            if not events.freed and events.registered.get(index, 0) & event_type:
                events.pending.append(EventData(Handle(index), event_type, xid))

    # --- pynvml's side --------------------------------------------------------------------------
    def _check(self, name: str, handle: Handle | None = None) -> Card | None:
        if name in self.fail:
            raise self.fail[name]()
        if name != "nvmlInit" and not self.initialised:
            raise NVMLError_Uninitialized()
        if handle is None:
            return None
        card = self.cards[handle.index]
        if card.lost:
            raise NVMLError_GpuIsLost()
        return card

    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's names
        self.init_calls += 1
        if self.init_error is not None:
            raise self.init_error()
        self._check("nvmlInit")
        self.initialised += 1

    def nvmlShutdown(self) -> None:  # noqa: N802
        self._check("nvmlShutdown")
        self.initialised -= 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Handle:  # noqa: N802
        self._check("nvmlDeviceGetHandleByIndex")
        if index not in self.cards:
            raise NVMLError_InvalidArgument()
        if self.cards[index].lost:
            raise NVMLError_GpuIsLost()
        return Handle(index)

    def nvmlDeviceGetIndex(self, handle: Handle) -> int:  # noqa: N802
        self._check("nvmlDeviceGetIndex")
        return handle.index

    def nvmlDeviceGetName(self, handle: Handle) -> str:  # noqa: N802
        card = self._check("nvmlDeviceGetName", handle)
        assert card is not None
        return card.name

    def nvmlDeviceGetMemoryInfo(self, handle: Handle) -> Memory:  # noqa: N802
        card = self._check("nvmlDeviceGetMemoryInfo", handle)
        assert card is not None
        total, used = int(card.total_mb * 2**20), int(card.used_mb * 2**20)
        return Memory(total=total, free=total - used, used=used)

    def nvmlDeviceGetTotalEccErrors(self, handle: Handle, error_type: int, counter_type: int) -> int:  # noqa: N802
        card = self._check("nvmlDeviceGetTotalEccErrors", handle)
        assert card is not None
        if card.ecc_uncorrected is None:
            raise NVMLError_NotSupported()
        if error_type != NVML_MEMORY_ERROR_TYPE_UNCORRECTED or counter_type != NVML_VOLATILE_ECC:
            return 0
        return card.ecc_uncorrected

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Handle) -> int:  # noqa: N802
        card = self._check("nvmlDeviceGetRetiredPagesPendingStatus", handle)
        assert card is not None
        if card.retired_pending is None:
            raise NVMLError_NotSupported()
        return NVML_FEATURE_ENABLED if card.retired_pending else NVML_FEATURE_DISABLED

    def nvmlDeviceGetRemappedRows(self, handle: Handle) -> tuple[int, int, int, int]:  # noqa: N802
        card = self._check("nvmlDeviceGetRemappedRows", handle)
        assert card is not None
        if card.remapped_rows is None:
            raise NVMLError_NotSupported()
        return card.remapped_rows

    def nvmlEventSetCreate(self) -> EventSet:  # noqa: N802
        self._check("nvmlEventSetCreate")
        events = EventSet()
        self.sets.append(events)
        return events

    def nvmlDeviceRegisterEvents(self, handle: Handle, event_types: int, events: EventSet) -> None:  # noqa: N802
        self._check("nvmlDeviceRegisterEvents", handle)
        if not self.events_supported:
            raise NVMLError_NotSupported()
        events.registered[handle.index] = events.registered.get(handle.index, 0) | event_types

    def nvmlEventSetWait_v2(self, events: EventSet, timeout_ms: int) -> EventData:  # noqa: N802
        self._check("nvmlEventSetWait_v2")
        if not events.pending:
            raise NVMLError_Timeout()
        return events.pending.popleft()

    def nvmlEventSetWait(self, events: EventSet, timeout_ms: int) -> EventData:  # noqa: N802
        return self.nvmlEventSetWait_v2(events, timeout_ms)

    def nvmlEventSetFree(self, events: EventSet) -> None:  # noqa: N802
        self._check("nvmlEventSetFree")
        events.freed = True

"""The card-health reader: NVML (through a stand-in with pynvml's names), nvidia-smi and npu-smi
(captured outputs). No cards, no services."""

from __future__ import annotations

from pathlib import Path

import pynvml
import pytest

from jobservice.fleet.placement import parse_devices, parse_nvidia_smi
from tests.standins import nvml as standin
from tests.standins.nvml import Card, StandInNVML
from workers import card_health
from workers.card_health import SMI_FIELDS, CardHealth, CardMonitor, cards_from_nvidia_smi

CAPTURED = Path(__file__).resolve().parents[1] / "standins" / "captured"


def monitor(cards: dict[int, Card], spec: str = "cuda:0") -> tuple[CardMonitor, StandInNVML]:
    nvml = StandInNVML(cards)
    return CardMonitor(parse_devices(spec), nvml=nvml), nvml


# --- the stand-in keeps pynvml's contract ---------------------------------------------------------
def test_the_standin_has_pynvmls_names_codes_and_constants() -> None:
    for name in standin.FUNCTIONS:
        assert callable(getattr(pynvml, name)), name
    for name in standin.ERRORS:
        real, fake = getattr(pynvml, name), getattr(standin, name)
        assert issubclass(real, pynvml.NVMLError)
        assert real().value == fake().value and str(real()) == str(fake()), name
    for name in standin.CONSTANTS:
        assert getattr(pynvml, name) == getattr(standin, name), name
    assert {f for f, _ in pynvml.c_nvmlEventData_t._fields_} >= {"device", "eventType", "eventData"}


# --- NVML -----------------------------------------------------------------------------------------
def test_a_healthy_card_reports_its_memory() -> None:
    reader, nvml = monitor({0: Card(used_mb=2048.0), 1: Card()}, "cuda:0")
    [card] = reader.read() or []
    assert card == CardHealth("cuda", 0, "NVIDIA H100 80GB HBM3", 81559.0, 2048.0, True, (), "nvml")
    reader.read()
    assert nvml.init_calls == 1  # NVML stays initialised between reads
    reader.close()
    assert nvml.initialised == 0 and all(s.freed for s in nvml.sets)


def test_physical_indices_are_read_in_the_groups_order() -> None:
    reader, _ = monitor({2: Card(used_mb=1.0), 3: Card(used_mb=3.0), 0: Card()}, "cuda:3,2")
    assert [(c.index, c.memory_used_mb) for c in reader.read() or []] == [(3, 3.0), (2, 1.0)]


@pytest.mark.parametrize(
    ("card", "problem"),
    [
        (Card(ecc_uncorrected=2), "2 uncorrected ECC errors since the driver loaded."),
        (Card(retired_pending=True, remapped_rows=None), "pending retirement: the card needs a reset"),
        (Card(remapped_rows=(0, 1, 1, 0)), "pending remapping: the card needs a reset"),
        (Card(remapped_rows=(0, 4, 0, 1)), "Row remapping failed"),
    ],
)
def test_memory_faults_make_a_card_unhealthy(card: Card, problem: str) -> None:
    reader, _ = monitor({0: card})
    [read] = reader.read() or []
    assert read.healthy is False and len(read.problems) == 1 and problem in read.problems[0]
    assert read.memory_total_mb == 81559.0  # the rest is still read


def test_queries_a_card_does_not_support_say_nothing_of_its_health() -> None:
    reader, _ = monitor({0: Card(name="NVIDIA GeForce RTX 4090", ecc_uncorrected=None, remapped_rows=None)})
    [card] = reader.read() or []
    assert card.healthy and card.problems == () and card.name == "NVIDIA GeForce RTX 4090"


def test_a_card_nvml_cannot_reach_is_unhealthy() -> None:
    reader, nvml = monitor({0: Card(), 1: Card(lost=True)}, "cuda:0,1,5")
    ok, lost, absent = reader.read() or []
    assert ok.healthy
    assert not lost.healthy and lost.problems == ("NVML cannot reach it: GPU is lost.",)
    assert not absent.healthy and absent.problems == ("NVML cannot reach it: Invalid Argument.",)
    nvml.fail["nvmlDeviceGetMemoryInfo"] = standin.NVMLError_Unknown
    ok, *_ = reader.read() or []
    assert not ok.healthy and ok.memory_total_mb is None
    assert ok.problems == ("NVML could not read its memory: Unknown Error.",)


def test_critical_xids_since_the_last_read_make_the_card_unhealthy() -> None:
    reader, nvml = monitor({0: Card(), 1: Card()}, "cuda:0,1")
    assert all(c.healthy for c in reader.read() or [])  # registers the cards for XID events
    nvml.xid(1, 79)  # fallen off the bus
    nvml.xid(0, 13)  # an application's fault: not the card's
    nvml.xid(0, 48, event_type=standin.nvmlEventTypeDoubleBitEccError)  # not registered: never comes
    zero, one = reader.read() or []
    assert zero.healthy and not one.healthy and one.problems == ("Critical XID 79 since the last read.",)
    assert all(c.healthy for c in reader.read() or [])  # each event is reported once


def test_without_xid_events_the_rest_is_still_read() -> None:
    nvml = StandInNVML({0: Card(ecc_uncorrected=1)})
    nvml.events_supported = False
    [card] = CardMonitor(parse_devices("cuda:0"), nvml=nvml).read() or []
    assert card.problems == ("1 uncorrected ECC errors since the driver loaded.",)


def test_without_nvml_or_nvidia_smi_there_is_nothing_to_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(card_health, "nvidia_smi_rows", lambda fields: None)
    nvml = StandInNVML(init_error=standin.NVMLError_LibraryNotFound)
    reader = CardMonitor(parse_devices("cuda:0"), nvml=nvml)
    assert reader.read() is None and reader.read() is None
    assert nvml.init_calls == 1  # not tried again on every read
    reader.close()
    assert CardMonitor(parse_devices("cpu"), nvml=StandInNVML()).read() is None


def test_the_real_pynvml_without_a_driver_reads_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    # This machine has pynvml (the worker extra) and no NVIDIA driver: nvmlInit fails.
    monkeypatch.setattr(card_health, "nvidia_smi_rows", lambda fields: None)
    assert CardMonitor(parse_devices("cuda:0")).read() is None


def test_nvidia_smi_is_asked_when_nvml_cannot_start(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = parse_nvidia_smi((CAPTURED / "nvidia-smi-h100-health.csv").read_text(), SMI_FIELDS)
    monkeypatch.setattr(card_health, "nvidia_smi_rows", lambda fields: rows if fields == SMI_FIELDS else None)
    reader = CardMonitor(
        parse_devices("cuda:0-4"), nvml=StandInNVML(init_error=standin.NVMLError_DriverNotLoaded)
    )
    ok, ecc, remap, unknown, absent = reader.read() or []
    assert ok == CardHealth("cuda", 0, "NVIDIA H100 80GB HBM3", 81559.0, 4.0, True, (), "nvidia-smi")
    assert (
        ecc.problems == ("3 uncorrected ECC errors since the driver loaded.",)
        and ecc.memory_used_mb == 70212.0
    )
    assert remap.problems == ("Memory rows are pending remapping: the card needs a reset.",)
    assert unknown.healthy and unknown.memory_used_mb is None  # [N/A] says nothing
    assert absent.problems == ("nvidia-smi does not list it.",)


def test_an_older_nvidia_smi_gives_memory_alone() -> None:
    rows = parse_nvidia_smi("0, Tesla T4, 15360, 300\n", card_health.SMI_BASIC_FIELDS)
    [card] = cards_from_nvidia_smi(rows, parse_devices("cuda:0"))
    assert card == CardHealth("cuda", 0, "Tesla T4", 15360.0, 300.0, True, (), "nvidia-smi")


# --- npu-smi --------------------------------------------------------------------------------------
def test_npu_cards_from_the_health_column() -> None:
    text = (CAPTURED / "npu-smi-910b3-8.txt").read_text()
    cards = CardMonitor(parse_devices("npu:4-7"), npu_smi=lambda: text).read() or []
    assert [c.index for c in cards] == [4, 5, 6, 7] and all(c.healthy for c in cards)
    assert cards[0] == CardHealth("npu", 4, "910B3", 65536.0, 44930.0, True, (), "npu-smi")


def test_npu_warning_alarm_or_critical_is_unhealthy() -> None:
    text = (CAPTURED / "npu-smi-910b3-8-warning-critical.txt").read_text()
    four, five, six, nine = CardMonitor(parse_devices("npu:4,5,6,9"), npu_smi=lambda: text).read() or []
    assert four.healthy
    assert five.problems == ("npu-smi reports its health as Warning.",)
    assert six.problems == ("npu-smi reports its health as Critical.",)
    assert nine.problems == ("npu-smi does not list it.",)
    alarm = text.replace("| Warning       |", "| Alarm         |")
    assert not (CardMonitor(parse_devices("npu:5"), npu_smi=lambda: alarm).read() or [])[0].healthy


def test_no_npu_smi_means_nothing_to_read() -> None:
    assert CardMonitor(parse_devices("npu:0"), npu_smi=lambda: "").read() is None

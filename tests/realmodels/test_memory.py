"""The memory budget and out-of-memory recognition."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jobservice.fleet.placement import parse_devices
from tests.standins.deploy import ROOT
from workers.adapters.base import AdapterError
from workers.adapters.processes.memory import CardMemory, MemoryReader, check_budget, is_out_of_memory

# The users' npu-smi output (seeds/004): eight 910B3 cards, HBM used / total in MB.
NPU_SMI = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 24.1.0                   Version: 24.1.0                                               |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
"""
for index, used in enumerate([3874, 50449, 3404, 3405, 44930, 7206, 3389, 59668]):
    NPU_SMI += f"| {index}     910B3               | OK            | 95.2        43                0    / 0             |\n"
    NPU_SMI += (
        f"| 0                         | 0000:C1:00.0  | 0           0    / 0          {used} / 65536 |\n"
    )


def reader(*cards: tuple[int, float]) -> MemoryReader:
    return lambda device: [CardMemory(device.kind, i, free_mb=gb * 1024, source="fake") for i, gb in cards]


def test_aggregate_budget_sums_the_group() -> None:
    device = parse_devices("npu:2,3")
    found = check_budget(
        model_id="m", need_gb=48, scope="aggregate", device=device, reader=reader((2, 30), (3, 20))
    )
    assert found["checked"] is True and found["free_gb"] == {"npu:2": 30.0, "npu:3": 20.0}
    with pytest.raises(AdapterError) as failure:
        check_budget(
            model_id="m", need_gb=48, scope="aggregate", device=device, reader=reader((2, 30), (3, 12))
        )
    assert failure.value.code == "insufficient_device_memory" and "42.0 GB is free" in failure.value.message


def test_per_card_budget_needs_every_card() -> None:
    device = parse_devices("cuda:0,1")
    with pytest.raises(AdapterError) as failure:
        check_budget(
            model_id="m", need_gb=16, scope="per_card", device=device, reader=reader((0, 40), (1, 15))
        )
    assert "16 GB per card" in failure.value.message and "cuda:1 15.0 GB" in failure.value.message


def test_unknown_memory_and_the_cpu_skip_the_check() -> None:
    assert (
        check_budget(
            model_id="m", need_gb=48, scope="aggregate", device=parse_devices("npu:0"), reader=lambda d: None
        )["checked"]
        is False
    )
    assert (
        check_budget(
            model_id="m", need_gb=48, scope="aggregate", device=parse_devices("cpu"), reader=reader()
        )["reason"]
        == "cpu"
    )


@pytest.mark.parametrize(
    ("text", "oom"),
    [
        ("RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB", True),
        ("torch.OutOfMemoryError: CUDA out of memory.", True),
        ("EZ9999: ACL_ERROR_RT_MEMORY_ALLOCATION", True),
        ("RuntimeError: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate", True),
        ("ValueError: bad checkpoint shard", False),
        ("", False),
    ],
)
def test_out_of_memory_is_recognised(text: str, oom: bool) -> None:
    assert is_out_of_memory(text) is oom


def test_free_memory_from_npu_smi_for_the_groups_physical_cards(tmp_path: Path) -> None:
    fake = tmp_path / "bin" / "npu-smi"
    fake.parent.mkdir()
    (tmp_path / "out.txt").write_text(NPU_SMI)
    fake.write_text(f"#!/bin/sh\ncat {tmp_path / 'out.txt'}\n")
    fake.chmod(0o755)
    code = (
        "import json\n"
        "from jobservice.fleet.placement import parse_devices\n"
        "from workers.adapters.processes.memory import read_with_smi\n"
        "cards = read_with_smi(parse_devices('npu:1,7'))\n"
        "print(json.dumps([[c.index, c.free_mb, c.total_mb] for c in cards]))\n"
    )
    env = {"PATH": f"{fake.parent}:/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out) == [[1, 65536 - 50449, 65536], [7, 65536 - 59668, 65536]]

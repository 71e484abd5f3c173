"""What a batch records about where it ran: commit, drivers, and what changed since the baseline."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from jobservice.nightly.environment import environment_changes
from jobservice.reports import buildinfo


@pytest.fixture
def fresh() -> Iterator[None]:
    buildinfo.commit.cache_clear()
    buildinfo.driver_versions.cache_clear()
    yield
    buildinfo.commit.cache_clear()
    buildinfo.driver_versions.cache_clear()


def test_driver_versions_from_the_vendor_tools(
    fresh: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\necho 550.54.15\necho 550.54.15\n")
    # The first line of `npu-smi info` as the seed documents show it.
    (tmp_path / "npu-smi").write_text("#!/bin/sh\necho '| npu-smi 24.1.0 Version: 24.1.0 |'\n")
    for tool in ("nvidia-smi", "npu-smi"):
        (tmp_path / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert buildinfo.driver_versions() == {"nvidia": "550.54.15", "npu": "24.1.0"}


def test_commit_can_be_given(fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBSERVICE_COMMIT", "abc123")
    assert buildinfo.commit() == "abc123"


def test_changes_name_versions_and_hardware() -> None:
    def env(torch: str, card: str) -> dict[str, object]:
        worker = {"hostname": "gpu1", "device": "cuda:0", "cards": [card]}
        return {"runs": {"versions": {"torch": [torch], "ffmpeg": ["5.1"]}, "workers": {"w@gpu1": worker}}}

    changes = environment_changes(env("2.5.0", "cuda:0 H100"), env("2.6.0", "cuda:0 H200"))
    assert changes == ["torch: 2.5.0 -> 2.6.0", "hardware: gpu1 [cuda:0 H100] -> gpu1 [cuda:0 H200]"]
    assert environment_changes(env("2.5.0", "x"), env("2.5.0", "x")) == []

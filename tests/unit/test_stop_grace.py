"""Every unit that stops a worker gives it time to finish its longest job, and the compose override
runs the deployment file's card groups, no more and no fewer (checked, since no Docker engine or
systemd runs here; the Kubernetes StatefulSets are checked in test_kube_kit.py)."""

from __future__ import annotations

import configparser
import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobservice.catalog import Catalog
from jobservice.families.deployment import build_catalog, default_catalog
from jobservice.fleet.stopping import stop_grace_seconds
from jobservice.kit.compose import compose_problems, duration_seconds
from jobservice.settings import Settings
from tests.conftest import ROOT

DEFAULT_TIMEOUT = Settings.model_fields["job_timeout_seconds"].default
DEPLOYMENT_FILES = sorted(p for p in (ROOT / "deploy").iterdir() if p.suffix in {".yaml", ".toml"})
ASCEND = ROOT / "deploy" / "ascend-910b-8card.yaml"


def _longest_grace(catalog: Catalog) -> int:
    groups: list[tuple[str, ...] | None] = [g.models for g in catalog.groups] or [None]
    return max(stop_grace_seconds(catalog, models, job_timeout_seconds=DEFAULT_TIMEOUT) for models in groups)


def test_the_deployment_files_are_the_ones_checked() -> None:
    assert {p.name for p in DEPLOYMENT_FILES} >= {
        "ascend-910b-8card.yaml",
        "cuda-2gpu.toml",
        "cpu-evaluation.yaml",
    }


def test_the_systemd_worker_unit_waits_for_the_longest_job_of_every_deployment_file() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read_string((ROOT / "deploy" / "systemd" / "jobservice-worker@.service").read_text())
    stop = float(unit["Service"]["TimeoutStopSec"])
    needed = [_longest_grace(build_catalog(deployment_file=path)) for path in DEPLOYMENT_FILES]
    needed.append(_longest_grace(default_catalog()))  # no deployment file: the built-in models
    assert stop >= max(needed), (stop, needed)


def test_the_cpu_compose_worker_waits_for_a_job_at_the_service_limit() -> None:
    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    worker = compose["services"]["worker"]
    assert "JOBSERVICE_JOB_TIMEOUT_SECONDS" not in worker["environment"]  # the default limit applies
    assert duration_seconds(worker["stop_grace_period"]) >= _longest_grace(default_catalog())


def _ascend_override() -> dict[str, Any]:
    override: dict[str, Any] = yaml.safe_load((ROOT / "docker" / "compose.ascend-910b.yaml").read_text())
    return override


def test_the_ascend_compose_runs_exactly_the_deployment_files_groups() -> None:
    catalog = build_catalog(deployment_file=ASCEND)
    assert compose_problems(_ascend_override(), catalog, job_timeout_seconds=DEFAULT_TIMEOUT) == []


def test_the_check_catches_the_old_three_worker_layout() -> None:
    # What docker/compose.ascend-910b.yaml ran before: npu:0,1 / npu:2,3 / npu:4-7, hostnames for ids,
    # five minutes to stop, against a file of two 4-card groups that may run FlashTalk for 30 minutes.
    override = _ascend_override()
    template = next(iter(s for s in override["services"].values() if "image" in s))
    services = {}
    for name, devices in (
        ("worker-npu01", "npu:0,1"),
        ("worker-npu23", "npu:2,3"),
        ("worker-npu4567", "npu:4-7"),
    ):
        service = copy.deepcopy(template)
        service["environment"]["JOBSERVICE_WORKER_DEVICES"] = devices
        service["environment"].pop("JOBSERVICE_WORKER_NODE", None)
        service["stop_grace_period"] = "5m"
        services[name] = service
    problems = compose_problems(
        {"services": services}, build_catalog(deployment_file=ASCEND), job_timeout_seconds=3600
    )
    text = "\n".join(problems)
    assert "worker-npu01 runs npu:0,1, which is no card group" in text
    assert "card group npu:0,1,2,3 has 0 worker services" in text
    assert "worker-npu4567: no JOBSERVICE_WORKER_NODE" in text
    assert "worker-npu4567: stop_grace_period is 300 s; its longest job needs 1920 s" in text


@pytest.mark.parametrize(
    ("text", "seconds"), [("32m", 1920), ("1h2m", 3720), ("90s", 90), ("1m30s", 90), (45, 45)]
)
def test_compose_durations(text: str | int, seconds: float) -> None:
    assert duration_seconds(text) == seconds


def test_a_duration_that_is_not_one_is_refused() -> None:
    with pytest.raises(ValueError, match="not a compose duration"):
        duration_seconds("five minutes")


def test_the_workers_command_says_each_groups_stop_grace() -> None:
    from click.testing import CliRunner

    from jobservice.cli.workers import workers_command

    result = CliRunner().invoke(workers_command, ["--file", str(ASCEND)])
    assert "stop grace 1920 s" in result.output, result.output


def test_the_units_point_to_the_same_margin(tmp_path: Path) -> None:
    # A deployment file whose longest model may run 10 minutes needs 10 minutes and 2 to stop.
    deployment = tmp_path / "d.yaml"
    deployment.write_text(
        yaml.safe_dump(
            {
                "models": {"wan2.1-t2v-1.3b": {"endpoints": ["http://127.0.0.1:9"], "timeout": 600}},
                "workers": [{"devices": "cpu", "models": ["wan2.1-t2v-1.3b"]}],
            }
        )
    )
    assert _longest_grace(build_catalog(deployment_file=deployment)) == 600 + 120

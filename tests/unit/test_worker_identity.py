"""A card group's id and its deployment-file group, as ``jobservice worker`` sets them: a pod's stable
name (``JOBSERVICE_WORKER_NODE``), and ``--group`` for a container whose cards a device plugin
numbered from 0; a stopping worker waits for its finishing job as long as its models may run."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from jobservice.cli import launch
from jobservice.families.deployment import build_catalog
from jobservice.fleet.placement import parse_devices
from jobservice.fleet.stopping import DRAIN_MARGIN_SECONDS, drain_seconds, stop_grace_seconds
from tests.conftest import ROOT, make_settings

ASCEND = ROOT / "deploy" / "ascend-910b-8card.yaml"
CUDA = ROOT / "deploy" / "cuda-2gpu.toml"


class Execd(Exception):
    """Raised instead of replacing the test process with Celery."""


def _exec(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, deployment: Path, **kwargs: Any) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def fake_execvpe(path: str, argv: list[str], env: dict[str, str]) -> None:
        seen.update(argv=argv, env=env)
        raise Execd

    monkeypatch.setattr(launch.os, "execvpe", fake_execvpe)
    # Every model is servable here (the checkouts of the deployment file are not on this machine).
    monkeypatch.setattr(
        launch, "servable_models", lambda catalog, device, models: dict.fromkeys(models or catalog.ids())
    )
    settings = make_settings(tmp_path / "var", deployment_file=deployment, **kwargs.pop("settings", {}))
    with pytest.raises(Execd):
        launch.exec_worker(settings, models=None, preload=False, loglevel="INFO", **kwargs)
    return seen


def test_a_pod_name_is_the_group_id_and_group_picks_the_files_group(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The cuda:1 group of the file, in a container that sees its one GPU as cuda:0.
    seen = _exec(
        monkeypatch,
        tmp_path,
        CUDA,
        devices="cuda:0",
        name=None,
        group_key="cuda:1",
        settings={"worker_node": "jobservice-worker-cuda-1-0"},
    )
    env = seen["env"]
    assert env["JOBSERVICE_WORKER_NODE"] == "jobservice-worker-cuda-1-0"
    assert env["JOBSERVICE_WORKER_GROUP"] == "cuda:1"
    assert json.loads(env["JOBSERVICE_WORKER_MODELS"]) == ["wan2.1-t2v-1.3b", "omnirt"]  # not cuda:0's
    assert env["CUDA_VISIBLE_DEVICES"] == "0"
    assert seen["argv"][seen["argv"].index("--queues") + 1] == "group.jobservice-worker-cuda-1-0"


def test_without_a_node_or_a_name_the_id_is_devices_at_host_as_before(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen = _exec(monkeypatch, tmp_path, CUDA, devices="cuda:0", name=None)
    env = seen["env"]
    assert env["JOBSERVICE_WORKER_NODE"] == f"cuda:0@{launch.socket.gethostname()}"
    assert json.loads(env["JOBSERVICE_WORKER_MODELS"]) == ["soulx-flashhead-1.3b"]
    assert env["JOBSERVICE_WORKER_GROUP"] == "cuda:0"


@pytest.mark.parametrize(
    ("key", "devices", "message"),
    [
        ("npu:0-1", "npu:0,1", "no such card group"),
        ("npu:4-7", "npu:0,1", "has 4 card(s) but --devices npu:0,1 gives this worker 2"),
    ],
)
def test_a_group_the_file_lacks_or_of_another_size_is_refused(
    tmp_path: Path, key: str, devices: str, message: str
) -> None:
    settings = make_settings(tmp_path / "var", deployment_file=ASCEND)
    with pytest.raises(SystemExit, match=re.escape(message)):
        launch.deployment_group(settings, parse_devices(devices), key)


def test_a_group_is_found_by_its_files_devices_in_any_spelling(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "var", deployment_file=ASCEND)
    group = launch.deployment_group(settings, parse_devices("npu:0-3"), "npu:4-7")
    assert group is not None and group.devices == "npu:4,5,6,7"
    catalog = build_catalog(deployment_file=ASCEND)
    # A worker's runtime looks its group up with the key the launcher set (JOBSERVICE_WORKER_GROUP).
    assert catalog.group_for("npu:0,1,2,3", "npu:4,5,6,7") == group
    assert catalog.group_for("npu:0,1,2,3", None) == catalog.groups[0]  # without a key: by devices


def test_the_drain_and_the_grace_follow_the_longest_timeout_of_the_groups_models() -> None:
    catalog = build_catalog(deployment_file=ASCEND)
    models = list(catalog.groups[0].models)  # FlashTalk 1800 s, Wan2.1 1200 s, FlashHead 900 s
    assert drain_seconds(catalog, models, job_timeout_seconds=3600) == 1800 + DRAIN_MARGIN_SECONDS
    assert drain_seconds(catalog, ["soulx-flashhead-1.3b"], job_timeout_seconds=3600) == 900 + 60
    assert stop_grace_seconds(catalog, models, job_timeout_seconds=3600) >= 1800 + 60
    cuda = build_catalog(deployment_file=CUDA)  # Wan2.1 there has no timeout: the service's limit
    assert drain_seconds(cuda, ["wan2.1-t2v-1.3b"], job_timeout_seconds=3600) == 3600 + 60


def test_the_worker_process_drains_as_long_as_its_models_may_run(tmp_path: Path) -> None:
    from jobservice.wiring import build_services
    from workers.bootstrap import drain_for

    settings = make_settings(
        tmp_path / "var",
        deployment_file=ASCEND,
        worker_models=["soulx-flashtalk-14b", "soulx-flashhead-1.3b"],
        broker_url="redis://127.0.0.1:1/0",
    )
    services = build_services(settings)
    try:
        assert drain_for(services) == 1800 + DRAIN_MARGIN_SECONDS  # was a fixed 300 s
    finally:
        services.db.dispose()

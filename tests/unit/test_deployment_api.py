"""A deployment file as the API and the launcher see it: /models, skipped models with their reason,
the card group a worker picks up, and the `jobservice workers` helper."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from jobservice.cli.launch import worker_plan
from jobservice.db.migrate import upgrade
from jobservice.fleet.placement import parse_devices
from jobservice.fleet.presence import announce_worker
from jobservice.http.app import create_app
from jobservice.wiring import build_services
from tests.conftest import ROOT, make_settings

pytestmark = pytest.mark.integration


@pytest.fixture
def deployment(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    (site / "fh").mkdir(parents=True)
    data = {
        "models": {
            "soulx-flashhead-1.3b": {
                "repo": "fh",
                "ckpt_dir": "fh/missing-ckpt",
                "wav2vec_dir": "fh",
                "cards": 2,
            },
            "wan2.1-t2v-1.3b": {"endpoints": ["http://127.0.0.1:9"]},
        },
        "workers": [{"devices": "npu:2,3", "models": ["soulx-flashhead-1.3b", "wan2.1-t2v-1.3b"]}],
    }
    path = site / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_models_show_the_real_models_and_why_a_worker_skipped_one(
    tmp_path: Path, clean_redis: str, deployment: Path
) -> None:
    settings = make_settings(tmp_path / "var", broker_url=clean_redis, deployment_file=deployment)
    upgrade(settings.resolved_database_url())
    serve, skipped = worker_plan(settings, parse_devices("npu:2,3"), None)
    assert serve == ["wan2.1-t2v-1.3b"], "the group's models, minus the one whose weights are missing"
    # The published reason names the deployment key, never the host's paths.
    assert (
        "ckpt_dir" in skipped["soulx-flashhead-1.3b"]
        and "missing-ckpt" not in skipped["soulx-flashhead-1.3b"]
    )
    services = build_services(settings)
    with services.db.session() as session:
        announce_worker(
            session,
            worker_id="npu:2,3@host",
            hostname="host",
            pid=1,
            devices="npu:2,3",
            models=serve,
            info={"skipped": skipped},
        )
    client = create_app(services=services).test_client()
    models = {m["id"]: m for m in client.get("/models").get_json()["models"]}
    head, wan = models["soulx-flashhead-1.3b"], models["wan2.1-t2v-1.3b"]
    assert head["maturity"] == "contract-tested" == wan["maturity"]
    assert head["online"] is False and head["unavailable"][0]["worker"] == "npu:2,3@host"
    assert "not found on this host" in head["unavailable"][0]["reason"]
    assert wan["online"] is True and wan["unavailable"] == [] and wan["execution_mode"] == "http"
    assert head["parameters"]["properties"]["sample_steps"]["default"] == 2 and head["cards"] == 2
    assert "endpoints" not in str(wan), "deployment config (endpoints, keys) is not published"
    services.db.dispose()


def test_a_worker_refuses_to_start_when_nothing_can_be_served(tmp_path: Path, deployment: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSERVICE_")}
    env.update(
        JOBSERVICE_DEPLOYMENT_FILE=str(deployment),
        JOBSERVICE_VAR_DIR=str(tmp_path / "var"),
        PYTHONPATH=str(ROOT),
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jobservice.cli.main",
            "worker",
            "--devices",
            "npu:2,3",
            "--models",
            "soulx-flashhead-1.3b",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "not serving soulx-flashhead-1.3b: not found on this host: ckpt_dir" in done.stderr
    assert "missing-ckpt (missing)" in done.stderr  # the operator's terminal does show the path
    assert "no model can be served" in done.stderr


def test_the_workers_helper_prints_one_command_per_group(deployment: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "jobservice.cli.main", "workers", "--file", str(deployment), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 1, "--check fails while a model cannot be served here"
    lines = done.stdout.splitlines()
    assert (
        lines[0]
        == "npu:2,3: jobservice worker --devices npu:2,3 --models soulx-flashhead-1.3b,wan2.1-t2v-1.3b"
    )
    assert any("soulx-flashhead-1.3b: NOT SERVABLE HERE" in line for line in lines)
    assert "  wan2.1-t2v-1.3b: ok" in lines

"""`jobservice webhooks secret`: created on first use, the same afterwards, new with --rotate."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from jobservice.db.migrate import upgrade


def run(args: list[str], var_dir: Path) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("JOBSERVICE_")}
    clean["JOBSERVICE_VAR_DIR"] = str(var_dir)
    return subprocess.run(
        [sys.executable, "-m", "jobservice.cli.main", "webhooks", "secret", *args],
        capture_output=True,
        text=True,
        env=clean,
        timeout=60,
    )


def test_secret_is_created_once_and_rotated(tmp_path: Path) -> None:
    upgrade(f"sqlite:///{tmp_path / 'jobservice.db'}")
    first = run(["--tenant", "acme"], tmp_path)
    assert first.returncode == 0, first.stderr
    secret = first.stdout.strip()
    assert secret.startswith("whsec_") and len(secret) > 40
    assert run(["--tenant", "acme"], tmp_path).stdout.strip() == secret
    assert run([], tmp_path).stdout.strip() not in ("", secret)  # the default tenant has its own
    rotated = run(["--tenant", "acme", "--rotate"], tmp_path)
    assert rotated.returncode == 0 and rotated.stdout.strip() not in ("", secret)
    assert "previous one also signs" in rotated.stderr


def test_an_unmigrated_database_is_a_one_line_error(tmp_path: Path) -> None:
    result = run([], tmp_path / "empty")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "database" in result.stderr

"""`jobservice keys` and the auth-off guard, through the real command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from jobservice.db.migrate import upgrade


def run(args: list[str], var_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("JOBSERVICE_")}
    clean.update({"JOBSERVICE_VAR_DIR": str(var_dir), **env})
    return subprocess.run(
        [sys.executable, "-m", "jobservice.cli.main", *args],
        capture_output=True,
        text=True,
        env=clean,
        timeout=60,
    )


def test_create_list_revoke(tmp_path: Path) -> None:
    upgrade(f"sqlite:///{tmp_path / 'jobservice.db'}")
    made = run(
        ["keys", "create", "--name", "ci", "--tenant", "acme", "--active-jobs", "3", "--json"], tmp_path
    )
    assert made.returncode == 0, made.stderr
    key = json.loads(made.stdout)
    assert (
        key["secret"].startswith("jsk_") and key["tenant"] == "acme" and key["limits"] == {"active_jobs": 3}
    )
    plain = run(["keys", "create", "--name", "ops", "--role", "admin"], tmp_path)
    assert plain.stdout.strip().startswith("jsk_") and "shown only now" in plain.stderr
    listed = run(["keys", "list", "--json"], tmp_path)
    rows = json.loads(listed.stdout)
    assert [r["name"] for r in rows] == ["ci", "ops"] and key["secret"] not in listed.stdout
    assert run(["keys", "revoke", key["id"]], tmp_path).returncode == 0
    assert json.loads(run(["keys", "list", "--json"], tmp_path).stdout)[0]["revoked_at"]
    unknown = run(["keys", "revoke", "key_nope"], tmp_path)
    assert unknown.returncode == 1 and "key_not_found" in unknown.stderr
    bad = run(["keys", "create", "--name", "x", "--tenant", "Bad Tenant!"], tmp_path)
    assert bad.returncode == 1 and "invalid_tenant" in bad.stderr


def test_auth_off_is_refused_on_a_public_address(tmp_path: Path) -> None:
    refused = run(["api", "--host", "0.0.0.0"], tmp_path, JOBSERVICE_AUTH="off")
    assert refused.returncode == 1 and "JOBSERVICE_AUTH_OFF_ANYWHERE" in refused.stderr

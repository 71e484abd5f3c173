"""What a run was built from and ran on: the service's commit and the accelerator driver.

Recorded in every RunReport (``versions``) and in each batch's environment, so a regression can be
traced to a change of code, driver or card. Each answer is computed once per process; the vendor
tools are asked only when they exist. No torch here (the API imports this module).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


@cache
def commit() -> str | None:
    """The service's git commit: ``JOBSERVICE_COMMIT`` (set in images), else ``git rev-parse``."""
    given = os.environ.get("JOBSERVICE_COMMIT")
    if given:
        return given.strip() or None
    if not (REPO_ROOT / ".git").exists() or shutil.which("git") is None:
        return None
    # Read-only: GIT_OPTIONAL_LOCKS=0 keeps `git status` from refreshing (writing) the index.
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}
    git = ["git", "-C", str(REPO_ROOT)]
    out = _run([*git, "rev-parse", "--short=12", "HEAD"], env=env).strip()
    dirty = _run([*git, "status", "--porcelain", "--untracked-files=no"], env=env).strip()
    return f"{out}+dirty" if out and dirty else (out or None)


def _run(argv: list[str], env: dict[str, str] | None = None) -> str:
    """What ``argv`` printed, or "" when it failed, timed out or is not there."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=10, check=True, env=env).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


@cache
def driver_versions() -> dict[str, str]:
    """Accelerator driver versions on this host: ``nvidia`` and/or ``npu`` (empty on CPU hosts)."""
    found: dict[str, str] = {}
    if shutil.which("nvidia-smi"):
        lines = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]).split()
        if lines:
            found["nvidia"] = lines[0].strip()
    if shutil.which("npu-smi"):
        match = re.search(r"Version:\s*([\w.\-]+)", _run(["npu-smi", "info"]))
        if match:
            found["npu"] = match.group(1)
    return found

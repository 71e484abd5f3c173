"""The soak with faults, short (scripts/soak.py): a few minutes of jobs from three tenants while
workers are killed and cut off, Redis and PostgreSQL restart and the object store freezes. Nothing
may be lost or doubled, no orphan may be left, every webhook event must arrive exactly once.

The long soak (30 minutes, 600 jobs) is the same script: ``python scripts/soak.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# Three minutes of jobs, then the drain and the checks: on a loaded 2-core host the whole took over
# the suite's 300 s per test, so the test gets the same 20 minutes as the soak's own process.
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parents[2]


def test_a_short_soak_with_faults_loses_and_doubles_nothing(redis_url: str, pg_server_url: str) -> None:
    # The soak starts its own Redis, PostgreSQL and S3 server; the fixtures only put the test in the
    # integration tier, beside the other tests that need services.
    argv = [sys.executable, str(ROOT / "scripts" / "soak.py"), "--minutes", "3", "--jobs", "90"]
    argv += ["--fault-every", "8", "--min-faults", "5", "--seed", "3"]
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    last = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else "{}"
    verdict = json.loads(last)
    assert result.returncode == 0, (verdict, result.stderr[-4000:])
    assert verdict["jobs"] >= 90 and verdict["faults"] >= 5
    for key in ("lost", "doubled", "orphans", "webhooks_missing", "webhooks_doubled", "bad_videos"):
        assert verdict[key] == 0, (key, verdict)
    assert verdict["metrics_agree"] is True
    assert verdict["succeeded"] >= 60, verdict  # faults may fail a few jobs; most must succeed

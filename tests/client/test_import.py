"""``jobservice.client`` is importable by a script that has neither Flask nor torch."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT


def test_the_client_imports_without_flask_torch_celery_or_the_database() -> None:
    code = (
        "import json, sys\n"
        "import jobservice.client as c\n"
        "assert c.Client and c.JobView and c.BatchView\n"
        "print(json.dumps(sorted(m for m in ('flask', 'werkzeug', 'torch', 'celery', 'kombu', 'sqlalchemy', 'workers')"
        " if m in sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []

"""The polling path's lean row reader, and the pure helpers of scripts/bench_poll.py."""

from __future__ import annotations

import math
import subprocess
import sys
import uuid
from pathlib import Path

from jobservice.db.tables import Job
from jobservice.jobs.lookup import read_job
from jobservice.jobs.queries import get_job
from scripts.bench_poll import PollChecker, parse_wrk, percentile
from tests.factories import new_job, sqlite_copy

ROOT = Path(__file__).resolve().parents[2]


def test_read_job_returns_the_rows_columns_as_the_orm_reads_them(
    tmp_path: Path, migrated_sqlite: Path
) -> None:
    db = sqlite_copy(migrated_sqlite, tmp_path)
    job_id = new_job(db, params={"prompt": "a cat", "num_frames": 49})
    with db.session() as session:
        orm = get_job(session, job_id)
        assert orm is not None
        orm.progress = 0.25
    lean = read_job(db, job_id)
    assert isinstance(lean, Job)
    for column in Job.__table__.columns:
        assert getattr(lean, column.key) == getattr(orm, column.key), column.key
    assert lean.progress == 0.25 and lean.params == {"prompt": "a cat", "num_frames": 49}
    assert read_job(db, uuid.uuid4()) is None
    db.dispose()


def test_read_job_works_as_the_first_database_call_of_a_fresh_process(
    tmp_path: Path, migrated_sqlite: Path
) -> None:
    # A gunicorn worker's first request may be a poll: no query has configured the mappers yet.
    db = sqlite_copy(migrated_sqlite, tmp_path)
    job_id = new_job(db)
    db.dispose()
    code = (
        "import uuid, sys\n"
        "from jobservice.db.engine import Database\n"
        "from jobservice.jobs.lookup import read_job\n"
        f"job = read_job(Database(sys.argv[1]), uuid.UUID('{job_id}'))\n"
        "print(job.status, job.tenant, job.model)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, db.url], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["queued", "default", "reference-t2v"]


WRK_OUTPUT = """Running 10s test @ http://127.0.0.1:8000/jobs/x
  2 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    20.16ms    8.52ms 141.42ms   84.16%
    Req/Sec     1.61k   212.51     2.05k    71.50%
  Latency Distribution
     50%   18.52ms
     75%   22.92ms
     90%   29.16ms
     99%    1.05s
  32150 requests in 10.01s, 38.40MB read
  Socket errors: connect 0, read 2, write 0, timeout 3
  Non-2xx or 3xx responses: 7
Requests/sec:   3212.34
Transfer/sec:      3.84MB
"""


def test_parse_wrk_reads_rate_percentiles_in_ms_and_errors() -> None:
    result = parse_wrk(WRK_OUTPUT)
    assert result.rps == 3212.34
    assert result.p50_ms == 18.52
    assert result.p99_ms == 1050.0  # seconds converted
    assert result.requests == 32150
    assert result.errors == 12  # 7 non-2xx + 5 socket errors


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 99) == 99.0
    assert percentile(values, 50) == 50.0
    assert percentile([5.0], 99) == 5.0
    assert math.isnan(percentile([], 50))


def test_poll_checker_flags_progress_going_back_and_life_after_a_terminal_state() -> None:
    fine = PollChecker()
    for status, progress in [("queued", 0.0), ("running", 0.1), ("running", 0.1), ("succeeded", 1.0)]:
        fine.observe(status, progress)
    assert fine.violations == [] and fine.terminal == "succeeded" and fine.observations == 4

    backwards = PollChecker()
    backwards.observe("running", 0.5)
    backwards.observe("running", 0.4)
    assert backwards.violations == ["progress went back from 0.5 to 0.4"]

    revived = PollChecker()
    revived.observe("failed", 0.3)
    revived.observe("running", 0.3)
    assert revived.violations == ["failed was followed by running"]

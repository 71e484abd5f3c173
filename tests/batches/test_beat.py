"""The nightly schedule: settings checked up front, and a real `jobservice beat` creating batches."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from celery.schedules import crontab
from sqlalchemy import select

from jobservice.batches.control import beat_schedule, cron_schedule, parse_schedules
from jobservice.models import Batch
from jobservice.settings import Settings
from tests.batches.conftest import build_batch_stack
from tests.conftest import ROOT


def test_schedules_are_checked() -> None:
    entries = parse_schedules(
        [{"spec": "batches/nightly.yaml", "cron": "0 2 * * *"}, {"spec": "b.yaml", "every_seconds": 5}]
    )
    assert [e.key for e in entries] == ["batches/nightly.yaml", "b.yaml"]
    assert cron_schedule("30 1 * * 1-5") == crontab(minute="30", hour="1", day_of_week="1-5")
    bad = [
        ([{"spec": "a", "cron": "0 2 * *"}], "5 fields"),
        ([{"spec": "a", "cron": "61 2 * * *"}], "61"),
        ([{"spec": "a"}], "exactly one"),
        ([{"spec": "a", "cron": "0 2 * * *", "every_seconds": 5}], "exactly one"),
        ([{"cron": "0 2 * * *"}], "spec"),
        ([{"spec": "a", "cron": "0 2 * * *"}, {"spec": "a", "cron": "0 3 * * *"}], "distinct"),
        ([{"spec": "a", "cron": "0 2 * * *", "when": "now"}], "when"),
    ]
    for raw, says in bad:
        with pytest.raises(ValueError, match=says):
            parse_schedules(raw)


def test_beat_schedule_has_each_spec_and_the_tick() -> None:
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        batch_schedules=[{"spec": "n.yaml", "cron": "0 2 * * *", "name": "nightly"}],
        batch_tick_seconds=7,
    )
    plan = beat_schedule(settings)
    assert plan["batch:nightly"]["args"] == ["nightly", "n.yaml", 60.0]
    assert plan["batch:nightly"]["schedule"] == cron_schedule("0 2 * * *")
    assert plan["batch:nightly"]["options"]["queue"] == "jobservice.control"
    assert plan["batch-tick"]["schedule"].run_every.total_seconds() == 7


def test_beat_command_refuses_bad_schedules() -> None:
    env = {**os.environ, "JOBSERVICE_BATCH_SCHEDULES": json.dumps([{"spec": "a.yaml", "cron": "0 25 * * *"}])}
    done = subprocess.run(
        [sys.executable, "-m", "jobservice.cli.main", "beat"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "JOBSERVICE_BATCH_SCHEDULES[0]" in done.stderr, done.stderr


@pytest.mark.integration
@pytest.mark.slow
def test_a_due_schedule_makes_a_batch_appear_and_finish(tmp_path: Path) -> None:
    schedules = [{"spec": "specs/nightly.yaml", "every_seconds": 3, "name": "nightly"}]
    stack = build_batch_stack(tmp_path, batch_schedules=schedules, batch_tick_seconds=1.0)
    spec = {
        "name": "scheduled",
        "repeat": 1,
        "cases": [{"name": "a", "model": "fake-bench", "params": {"num_frames": 6, "step_ms": 1}}],
    }
    (tmp_path / "root" / "specs").mkdir()
    (tmp_path / "root" / "specs" / "nightly.yaml").write_text(yaml.safe_dump(spec))
    log = tmp_path / "beat.log"
    beat = None
    try:
        stack.start_worker("w")
        with log.open("wb") as out:
            beat = subprocess.Popen(
                [sys.executable, "-m", "jobservice.cli.main", "beat"],
                env=stack.env,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 90
        finished: list[Batch] = []
        while time.monotonic() < deadline and not finished:
            # Read the table directly: nobody but the beat's tick finishes these batches.
            with stack.services.db.session() as s:
                finished = list(s.scalars(select(Batch).where(Batch.status == "finished")))
            time.sleep(0.5)
        assert finished, log.read_text(errors="replace")[-4000:]
        batch = finished[0]
        assert batch.source == "beat" and batch.name == "scheduled" and batch.verdict == "no_baseline"
        assert batch.idempotency_key and batch.idempotency_key.startswith("beat:nightly:")
        assert batch.origin.endswith("specs/nightly.yaml")
    finally:
        if beat is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(beat.pid, signal.SIGTERM)
            try:
                beat.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(beat.pid, signal.SIGKILL)
        stack.close()

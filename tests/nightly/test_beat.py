"""The nightly schedule: settings checked up front, and a real `jobservice beat` creating batches."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import yaml
from celery.schedules import crontab
from sqlalchemy import select

from jobservice.db.tables import Batch
from jobservice.nightly.schedule import (
    beat_schedule,
    cron_schedule,
    last_fire_time,
    parse_schedules,
    run_scheduled,
    schedule_slot,
    scheduled_key,
)
from jobservice.settings import Settings
from tests.conftest import ROOT
from tests.nightly.conftest import build_batch_stack


def test_schedules_are_checked() -> None:
    entries = parse_schedules(
        [{"spec": "batches/nightly.yaml", "cron": "0 2 * * *"}, {"spec": "b.yaml", "every_seconds": 5}]
    )
    assert [e.key for e in entries] == ["batches/nightly.yaml", "b.yaml"]
    assert cron_schedule("30 1 * * 1-5") == crontab(minute="30", hour="1", day_of_week="1-5")
    bad: list[tuple[list[dict[str, Any]], str]] = [
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
    assert plan["batch:nightly"]["args"] == ["nightly", "n.yaml", 60.0, "0 2 * * *"]
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


SHANGHAI = ZoneInfo("Asia/Shanghai")


def at(text: str, zone: ZoneInfo = SHANGHAI) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=zone)


def test_the_fire_time_is_the_crons_not_the_clocks() -> None:
    nightly = "0 2 * * *"
    assert last_fire_time(nightly, at("2026-03-10T02:00:00.1")) == at("2026-03-10T02:00")
    assert last_fire_time(nightly, at("2026-03-10T02:01:01")) == at("2026-03-10T02:00")
    assert last_fire_time(nightly, at("2026-03-10T23:59")) == at("2026-03-10T02:00")
    assert last_fire_time(nightly, at("2026-03-10T01:59:59")) == at("2026-03-09T02:00")
    weekdays = "30 1 * * 1-5"  # Monday to Friday; 2026-03-14 is a Saturday
    assert last_fire_time(weekdays, at("2026-03-16T00:00")) == at("2026-03-13T01:30")
    both = "0 0 13 * 5"  # Friday the 13th: day of month AND day of week, as Celery's crontab
    assert last_fire_time(both, at("2026-12-31T00:00")) == at("2026-11-13T00:00")
    leap_mondays = "0 0 29 2 1"  # last on 2016-02-29, next on 2044-02-29
    assert last_fire_time(leap_mondays, at("2026-03-10T00:00")) is None, "beyond the look-back"
    assert last_fire_time(leap_mondays, at("2020-03-10T00:00")) == at("2016-02-29T00:00")


def test_schedule_slots_follow_the_zone_of_the_schedule() -> None:
    # 18:00:30 UTC is 02:00:30 the next day in Shanghai.
    utc = datetime(2026, 3, 9, 18, 0, 30, tzinfo=UTC).timestamp()
    assert schedule_slot(cron="0 2 * * *", period_seconds=60, timezone="Asia/Shanghai", now=utc) == (
        "2026-03-10T02:00"
    )
    assert schedule_slot(cron="0 2 * * *", period_seconds=60, timezone="UTC", now=utc) == "2026-03-09T02:00"
    early = utc - 30.5 - 3  # a second beat's clock 3 s ahead: the message arrives "before" 02:00
    assert schedule_slot(cron="0 2 * * *", period_seconds=60, timezone="Asia/Shanghai", now=early) == (
        "2026-03-10T02:00"
    )
    assert schedule_slot(cron=None, period_seconds=5, timezone="UTC", now=12.0) == "2"
    assert len(scheduled_key("s" * 300, "2026-03-10T02:00")) <= 255
    assert scheduled_key("s" * 300, "2026-03-10T02:00").endswith(":2026-03-10T02:00")


@pytest.mark.integration
def test_one_batch_per_firing_however_late_or_often_it_is_delivered(bservices: Any, root: Path) -> None:
    (root / "nightly.yaml").write_text(
        "name: beat-dedupe\ncases: [{name: a, model: reference-t2v, params: {prompt: x}, repeat: 1}]\n"
    )
    settings = bservices.settings.model_copy(update={"batch_timezone": "Asia/Shanghai"})
    services = dataclasses.replace(bservices, settings=settings)
    fired = datetime(2026, 3, 10, 2, 0, tzinfo=SHANGHAI).timestamp()

    def deliver(seconds_late: float) -> str | None:
        return run_scheduled(
            services,
            name="nightly",
            spec="nightly.yaml",
            period_seconds=60.0,
            cron="0 2 * * *",
            now=fired + seconds_late,
        )

    # Two beats either side of a minute boundary, and a redelivery hours later: one batch.
    ids = {deliver(0.2), deliver(61.0), deliver(3 * 3600.0)}
    assert len(ids) == 1 and None not in ids
    assert deliver(24 * 3600.0) not in ids, "the next night is a new batch"
    with bservices.db.session() as s:
        keys = sorted(str(k) for k in s.scalars(select(Batch.idempotency_key)))
    assert keys == ["beat:nightly:2026-03-10T02:00", "beat:nightly:2026-03-11T02:00"]

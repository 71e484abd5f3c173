"""The fleet's tables on SQLite: the ledger tiles a group's time (concurrent writers included), a
down group comes back, usage adds up by attempt, measured speeds fit a line, and the forecast's
stored form reads back."""

from __future__ import annotations

import json
import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from jobservice.db.engine import Database
from jobservice.db.tables import (
    FleetForecast,
    FleetGroup,
    Job,
    JobStatus,
    LedgerSpan,
    ModelSpeed,
    TenantShare,
    utcnow,
)
from jobservice.families.deployment import default_catalog
from jobservice.fleet import card_groups, costs, eta
from jobservice.fleet import shares as fair_shares
from jobservice.fleet.dispatch import read_state
from jobservice.fleet.eta import compute, parse
from jobservice.fleet.forecast import DAY, EXPECTED, recurring
from jobservice.fleet.usage import Phases, add_attempt, record_attempt
from jobservice.settings import Settings
from tests.factories import new_job, online_group, sqlite_copy


@pytest.fixture
def db(tmp_path: Path, migrated_sqlite: Path) -> Database:
    return sqlite_copy(migrated_sqlite, tmp_path)


def register(db: Database, group_id: str = "g1", **kw: object) -> None:
    with db.session() as s:
        card_groups.register(
            s,
            group_id=group_id,
            devices="cpu",
            kind="cpu",
            cards=2,
            memory_gb_per_card=16.0,
            eligible=["reference-t2v"],
            hostname="h",
            **kw,  # type: ignore[arg-type]
        )


def spans(db: Database, group_id: str = "g1") -> list[LedgerSpan]:
    with db.session() as s:
        return list(
            s.scalars(select(LedgerSpan).where(LedgerSpan.group_id == group_id).order_by(LedgerSpan.id))
        )


def assert_tiled(rows: list[LedgerSpan]) -> None:
    assert [r.ended_at for r in rows].count(None) == 1 and rows[-1].ended_at is None
    for before, after in zip(rows, rows[1:], strict=False):
        assert before.ended_at == after.started_at, (before.state, after.state)


def test_the_ledger_tiles_a_groups_time_even_with_two_writers(db: Database) -> None:
    two_writers(db)


@pytest.mark.integration
@pytest.mark.postgres
def test_the_ledger_tiles_a_groups_time_on_postgresql(pg_url: str) -> None:
    database = Database(pg_url)
    try:
        two_writers(database)
    finally:
        database.dispose()


def two_writers(db: Database) -> None:
    register(db)
    job = uuid.uuid4()

    def flip(states: list[str]) -> None:
        for state in states * 40:
            with db.session() as s:
                card_groups.set_state(s, "g1", state, model="m", job_id=job)

    writers = [
        threading.Thread(target=flip, args=(["generating", "finishing"],)),
        threading.Thread(target=flip, args=(["loading", "idle_warm"],)),
    ]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    rows = spans(db)
    assert len(rows) > 100
    assert_tiled(rows)
    assert all(r.cards == 2 for r in rows)


def test_a_lost_group_goes_down_from_when_it_was_last_seen_and_comes_back(db: Database) -> None:
    register(db)
    with db.session() as s:
        card_groups.set_state(s, "g1", "generating", model="m")
        card_groups.note_loaded(s, "g1", "m", seconds=2.0, reason="job")
    seen = utcnow() + timedelta(seconds=1)
    with db.session() as s:
        assert card_groups.mark_down(s, "g1", at=seen, reason="worker lost")
        assert not card_groups.mark_down(s, "g1", at=seen, reason="worker lost")  # once
    with db.session() as s:
        group = s.get(FleetGroup, "g1")
        assert group is not None and group.state == "down" and group.resident == {}
    register(db, last_seen=seen)
    rows = spans(db)
    assert [r.state for r in rows][-3:] == ["generating", "down", "idle_empty"]
    assert rows[-2].started_at == seen
    assert_tiled(rows)


def test_usage_adds_up_by_attempt_and_lost_attempts_are_not_charged(db: Database) -> None:
    job_id = new_job(db)
    with db.session() as s:
        s.execute(
            Job.__table__.update().where(Job.id == job_id).values(tenant="acme")  # type: ignore[attr-defined]
        )
    common: dict[str, Any] = {
        "job_id": job_id,
        "tenant": "acme",
        "model": "reference-t2v",
        "group_id": "g1",
        "card_kind": "cpu",
    }
    with db.session() as s:
        record_attempt(
            s,
            attempt=1,
            cards=2,
            phases=Phases(generate_s=3.0),
            outcome="worker_lost",
            half_life_s=3600,
            **common,
        )
        usage = record_attempt(
            s,
            attempt=2,
            cards=2,
            phases=Phases(1.0, 4.0, 0.5),
            outcome="succeeded",
            half_life_s=3600,
            **common,
        )
    assert usage == {
        "card_seconds": 11.0,
        "phases": {"load": 2.0, "generate": 8.0, "finish": 1.0},
        "cards": 2,
        "card_kind": "cpu",
        "attempts": 2,
        "wasted_card_seconds": 6.0,
    }
    with db.session() as s:
        levels = fair_shares.levels(s, {}, half_life_s=3600)
    assert levels["acme"] == pytest.approx(11.0, rel=1e-3)  # only the charged attempt counts
    assert (
        add_attempt({}, phases=Phases(0.0, 1.0, 0.0), cards=4, card_kind="npu", charged=True)["card_seconds"]
        == 4.0
    )


def test_measured_speeds_fit_a_line_and_loads_an_average(db: Database) -> None:
    with db.session() as s:
        for seconds in (2.0, 4.0, 8.0, 16.0):
            costs.record_generation(
                s, model="m", kind="cpu", output_s=seconds, generate_s=1.0 + 0.5 * seconds
            )
        costs.record_load(s, model="m", kind="cpu", seconds=10.0)
        costs.record_load(s, model="m", kind="cpu", seconds=20.0)
    with db.session() as s:
        row = s.scalar(select(ModelSpeed).where(ModelSpeed.model == "m"))
        assert row is not None
        line = costs.fit(row)
        assert (
            line is not None
            and line[0] == pytest.approx(0.5, abs=1e-6)
            and line[1] == pytest.approx(1.0, abs=1e-6)
        )
        assert row.loads == 2 and row.load_s == pytest.approx(13.0)


def test_the_stored_forecast_reads_back() -> None:
    stored = parse(
        {
            "at": 100.0,
            "jobs": {"a": [110.0, 120.0]},
            "next_start": [["m", 0, "*", 130.0]],
            "spacing": [["m", 0, "t", 5.0]],
            "no_group": ["x"],
            "not_measured": ["m"],
            "run_s": {"m": [1.0, 2.0]},
        }
    )
    assert stored is not None and stored.forecast.jobs["a"] == (110.0, 120.0)
    assert stored.forecast.start_of(job_id="zz", model="m", priority=0, tenant="new") == 130.0
    assert stored.forecast.start_of(job_id="zz", model="x", priority=0, tenant="new") is None
    assert parse({}) is None


def t2v_jobs(
    db: Database, count: int, *, tenant: str, priority: int, offset: float = 0.0, done: bool = False
) -> list[uuid.UUID]:
    """``count`` text2video jobs of ``tenant``, a minute of video each, created ``offset`` seconds
    from now (succeeded when ``done``)."""
    made = [
        new_job(db, priority=priority, created_offset=offset, params={"prompt": "x", "num_frames": 16})
        for _ in range(count)
    ]
    with db.session() as s:
        for job_id in made:
            row = s.get(Job, job_id)
            assert row is not None
            row.tenant, row.output_seconds = tenant, 60.0
            if done:
                row.status = JobStatus.SUCCEEDED
    return made


def test_the_forecast_expects_yesterdays_batches_from_the_jobs_table(db: Database) -> None:
    """Yesterday beta queued 10 batch jobs two minutes from now (on the clock); today alpha has
    10 queued, a minute of video each. Expecting beta again, the forecast puts alpha's last job at
    least four jobs later: beta takes turns."""
    online_group(db, "g1", ["reference-t2v"])
    catalog = default_catalog()
    settings = Settings(queue_batch_priority=6)
    alpha = t2v_jobs(db, 10, tenant="alpha", priority=6)
    t2v_jobs(db, 10, tenant="beta", priority=6, offset=120.0 - DAY, done=True)
    last = str(alpha[-1])
    with db.session() as s:
        learned = compute(s, catalog, settings)
        plain = compute(s, catalog, settings.model_copy(update={"forecast_expects_yesterday": False}))
    assert learned["jobs"][last][0] - plain["jobs"][last][0] > 4 * 60.0
    assert not any(job_id.startswith("expected:") for job_id in learned["jobs"])


def test_the_forecast_expects_yesterdays_bunch_of_interactive_jobs_from_the_jobs_table(db: Database) -> None:
    """Yesterday beta submitted 10 interactive jobs at once two minutes from now (on the clock), and
    one more an hour later; today alpha has 10 batch jobs queued, a minute of video each. Expecting
    beta's bunch again (interactive runs first), the forecast puts alpha's last job at least eight
    jobs later; beta's lone job later is not expected."""
    online_group(db, "g1", ["reference-t2v"])
    catalog = default_catalog()
    settings = Settings(queue_batch_priority=6)
    alpha = t2v_jobs(db, 10, tenant="alpha", priority=6)
    bunch = t2v_jobs(db, 10, tenant="beta", priority=0, offset=120.0 - DAY, done=True)
    t2v_jobs(db, 1, tenant="beta", priority=0, offset=3720.0 - DAY, done=True)  # alone
    last = str(alpha[-1])
    with db.session() as s:
        learned = compute(s, catalog, settings)
        plain = compute(s, catalog, settings.model_copy(update={"forecast_expects_yesterday": False}))
        engine = eta._engine(s, read_state(s, catalog, settings), settings, catalog)  # noqa: SLF001
        history = eta._history(s, engine, settings)  # noqa: SLF001
    assert learned["jobs"][last][0] - plain["jobs"][last][0] > 8 * 60.0
    expected = recurring(history, engine.now, lowest=6, costs=engine.models)
    assert sorted(j.id for j in expected) == sorted(f"{EXPECTED}{j}" for j in bunch)


def test_a_day_of_interactive_jobs_never_crowds_yesterdays_batch_out_of_the_history(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The history the forecast reads is capped per span; batch jobs are read first."""
    monkeypatch.setattr(eta, "HISTORY_ROWS", 5)
    online_group(db, "g1", ["reference-t2v"])
    catalog, settings = default_catalog(), Settings(queue_batch_priority=6)
    t2v_jobs(db, 8, tenant="beta", priority=0, offset=60.0 - DAY, done=True)
    batch = t2v_jobs(db, 3, tenant="beta", priority=6, offset=120.0 - DAY, done=True)
    with db.session() as s:
        engine = eta._engine(s, read_state(s, catalog, settings), settings, catalog)  # noqa: SLF001
        history = eta._history(s, engine, settings)  # noqa: SLF001
    assert {str(j) for j in batch} <= {job.id for job in history}
    assert len(history) == 5


def test_a_tenant_that_starts_competing_is_lifted_to_the_waiting_level_less_the_credit(db: Database) -> None:
    """alpha has waited with 50,000 charged card-seconds; beta, new, submits: it comes in at alpha's
    level less 60 s of every online card, not at 0 (idleness banks nothing), and a second job of
    beta's lifts nothing more. With nobody waiting, gamma comes in at the floor the dispatcher saw."""
    settings = Settings()
    online_group(db, "g1", ["reference-t2v"])
    online_group(db, "g2", ["reference-t2v"])
    now = utcnow()
    with db.session() as s:
        s.add(TenantShare(tenant="alpha", usage=50_000.0, as_of=now))
    t2v_jobs(db, 3, tenant="alpha", priority=6)
    t2v_jobs(db, 1, tenant="beta", priority=6)
    with db.session() as s:
        assert fair_shares.start_competing(
            s, tenant="beta", inserted=1, catalog=default_catalog(), settings=settings, now=now
        )
    with db.session() as s:
        levels = fair_shares.levels(s, {}, half_life_s=3600, now=now)
        beta = s.get(TenantShare, "beta")
        assert beta is not None and beta.activated_at is not None
    assert levels["beta"] == pytest.approx(50_000.0 - 60.0 * 2)
    t2v_jobs(db, 1, tenant="beta", priority=6)
    with db.session() as s:  # beta already had a job waiting: nothing changes
        assert not fair_shares.start_competing(
            s, tenant="beta", inserted=1, catalog=default_catalog(), settings=settings, now=now
        )
    # Nobody else waits when gamma arrives: it comes in at the floor (decayed), less the credit.
    with db.session() as s:
        s.execute(update(Job).where(Job.status == JobStatus.QUEUED).values(status=JobStatus.SUCCEEDED))
        fair_shares.note_floor(s, 40_000.0, now=now - timedelta(hours=1))
    t2v_jobs(db, 1, tenant="gamma", priority=6)
    with db.session() as s:
        assert fair_shares.start_competing(
            s, tenant="gamma", inserted=1, catalog=default_catalog(), settings=settings, now=now
        )
        assert fair_shares.levels(s, {}, half_life_s=3600, now=now)["gamma"] == pytest.approx(
            20_000.0 - 120.0, rel=1e-3
        )
    # A floor within the credit lifts nothing (levels are never below 0): delta starts at 0, and
    # its activation is recorded all the same.
    with db.session() as s:
        s.execute(update(Job).where(Job.status == JobStatus.QUEUED).values(status=JobStatus.SUCCEEDED))
        fair_shares.note_floor(s, 100.0, now=now)
    t2v_jobs(db, 1, tenant="delta", priority=6)
    with db.session() as s:
        assert fair_shares.start_competing(
            s, tenant="delta", inserted=1, catalog=default_catalog(), settings=settings, now=now
        )
    with db.session() as s:
        delta = s.get(TenantShare, "delta")
        assert delta is not None and delta.activated_at is not None and delta.usage == 0.0


def test_the_dispatcher_orders_by_level_and_charges_a_dispatched_job_its_estimate(db: Database) -> None:
    settings = Settings()
    online_group(db, "g1", ["reference-t2v"])
    t2v_jobs(db, 2, tenant="alpha", priority=6)
    with db.session() as s:
        snapshot = read_state(s, default_catalog(), settings)
    assert snapshot.state.usage == {}  # nothing charged, nothing on the cards
    with db.session() as s:  # one of alpha's jobs handed to g1: its estimate counts at once
        job = s.scalars(select(Job).where(Job.tenant == "alpha")).first()
        assert job is not None
        job.dispatched_to = "g1"
    with db.session() as s:
        snapshot = read_state(s, default_catalog(), settings)
        cost = snapshot.state.models["reference-t2v"]
    assert snapshot.state.usage["alpha"] == pytest.approx(cost.card_seconds(60.0))


def test_a_job_that_started_past_its_eta_between_two_forecasts_is_revised_by_the_next(db: Database) -> None:
    """Two queued jobs are shown ETAs; both are handed out before the next forecast, one 30 s after
    its ETA (within the 60 s margin), one 150 s after: the next forecast records a revision for the
    late one only, its new ETA the start and a cause in words (E3: every slip has a revision)."""
    online_group(db, "g1", ["reference-t2v"])
    catalog, settings = default_catalog(), Settings()
    on_time, late = t2v_jobs(db, 2, tenant="alpha", priority=0)
    assert eta.refresh(db, catalog, settings, force=True)
    with db.session() as s:
        stored = s.get(FleetForecast, 1)
        assert stored is not None
        published = json.loads(stored.body)["published"]
    shown = {job: published[str(job)] for job in (on_time, late)}
    for job, after_s in ((on_time, 30.0), (late, 150.0)):
        started = datetime.fromtimestamp(shown[job] + after_s, UTC)
        with db.session() as s:
            s.execute(
                update(Job)
                .where(Job.id == job)
                .values(status=JobStatus.RUNNING, dispatched_to="g1", enqueued_at=started, claimed_at=started)
            )
    assert eta.refresh(db, catalog, settings, force=True)
    with db.session() as s:
        logs = {job: s.get(Job, job).eta_revisions for job in (on_time, late)}  # type: ignore[union-attr]
    assert not logs[on_time]
    (revision,) = logs[late] or []
    assert datetime.fromisoformat(revision["new"]).timestamp() == pytest.approx(shown[late] + 150.0)
    assert datetime.fromisoformat(revision["old"]).timestamp() == pytest.approx(shown[late], abs=0.01)
    assert revision["cause"]

"""Card groups that take no job, for a while or for good: a drain (its worker was asked to stop), an
unhealthy card, and retirement (down past the retention, or forgotten). On SQLite copies, with the
real dispatcher, claim and reaper functions; no worker process."""

from __future__ import annotations

import uuid
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import select, update

from jobservice.broker import JobMessage
from jobservice.catalog import Catalog
from jobservice.db.engine import Database
from jobservice.db.tables import FleetGroup, Job, LedgerSpan, WorkerRecord, utcnow
from jobservice.errors import Conflict, NotFound
from jobservice.fleet import card_groups
from jobservice.fleet.dispatch import dispatch, free_group_for
from jobservice.fleet.placement import parse_devices
from jobservice.fleet.status import fleet_status
from jobservice.jobs.queries import get_job
from jobservice.jobs.reaper import hand_back
from jobservice.jobs.transitions import claim_job
from jobservice.metrics import live
from jobservice.settings import Settings
from tests.factories import down_for, new_job, online_group
from workers.card_group import FleetMember
from workers.card_health import CardHealth
from workers.maintenance import Maintenance

T2V = "reference-t2v"
SICK = ["npu:0: npu-smi reports its health as Warning."]


@pytest.fixture
def settings(offline_settings: Settings) -> Settings:
    return offline_settings  # not the Redis-backed one: nothing here reaches a service


class Bell:
    """The dispatch bell, counted."""

    def __init__(self) -> None:
        self.rings = 0

    def ring(self) -> None:
        self.rings += 1


def member(db: Database, catalog: Catalog, group_id: str = "g1") -> FleetMember:
    services: Any = SimpleNamespace(db=db, catalog=catalog, dispatch_bell=Bell())
    return FleetMember(
        services, group_id=group_id, device=parse_devices("cpu"), memory_gb_per_card=None, eligible=[T2V]
    )


def rings(of: FleetMember) -> int:
    bell: Any = of.services.dispatch_bell
    return int(bell.rings)


def handed(db: Database, catalog: Catalog, settings: Settings) -> list[tuple[uuid.UUID, str]]:
    sent: list[JobMessage] = []
    dispatch(db, catalog, settings, sent.append)
    return [(m.job_id, m.group) for m in sent]


def group_row(db: Database, group_id: str = "g1") -> FleetGroup:
    with db.session() as s:
        group = s.get(FleetGroup, group_id)
    assert group is not None
    return group


def job_row(db: Database, job_id: uuid.UUID) -> Job:
    with db.session() as s:
        job = get_job(s, job_id)
    assert job is not None
    return job


def spans(db: Database, group_id: str = "g1") -> list[LedgerSpan]:
    with db.session() as s:
        query = select(LedgerSpan).where(LedgerSpan.group_id == group_id).order_by(LedgerSpan.id)
        return list(s.scalars(query))


def assert_tiled(rows: list[LedgerSpan], *, open_span: bool = True) -> None:
    assert [r.ended_at for r in rows].count(None) == (1 if open_span else 0)
    for before, after in zip(rows, rows[1:], strict=False):
        assert before.ended_at == after.started_at, (before.state, after.state)


# --- an unhealthy card ----------------------------------------------------------------------------
def test_an_unhealthy_group_takes_no_job_until_its_cards_are_healthy_again(
    db: Database, catalog: Catalog, settings: Settings
) -> None:
    online_group(db, "g1", [T2V])
    sick = member(db, catalog)
    sick.health(SICK)
    group = group_row(db)
    assert group.state == "unhealthy" and group.health == SICK and not group.accepting
    job_id = new_job(db)
    assert not free_group_for(db, [T2V])  # the API does not even ring for it
    assert handed(db, catalog, settings) == []  # the dispatcher skips it

    sick.health([])
    assert group_row(db).state == "idle_empty" and group_row(db).health is None
    assert rings(sick) == 1  # back: a round is asked for at once
    assert handed(db, catalog, settings) == [(job_id, "g1")]
    rows = spans(db)
    assert [r.state for r in rows][-3:] == ["idle_empty", "unhealthy", "idle_empty"]
    assert_tiled(rows)


def test_a_card_that_falls_ill_mid_job_leaves_the_job_running_and_the_group_unhealthy_after(
    db: Database, catalog: Catalog
) -> None:
    online_group(db, "g1", [T2V])
    with db.session() as s:
        card_groups.set_state(s, "g1", "generating", model=T2V, job_id=uuid.uuid4())
    member(db, catalog).health(SICK)
    assert group_row(db).state == "generating"  # the running job is not cut short
    with db.session() as s:
        card_groups.to_idle(s, "g1")  # its job ends
    assert group_row(db).state == "unhealthy"


def test_a_worker_refuses_a_claim_while_its_group_takes_no_job_and_hands_the_job_back(
    db: Database, catalog: Catalog
) -> None:
    online_group(db, "g1", [T2V])
    job_id = new_job(db)
    with db.session() as s:
        s.execute(update(Job).where(Job.id == job_id).values(dispatched_to="g1", enqueued_at=utcnow()))
    member(db, catalog).health(SICK)  # after it was dispatched: its message is already on its way
    with db.session() as s:
        assert claim_job(s, job_id, worker_id="g1#1", lease_seconds=30, group="g1") is None
    assert hand_back(db, job_id, "g1")
    assert job_row(db, job_id).dispatched_to is None and job_row(db, job_id).status == "queued"
    member(db, catalog).health([])
    with db.session() as s:  # healthy again: a claim goes through
        s.execute(update(Job).where(Job.id == job_id).values(dispatched_to="g1"))
        assert claim_job(s, job_id, worker_id="g1#1", lease_seconds=30, group="g1") is not None


class Cards:
    """A card monitor that says what the test wants."""

    def __init__(self, *cards: CardHealth) -> None:
        self.cards: list[CardHealth] | None = list(cards)

    def read(self) -> list[CardHealth] | None:
        return self.cards

    def close(self) -> None:
        pass


def card(index: int, *problems: str) -> CardHealth:
    return CardHealth("npu", index, "910B3", 65536.0, 1024.0, not problems, problems, "npu-smi")


def test_the_maintenance_round_reads_the_cards_and_names_each_problem(
    db: Database, catalog: Catalog, settings: Settings
) -> None:
    online_group(db, "g1", [T2V])
    cards = Cards(card(0), card(1, "npu-smi reports its health as Critical."))
    services: Any = SimpleNamespace(db=db, catalog=catalog, settings=settings, dispatch_bell=Bell())
    upkeep = Maintenance(
        services,
        worker_id="g1",
        devices="npu:0,1",
        models=[T2V],
        info={},
        member=member(db, catalog),
        cards=cards,  # type: ignore[arg-type]
    )
    upkeep.check_health()
    assert group_row(db).health == ["npu:1: npu-smi reports its health as Critical."]
    cards.cards = None  # nothing to read (the tool failed): nothing changes
    upkeep.check_health()
    assert group_row(db).state == "unhealthy"
    cards.cards = [card(0), card(1)]
    upkeep.check_health()
    assert group_row(db).accepting and group_row(db).state == "idle_empty"


# --- a drain --------------------------------------------------------------------------------------
def test_a_draining_group_hands_back_its_next_job_and_is_sent_nothing(
    db: Database, catalog: Catalog, settings: Settings
) -> None:
    online_group(db, "g1", [T2V])
    first = new_job(db)
    assert handed(db, catalog, settings) == [(first, "g1")]  # its next job, not yet claimed
    stopping = member(db, catalog)
    assert stopping.drain() == [first]
    assert job_row(db, first).dispatched_to is None  # back in the table at once
    assert rings(stopping) == 1  # and another group may take it now
    group = group_row(db)
    assert group.draining_since is not None and group.next_job_id is None and not group.accepting
    assert handed(db, catalog, settings) == []  # the dispatcher sends it nothing
    online_group(db, "g2", [T2V])
    assert handed(db, catalog, settings) == [(first, "g2")]
    online_group(db, "g1", [T2V])  # its worker starts again: it takes jobs
    assert group_row(db).accepting


# --- retirement -----------------------------------------------------------------------------------
def test_a_group_down_past_the_retention_is_retired_with_its_history_kept(
    db: Database, catalog: Catalog, settings: Settings
) -> None:
    for name in ("old", "recent", "live"):
        online_group(db, name, [T2V])
    with db.session() as s:
        card_groups.note_loaded(s, "old", T2V, seconds=1.0, reason="job")
    down_for(db, "old", 25)
    down_for(db, "recent", 1)
    retired = card_groups.retire_lost_groups(db, retention_seconds=24 * 3600, stale_after_seconds=15)
    assert retired == ["old"]
    old = group_row(db, "old")
    assert old.retired_at is not None and old.resident == {}
    rows = spans(db, "old")
    assert_tiled(rows, open_span=False)  # its ledger is closed ...
    assert rows[-1].state == "down"
    assert rows[-1].ended_at == rows[-1].started_at + timedelta(hours=24)  # ... at the retention's end
    with db.session() as s:
        shown = {g["id"] for g in fleet_status(s, catalog, settings)["groups"]}
        on_metrics = {g.id for g in live.groups(s, catalog)}
    assert shown == on_metrics == {"recent", "live"}
    assert card_groups.retire_lost_groups(db, retention_seconds=24 * 3600, stale_after_seconds=15) == []

    online_group(db, "old", [T2V])  # its worker comes back after all: the same group, a new stretch
    assert group_row(db, "old").retired_at is None
    assert spans(db, "old")[-1].state == "idle_empty" and spans(db, "old")[-1].ended_at is None


def test_an_operator_forgets_a_group_whose_worker_is_gone_but_never_an_online_one(db: Database) -> None:
    online_group(db, "gone", [T2V])
    online_group(db, "live", [T2V])
    with db.session() as s:
        s.execute(update(WorkerRecord).where(WorkerRecord.id == "gone").values(stopped_at=utcnow()))
    with pytest.raises(Conflict) as refused:
        card_groups.forget(db, "live", stale_after_seconds=15)
    assert refused.value.code == "group_online" and "stop its worker first" in refused.value.message
    with pytest.raises(NotFound):
        card_groups.forget(db, "nobody", stale_after_seconds=15)
    first = card_groups.forget(db, "gone", stale_after_seconds=15)
    assert card_groups.forget(db, "gone", stale_after_seconds=15) == first  # again: the same answer
    assert group_row(db, "gone").retired_at == first
    assert_tiled(spans(db, "gone"), open_span=False)

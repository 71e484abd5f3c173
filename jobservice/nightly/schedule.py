"""The control process (``jobservice beat``): Celery beat plus a light consumer of one queue.

Workers only consume ``model.<id>`` queues and run one job at a time, so the nightly schedule has
its own small process: Celery beat publishes, at each cron time of ``JOBSERVICE_BATCH_SCHEDULES``,
a task on the ``jobservice.control`` queue, and the same process (a solo-pool Celery worker with an
embedded beat) consumes it: it loads the spec from the batch root, plans and creates the batch.
Every ``JOBSERVICE_BATCH_TICK_SECONDS`` a tick finishes batches whose jobs all ended (so reports
exist without anyone asking); a batch is created with all its jobs, so none is left half-made.

A batch created by a schedule has the idempotency key ``beat:<schedule>:<fire time>``, where the
fire time is the cron's own scheduled time (the latest at or before now, in the schedule's time
zone), not the moment the task happens to run: a redelivered message, or a second beat process
whose message arrives a minute later, never creates the same night's batch twice.
"""

from __future__ import annotations

import hashlib
import logging
import time
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from celery import Celery, signals
from celery.schedules import crontab, schedule
from croniter import CroniterBadDateError, croniter
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from sqlalchemy import select

from jobservice import tracing
from jobservice.broker import make_celery
from jobservice.db.tables import Batch
from jobservice.retention import PeriodicCollector
from jobservice.settings import Settings
from jobservice.webhooks.tasks import beat_entries as webhook_beat_entries
from jobservice.webhooks.tasks import register as register_webhook_tasks
from jobservice.wiring import Services, build_services

log = logging.getLogger(__name__)

CONTROL_QUEUE = "jobservice.control"
RUN_SCHEDULED_TASK = "jobservice.batch.run_scheduled"
TICK_TASK = "jobservice.batch.tick"
GC_TASK = "jobservice.retention.gc"  # expired files and orphans (jobservice.retention)
# A task may run a little "before" its fire time when a second beat's clock is ahead of this one's.
CLOCK_SKEW_SECONDS = 5.0
LOOKBACK_YEARS = 8  # a cron firing more rarely (29 February on Mondays) falls back to the minute


class ScheduleEntry(BaseModel):
    """One configured nightly run: a spec (under the batch root) and when to run it."""

    model_config = ConfigDict(extra="forbid")

    spec: str = Field(min_length=1)
    cron: str | None = Field(default=None, description="Five fields: minute hour day month weekday.")
    every_seconds: float | None = Field(default=None, ge=1, description="For tests and demos.")
    name: str | None = None

    @model_validator(mode="after")
    def _when(self) -> ScheduleEntry:
        if (self.cron is None) == (self.every_seconds is None):
            raise ValueError("give exactly one of 'cron' or 'every_seconds'")
        if self.cron is not None:
            cron_schedule(self.cron)
        return self

    @property
    def key(self) -> str:
        """The schedule's name in beat and in batch idempotency keys."""
        return self.name or self.spec


def cron_schedule(expression: str) -> crontab:
    """A Celery crontab from a five-field cron expression; ValueError if it is not one."""
    fields = expression.split()
    if len(fields) != 5:
        raise ValueError(
            f"cron '{expression}' must have 5 fields: minute hour day-of-month month day-of-week"
        )
    minute, hour, day, month, weekday = fields
    return crontab(minute=minute, hour=hour, day_of_month=day, month_of_year=month, day_of_week=weekday)


def parse_schedules(raw: list[dict[str, Any]]) -> list[ScheduleEntry]:
    """Check ``JOBSERVICE_BATCH_SCHEDULES``; a ValueError names the bad entry."""
    entries = []
    for index, item in enumerate(raw):
        try:
            entries.append(ScheduleEntry.model_validate(item))
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            field = ".".join(str(p) for p in first["loc"])
            where = f"JOBSERVICE_BATCH_SCHEDULES[{index}]" + (f".{field}" if field else "")
            raise ValueError(f"{where}: {first['msg']}") from None
    keys = [e.key for e in entries]
    if len(set(keys)) != len(keys):
        raise ValueError("JOBSERVICE_BATCH_SCHEDULES: two entries share a spec; give them distinct 'name's")
    return entries


def beat_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    """Celery's ``beat_schedule``: each configured spec, the periodic tick and the retention gc."""
    plan: dict[str, dict[str, Any]] = {
        "batch-tick": {
            "task": TICK_TASK,
            "schedule": schedule(timedelta(seconds=settings.batch_tick_seconds)),
            "options": {"queue": CONTROL_QUEUE, "expires": settings.batch_tick_seconds},
        },
        "retention-gc": {
            "task": GC_TASK,
            "schedule": schedule(timedelta(seconds=settings.gc_interval_seconds)),
            "options": {"queue": CONTROL_QUEUE, "expires": settings.gc_interval_seconds},
        },
    }
    plan.update(webhook_beat_entries(settings))  # the webhook outbox sweep (jobservice.webhooks)
    for entry in parse_schedules(settings.batch_schedules):
        every = (
            cron_schedule(entry.cron) if entry.cron else schedule(timedelta(seconds=entry.every_seconds or 0))
        )
        plan[f"batch:{entry.key}"] = {
            "task": RUN_SCHEDULED_TASK,
            "schedule": every,
            "args": [entry.key, entry.spec, entry.every_seconds or 60.0, entry.cron],
            "options": {"queue": CONTROL_QUEUE},
        }
    return plan


def last_fire_time(cron: str, now: datetime) -> datetime | None:
    """The latest minute at or before ``now`` (aware, in the schedule's zone) at which ``cron`` fires.

    Day of month and day of week must both match, as in Celery's crontab (``day_or=False``). None
    when the cron did not fire in the last ``LOOKBACK_YEARS`` years.
    """
    cron_schedule(cron)  # the same five-field check as the beat's own schedule
    # croniter's get_prev is strictly before its start; start at the next minute so a cron that
    # fires in the current minute counts as fired.
    start = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    try:
        fired = croniter(cron, start, day_or=False, max_years_between_matches=LOOKBACK_YEARS).get_prev(
            datetime
        )
    except CroniterBadDateError:
        return None
    return fired if isinstance(fired, datetime) else None


def schedule_slot(*, cron: str | None, period_seconds: float, timezone: str, now: float | None = None) -> str:
    """Which firing of a schedule a task belongs to: the cron's fire time, or the period's number."""
    now = time.time() if now is None else now
    if cron:
        moment = datetime.fromtimestamp(now + CLOCK_SKEW_SECONDS, ZoneInfo(timezone))
        fired = last_fire_time(cron, moment)
        if fired is not None:
            return fired.strftime("%Y-%m-%dT%H:%M")
    return str(int(now // period_seconds))  # every_seconds schedules (tests and demos)


def scheduled_key(name: str, slot: str) -> str:
    """The idempotency key of a schedule's batch; a long name is hashed to keep the slot in 255."""
    key = f"beat:{name}:{slot}"
    if len(key) <= 255:
        return key
    return f"beat:{hashlib.sha256(name.encode()).hexdigest()}:{slot}"


def run_scheduled(
    services: Services,
    *,
    name: str,
    spec: str,
    period_seconds: float,
    cron: str | None = None,
    now: float | None = None,
) -> str | None:
    """Create the batch of schedule ``name``; returns its id (None when the spec is unusable)."""
    from jobservice.groups.service import refresh_etas
    from jobservice.nightly.plan import plan_batch
    from jobservice.nightly.service import create_batch
    from jobservice.nightly.spec import SpecError, load_spec_file, resolve_under

    root = services.settings.batch_root.resolve()
    slot = schedule_slot(
        cron=cron, period_seconds=period_seconds, timezone=services.settings.batch_timezone, now=now
    )
    try:
        loaded = load_spec_file(resolve_under(root, spec, what="scheduled spec"))
        with plan_batch(services, loaded, confine_to=root) as plan:
            batch, created = create_batch(
                services, plan, source="beat", idempotency_key=scheduled_key(name, slot)
            )
            if created:
                refresh_etas(services, batch.id)
    except SpecError as exc:
        log.error("schedule %s: the spec %s cannot be run: %s", name, spec, exc.message)
        return None
    log.info(
        "schedule %s (%s): batch %s %s", name, slot, batch.id, "created" if created else "already existed"
    )
    return str(batch.id)


def tick(services: Services) -> dict[str, int]:
    """Finish the running batches whose jobs all ended (a batch is created with all its jobs, so
    there is no half-made one to resume)."""
    from jobservice.nightly.finalize import refresh_batch
    from jobservice.nightly.states import BatchStatus

    with services.db.session() as session:
        running = list(session.scalars(select(Batch.id).where(Batch.status == BatchStatus.RUNNING)))
    finished = 0
    for batch_id in running:
        try:
            finished += refresh_batch(services, batch_id).status == BatchStatus.FINISHED
        except Exception:  # noqa: BLE001 - one broken batch must not stop the others
            log.exception("batch %s: finishing failed", batch_id)
    return {"finished": finished}


def make_control_app(settings: Settings | None = None) -> Celery:
    """The Celery app of ``jobservice beat``: the schedule and the two control tasks."""
    settings = settings or Settings()
    services = build_services(settings)
    app = make_celery(settings)
    app.conf.update(
        beat_schedule=beat_schedule(settings),
        timezone=settings.batch_timezone,
        task_default_queue=CONTROL_QUEUE,
        beat_max_loop_interval=min(60.0, settings.batch_tick_seconds),
    )

    @app.task(name=RUN_SCHEDULED_TASK, ignore_result=True, acks_late=True)
    def run_scheduled_task(
        name: str, spec: str, period_seconds: float = 60.0, cron: str | None = None
    ) -> str | None:
        """Beat fired schedule ``name``: create its batch."""
        return run_scheduled(services, name=name, spec=spec, period_seconds=period_seconds, cron=cron)

    @app.task(name=TICK_TASK, ignore_result=True)
    def tick_task() -> dict[str, int]:
        """Finish the batches whose jobs all ended."""
        return tick(services)

    register_webhook_tasks(app, services.db, settings)  # jobservice.deliver_webhook and the sweep
    # The beat's worker runs its tasks in its own process (the solo pool): tracing starts with it.
    signals.worker_init.connect(
        lambda **_: tracing.init_process(settings, service="jobservice-beat"), weak=False
    )
    collector = PeriodicCollector(services)

    @app.task(name=GC_TASK, ignore_result=True)
    def gc_task() -> dict[str, Any]:
        """Delete expired jobs' files; orphans on the first run and hourly; rotate var/ logs."""
        return collector()

    return app

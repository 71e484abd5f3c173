"""ETAs: when each queued job should start and finish, from the policy run forward.

The forecast copies the fleet as it is now (what each group holds and runs, until when; the queue
in fair order; the tenants' usage), plays it forward in virtual time with the production policy
(``jobservice.fleet.simulate``) until every queued job and every probe has started, and notes each
job's start and finish. It also asks, for each (model, priority, tenant) and for a tenant with no
usage at all, "when would a job submitted now start?" with what-if probes that are picked like jobs
but never run (in their tenant's order: after the jobs it queued, before the ones it is expected
to submit later), so a job submitted after the forecast gets an honest ETA without waiting for
the next one.

What is not queued yet is expected as it arrived lately: the copy keeps the arrival rates of now
(they would otherwise age out of the rate window as its clock runs on, and a group kept for a
model whose jobs keep coming would be seen to leave it), and each model submitted lately gets one
more job like its last, 1 / its rate from now: a model no group holds then takes a group back in
the forecast as it will in the fleet. (Playing every expected arrival would cost a forecast far
more than it gains: measured on the shipped traces, the one next job is what moves the ETAs.)

What arrived one day ago is expected again (``recurring``): nightly batches come at the same time
every night, and a tenant that queues 300 jobs every night a minute after another's 900 takes its
share of cards each night. So do bunches of interactive jobs (``bunched``: a team that submits
twenty previews within a minute at 10:00 tends to again), while the interactive stream of single
requests is left to the rates above. Each such job submitted in the next ``ahead`` seconds a day
ago is expected at the same time today, and a batch may come up to an hour off its time: one whose
like came early today is matched with it (not expected twice), and a batch of the last hour of which
nothing has come today is late, expected from now on. A service running less than a day has only the
rates above to go on; a night unlike the last gets ETAs that move as it unfolds.

Jobs past ``horizon`` starts are not played one by one: each gets its sub-queue's last forecast
start plus its place times the sub-queue's spacing (the mean gap between its forecast starts).

The service refreshes the forecast every few seconds and after a submission of many jobs at once;
``scripts/bench_fleet.py`` does the same in virtual time, so its ETA errors are the service's.
"""

from __future__ import annotations

import copy
import itertools
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from jobservice.fleet.policy import ModelCost, can_host
from jobservice.fleet.simulate import Engine, SimJob

FRESH = "*"  # the probes' tenant that has used nothing (every real tenant name is a slug)
EXPECTED = "expected:"  # the id prefix of a forecast's expected arrivals
DAY = 86400.0
AHEAD = DAY / 2  # how far ahead yesterday's arrivals are expected again
SLACK = 3600.0  # a batch that comes this much ahead of or behind yesterday's time is the same batch
Key = tuple[str, int, str]  # (model, priority, tenant)


@dataclass(frozen=True)
class Forecast:
    """A forecast made at ``at``: starts and finishes by job id, and what a new job would get."""

    at: float
    jobs: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # id -> (start, finish)
    next_start: Mapping[Key, float] = field(default_factory=dict)  # a job submitted at ``at``
    spacing: Mapping[Key, float] = field(default_factory=dict)  # seconds between its starts
    unservable: frozenset[str] = frozenset()  # models no group can run

    def start_of(
        self, *, job_id: str, model: str, priority: int, tenant: str, behind: int = 0
    ) -> float | None:
        """When a job should start: its own forecast, else when a job its tenant submitted at the
        forecast's time would start, plus ``behind`` gaps for the jobs it submitted since before it.
        None when no group can run the model."""
        if job_id in self.jobs:
            return self.jobs[job_id][0]
        if model in self.unservable:
            return None
        key = (model, priority, tenant)
        first = self.next_start.get(key)
        if first is None:
            first = self.next_start.get((model, priority, FRESH))
        if first is None:
            return None
        gap = self.spacing.get(key, self.spacing.get((model, priority, FRESH), 0.0))
        return first + max(0, behind) * gap


def fork(engine: Engine) -> Engine:
    """A copy of ``engine`` that can be played forward without touching the original."""
    twin = copy.copy(engine)
    twin.groups = dict(engine.groups)
    twin.running = {g: copy.copy(j) for g, j in engine.running.items()}
    twin.queues = {k: deque(copy.copy(j) for j in q) for k, q in engine.queues.items()}
    twin._output_s = dict(engine._output_s)  # noqa: SLF001 - the twin's own running sums
    twin.usage = copy.deepcopy(engine.usage)
    twin.activated = dict(engine.activated)
    twin.floor = copy.copy(engine.floor)
    twin.arrivals = {model: deque(times) for model, times in engine.arrivals.items()}
    twin.interactive_arrivals = {m: deque(times) for m, times in engine.interactive_arrivals.items()}
    twin.turns = dict(engine.turns)
    twin.loads, twin.done, twin.on_dispatch = [], [], []
    twin.probes, twin.probe_starts = {}, {}
    twin._events = list(engine._events)  # noqa: SLF001 - the twin continues the same timeline
    twin._expected = list(engine._expected)  # noqa: SLF001
    twin.latest = dict(engine.latest)
    return twin


def bunched(jobs: Iterable[SimJob], costs: Mapping[str, ModelCost]) -> set[str]:
    """The ids of jobs submitted in bunches: each with another job of the same model, priority and
    tenant submitted within one run time (by ``costs``) of the earlier of the two. A job alone in
    its span is a single request, which the arrival rates stand for."""
    found: set[str] = set()
    ordered = sorted(jobs, key=lambda j: (j.model, j.priority, j.tenant, j.submitted, j.id))
    for _, members in itertools.groupby(ordered, key=lambda j: (j.model, j.priority, j.tenant)):
        previous: SimJob | None = None
        for job in members:
            cost = costs.get(job.model)
            if previous is not None and cost is not None:
                if job.submitted - previous.submitted <= cost.run_s(previous.output_s):
                    found.update((previous.id, job.id))
            previous = job
    return found


def recurring(
    history: Iterable[SimJob],
    now: float,
    *,
    lowest: int = 0,
    costs: Mapping[str, ModelCost] | None = None,
    period: float = DAY,
    ahead: float = AHEAD,
    slack: float = SLACK,
) -> list[SimJob]:
    """What arrived one ``period`` ago in the next ``ahead`` seconds, expected again (see the module
    docstring). ``history`` holds at least every job submitted in (now - period - slack,
    now - period + ahead] and in (now - slack, now]. Jobs of priority ``lowest`` or below (a larger
    number) are expected again: batches that recur; so are, given ``costs``, interactive jobs that
    came in bunches (``bunched``), not the single requests of the interactive stream, which the
    rates of now stand for.

    A batch may come up to ``slack`` seconds off yesterday's time. For each (model, priority,
    tenant), today's arrivals of the last ``slack`` seconds are set against yesterday's of the same
    span: more today (it came early) drop as many of the first expected ones; none today (it is
    late) leave yesterday's owed, expected from now on with yesterday's spacing. (Fewer, not none,
    expect nothing more: a batch that came smaller than yesterday's is not waited for.)"""
    yesterday = now - period
    jobs = list(history)
    bunch = bunched((j for j in jobs if j.priority < lowest), costs) if costs is not None else set()
    due: dict[Key, list[SimJob]] = {}
    came: Counter[Key] = Counter()  # arrived in (now - slack, now]
    owed: dict[Key, list[SimJob]] = {}  # arrived in (yesterday - slack, yesterday]
    for job in jobs:
        if job.priority < lowest and job.id not in bunch:
            continue
        key = (job.model, job.priority, job.tenant)
        if yesterday < job.submitted <= yesterday + ahead:
            due.setdefault(key, []).append(job)
        elif yesterday - slack < job.submitted <= yesterday:
            owed.setdefault(key, []).append(job)
        elif now - slack < job.submitted <= now:
            came[key] += 1
    expected = []
    for key, members in owed.items():
        if came[key]:  # it came, or part of it: the rest may never come (a smaller batch)
            continue
        members.sort(key=lambda j: (j.submitted, j.id))
        for job in members:  # late: expected from now on, spaced as yesterday
            expected.append(_again(job, now + 1.0 + job.submitted - members[0].submitted))
    for key, members in due.items():
        members.sort(key=lambda j: (j.submitted, j.id))
        for job in members[max(0, came[key] - len(owed.get(key, ()))) :]:
            expected.append(_again(job, job.submitted + period))
    return expected


def _again(job: SimJob, at: float) -> SimJob:
    """``job`` expected to be submitted again at ``at``."""
    return SimJob(f"{EXPECTED}{job.id}", job.model, job.tenant, job.priority, job.output_s, at)


def forecast(
    engine: Engine,
    *,
    expected: Iterable[SimJob] = (),
    tenants: Iterable[str] = (),
    priorities: Iterable[int] = (0,),
    horizon: int = 2000,
    in_place: bool = False,
) -> Forecast:
    """Play a copy of ``engine`` forward (see the module docstring), or ``engine`` itself when
    ``in_place`` (an engine built only for this forecast). ``tenants`` and ``priorities`` name the
    probes to ask besides the queued ones; ``expected`` are arrivals to play besides the ones the
    rates of now suggest (``recurring``), each with an id starting with ``EXPECTED``."""
    twin = engine if in_place else fork(engine)
    twin.held_rates = twin.rates()
    twin.held_interactive = twin.interactive_rates()
    servable = {m for m, cost in twin.models.items() if any(can_host(g, cost) for g in twin.groups.values())}
    for model, rate in twin.held_rates.items():
        like = twin.latest.get(model)
        if rate > 0 and like is not None and model in servable:
            at = twin.now + 1 / rate
            twin.expect(SimJob(f"{EXPECTED}{model}", model, like.tenant, like.priority, like.output_s, at))
    for job in expected:
        if job.model in servable and job.submitted > twin.now:
            twin.expect(job)
    names = {*tenants, FRESH, *(t for _, _, t in twin.queues)}
    levels = {*priorities, *(p for _, p, _ in twin.queues)}
    for model in servable:
        for priority in levels:
            for tenant in names:
                key = (model, priority, tenant)
                twin.probes[key] = SimJob(f"probe:{key}", model, tenant, priority, 0.0, twin.now)
    queued = [(key, list(queue)) for key, queue in twin.queues.items()]

    def answered() -> bool:  # every probe and every queued job has started: later events change nothing
        return not twin.probes and all(q[0].id.startswith(EXPECTED) for q in twin.queues.values() if q)

    twin.run_until_idle(limit=horizon, enough=answered)
    jobs: dict[str, tuple[float, float]] = {}
    for job in [*twin.done, *twin.running.values()]:
        if job.started is not None and job.finished is not None and not job.id.startswith(EXPECTED):
            jobs[job.id] = (job.started, job.finished)
    spacing: dict[Key, float] = {}
    for key, members in queued:
        starts = sorted(jobs[j.id][0] for j in members if j.id in jobs)
        cost = twin.models[key[0]]
        hosts = max(1, sum(1 for g in twin.groups.values() if can_host(g, cost)))
        gap = (starts[-1] - starts[0]) / (len(starts) - 1) if len(starts) > 1 else cost.run_s(0) / hosts
        spacing[key] = gap
        last = starts[-1] if starts else twin.now
        for place, job in enumerate((j for j in members if j.id not in jobs), start=1):
            start = last + place * gap
            jobs[job.id] = (start, start + cost.run_s(job.output_s))
    next_start = dict(twin.probe_starts)
    for key, _ in queued:  # a probe the horizon cut off: after its tenant's queued jobs
        if key not in next_start and key in spacing:
            members = [j for k, q in queued if k == key for j in q]
            next_start[key] = jobs[members[-1].id][0] + spacing[key]
    return Forecast(
        at=engine.now,
        jobs=jobs,
        next_start=next_start,
        spacing=spacing,
        unservable=frozenset(set(twin.models) - servable),
    )


def behind_counts(jobs: Iterable[SimJob], since: float) -> Mapping[str, int]:
    """For each job submitted after ``since``: how many jobs of its tenant, model and priority were
    submitted after ``since`` and before it (the ``behind`` of ``Forecast.start_of``)."""
    seen: dict[Key, int] = {}
    found: dict[str, int] = {}
    for job in sorted(jobs, key=lambda j: (j.submitted, j.index, j.id)):
        if job.submitted <= since:
            continue
        key = (job.model, job.priority, job.tenant)
        found[job.id] = seen.get(key, 0)
        seen[key] = found[job.id] + 1
    return found


def usage_levels(usage: Mapping[str, float]) -> list[str]:
    """Tenants worth a probe of their own: every tenant with recorded usage."""
    return sorted(t for t, v in usage.items() if v > 0)

"""ETAs: when each queued job should start and finish, from the policy run forward.

The forecast copies the fleet as it is now (what each group holds and runs, until when; the queue
in fair order; the tenants' usage), plays it forward in virtual time with the production policy
(``jobservice.fleet.simulate``) until every queued job and every probe has started, and notes each
job's start and finish. It also asks, for each (model, priority, tenant) and for a tenant with no
usage at all, "when would a job submitted now start?" with what-if probes that are picked like jobs
but never run (in their tenant's order: after the jobs it queued, before the ones it is expected
to submit later), so a job submitted after the forecast gets an honest ETA without waiting for
the next one. A job submitted adds its own work to the queue, and that may be what makes the policy
load its model on one more group: so one probe of each model at a time adds its work to the work
queued for that model (the "one more job of it" every probe asks about, as large as the model's
latest job), the others not (forty probes of one model counted would be forty jobs nobody
submitted), and no probe is a job that other models' decisions see (a rival, or demand that keeps
a model resident).

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

import bisect
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
class Place:
    """Where a job stands: when it should start, and how many jobs the dispatcher starts before it
    on the groups that may run it (None: not known)."""

    start: float
    position: int | None


@dataclass(frozen=True)
class ExpectedArrivals:
    """What a forecast expects of what has not arrived: the rates it holds, until when each model's
    interactive rate holds, and the arrivals it plays (``expect``)."""

    rates: Mapping[str, float]
    interactive: Mapping[str, float]
    until: Mapping[str, float]
    arrivals: tuple[SimJob, ...]


@dataclass(frozen=True)
class Forecast:
    """A forecast made at ``at``: starts, finishes and places by job id, what a new job would get, and
    what the forecast assumed (the inputs its ETA revisions name as causes)."""

    at: float
    jobs: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # id -> (start, finish)
    next_start: Mapping[Key, float] = field(default_factory=dict)  # a job submitted at ``at``
    spacing: Mapping[Key, float] = field(default_factory=dict)  # seconds between its starts
    unservable: frozenset[str] = frozenset()  # models no group can run
    positions: Mapping[str, int] = field(default_factory=dict)  # id -> jobs started before it
    next_position: Mapping[Key, int] = field(default_factory=dict)  # the same for a job submitted at ``at``
    hosts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # model -> groups that may run it
    cards: Mapping[str, int] = field(default_factory=dict)  # model -> cards of those groups
    # priority -> tenant -> weight: the tenants with queued jobs, which share the cards
    competing: Mapping[int, Mapping[str, float]] = field(default_factory=dict)
    run_s: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # model -> (overhead, speed)
    weights: Mapping[str, float] = field(default_factory=dict)  # tenant -> fair-share weight (1)
    expected: int = 0  # arrivals it expected besides what was queued
    # what it expected (the simulator's E2 replays it; not stored)
    expectation: ExpectedArrivals | None = None

    def place(
        self, *, job_id: str, model: str, priority: int, tenant: str, output_s: float = 0.0, behind: int = 0
    ) -> Place | None:
        """Where a job stands: its own forecast, else where a job its tenant submitted at the forecast's
        time stands, plus ``behind`` turns for the jobs it submitted since, before it (each turn one
        spacing of its sub-queue, or one run over its share of the groups, and as many other jobs as
        fair share starts meanwhile). None when no group can run the model."""
        if job_id in self.jobs:
            return Place(self.jobs[job_id][0], self.positions.get(job_id))
        if model in self.unservable:
            return None
        key = (model, priority, tenant)
        fresh = (model, priority, FRESH)
        first = self.next_start.get(key, self.next_start.get(fresh))
        if first is None:
            return None
        share, _ = self.share(tenant, priority)
        gap = self.spacing.get(key)
        if gap is None:  # not queued when the forecast was made: one run per its share of the groups
            overhead, speed = self.run_s.get(model, (0.0, 1.0))
            gap = (overhead + speed * output_s) / (max(1, len(self.hosts.get(model, ()))) * share)
        behind = max(0, behind)
        start = first + behind * gap
        position = self.next_position.get(key, self.next_position.get(fresh))
        if position is not None:
            position += round(behind / share)
        return Place(start, position)

    def start_of(
        self, *, job_id: str, model: str, priority: int, tenant: str, output_s: float = 0.0, behind: int = 0
    ) -> float | None:
        """``place``'s start."""
        found = self.place(
            job_id=job_id, model=model, priority=priority, tenant=tenant, output_s=output_s, behind=behind
        )
        return None if found is None else found.start

    def share(self, tenant: str, priority: int) -> tuple[float, int]:
        """The fraction of the cards fair share gives ``tenant`` at ``priority`` against the tenants
        that had jobs queued there, and how many tenants that makes (itself included)."""
        others = {t: w for t, w in self.competing.get(priority, {}).items() if t != tenant}
        mine = self.weights.get(tenant, 1.0)
        return mine / (mine + sum(others.values())), len(others) + 1


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
    twin.planner = copy.deepcopy(engine.planner)  # a baseline's state (its turns) is the twin's own
    twin.loads, twin.done, twin.on_dispatch = [], [], []
    twin.probes, twin.probe_starts, twin.probe_orders = {}, {}, {}
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


def trickle_ends(
    history: Iterable[SimJob], now: float, *, window: float, period: float = DAY, ahead: float = AHEAD
) -> dict[str, float] | None:
    """When each model's interactive trickle of now should end, from a day ago: the time of day its
    interactive jobs stopped coming yesterday (their first gap longer than ``window`` after this time
    of day), plus ``window``, and a day. None without a day of history (the rates of now then hold).
    ``history`` holds at least every job submitted in (now - period - window, now - period + ahead]."""
    yesterday = now - period
    jobs = list(history)
    if not any(job.submitted <= yesterday for job in jobs):
        return None
    times: dict[str, list[float]] = {}
    for job in jobs:
        if job.priority == 0 and yesterday - window < job.submitted <= yesterday + ahead:
            times.setdefault(job.model, []).append(job.submitted)
    ends: dict[str, float] = {}
    for model, seen in times.items():
        seen.sort()
        last = max((t for t in seen if t <= yesterday), default=None)
        if last is None:  # none at this time yesterday: today's ends as its rate window passes
            ends[model] = now + window
            continue
        for t in seen:
            if t <= yesterday:
                continue
            if t - last > window:
                break
            last = t
        ends[model] = last + window + period
    return ends


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
    handed: Mapping[str, str] | None = None,
    trickles: Mapping[str, float] | None = None,
) -> Forecast:
    """Play a copy of ``engine`` forward (see the module docstring), or ``engine`` itself when
    ``in_place`` (an engine built only for this forecast). ``tenants`` and ``priorities`` name the
    probes to ask besides the queued ones; ``expected`` are arrivals to play besides the ones the
    rates of now suggest (``recurring``), each with an id starting with ``EXPECTED``. ``handed``: jobs
    (id -> group) already handed to a group and not yet started there (the service's): they start
    before anything queued on that group."""
    twin = engine if in_place else fork(engine)
    made_at = twin.now  # (an engine played in place moves on)
    servable = expect(twin, expected, trickles)
    names = {*tenants, FRESH, *(t for _, _, t in twin.queues)}
    levels = {*priorities, *(p for _, p, _ in twin.queues)}
    competing = {
        priority: {t: twin.weights.get(t, 1.0) for (_, p, t), q in twin.queues.items() if p == priority and q}
        for priority in levels
    }
    for tenant in names - twin.backlogged():  # a what-if job of a tenant with nothing queued: lifted
        twin.start_competing(tenant)
    for model in servable:
        like = twin.latest.get(model)  # a probe asks about a job like the model's latest
        output_s = like.output_s if like is not None else 0.0
        for priority in levels:
            for tenant in names:
                key = (model, priority, tenant)
                twin.probes[key] = SimJob(f"probe:{key}", model, tenant, priority, output_s, twin.now)
    queued = [(key, list(queue)) for key, queue in twin.queues.items()]
    expected_count = len(twin._expected)  # noqa: SLF001 - what it expects, before playing them
    expectation = ExpectedArrivals(
        dict(twin.held_rates or {}),
        dict(twin.held_interactive or {}),
        dict(twin.held_until),
        tuple(copy.copy(job) for _, _, job in sorted(twin._expected, key=lambda e: (e[0], e[1]))),  # noqa: SLF001
    )
    first_order = twin.dispatched  # dispatches from here on are the forecast's

    def answered() -> bool:  # every probe and every queued job has started: later events change nothing
        return not twin.probes and all(q[0].id.startswith(EXPECTED) for q in twin.queues.values() if q)

    twin.run_until_idle(limit=horizon, enough=answered)
    played = [
        job
        for job in [*twin.done, *twin.running.values()]
        if job.started is not None and job.finished is not None and not job.id.startswith(EXPECTED)
    ]
    jobs = {job.id: (job.started or 0.0, job.finished or 0.0) for job in played}
    spacing: dict[Key, float] = {}
    cut: list[SimJob] = []  # queued jobs past the horizon, in the order they are expected to start
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
            cut.append(job)
    hosts_of = {
        m: tuple(sorted(g.id for g in twin.groups.values() if can_host(g, cost)))
        for m, cost in twin.models.items()
    }
    every = [j for j in [*twin.done, *twin.running.values()] if j.order >= first_order]
    queued_ids = {j.id for _, members in queued for j in members}
    positions, next_position = _positions(
        every,  # the expected arrivals it starts before a job count too: they start before it
        sorted(cut, key=lambda j: jobs[j.id][0]),
        hosts_of,
        twin.probe_orders,
        handed or {},
    )
    positions = {job_id: n for job_id, n in positions.items() if job_id in queued_ids}
    next_start = dict(twin.probe_starts)
    for key, members in queued:  # a probe the horizon cut off: after its tenant's queued jobs
        if key not in next_start and key in spacing and members:
            next_start[key] = jobs[members[-1].id][0] + spacing[key]
            if members[-1].id in positions:
                next_position[key] = positions[members[-1].id] + 1
    return Forecast(
        at=made_at,
        jobs=jobs,
        next_start=next_start,
        spacing=spacing,
        unservable=frozenset(set(twin.models) - servable),
        positions=positions,
        next_position=next_position,
        hosts={m: h for m, h in hosts_of.items() if h},
        cards={m: sum(twin.groups[g].cards for g in h) for m, h in hosts_of.items() if h},
        competing={p: c for p, c in competing.items() if c},
        run_s={m: (c.overhead_s, c.speed) for m, c in twin.models.items()},
        weights={t: w for t, w in twin.weights.items() if w != 1.0},
        expected=expected_count,
        expectation=expectation,
    )


def expect(
    twin: Engine,
    expected: Iterable[SimJob],
    trickles: Mapping[str, float] | None = None,
    *,
    same_as: ExpectedArrivals | None = None,
) -> set[str]:
    """Make ``twin`` expect what has not arrived yet, as a forecast does: the arrival rates of now
    hold (a model's interactive rate until ``trickles`` says its trickle ends, ``trickle_ends``), each
    model submitted lately gets one more job like its last, and ``expected`` arrive when they say.
    ``same_as``: expect exactly what that forecast expected (those of its arrivals still to come).
    Returns the models some group can run."""
    servable = {m for m, cost in twin.models.items() if any(can_host(g, cost) for g in twin.groups.values())}
    if same_as is not None:
        twin.held_rates, twin.held_interactive = dict(same_as.rates), dict(same_as.interactive)
        twin.held_until = dict(same_as.until)
        for job in same_as.arrivals:
            if job.submitted > twin.now:
                twin.expect(copy.copy(job))
        return servable
    twin.held_rates = twin.rates()
    twin.held_interactive = twin.interactive_rates()
    twin.held_until = dict(trickles or {})
    for model, rate in twin.held_rates.items():
        like = twin.latest.get(model)
        if rate > 0 and like is not None and model in servable:
            at = twin.now + 1 / rate
            twin.expect(SimJob(f"{EXPECTED}{model}", model, like.tenant, like.priority, like.output_s, at))
    for job in expected:
        if job.model in servable and job.submitted > twin.now:
            twin.expect(job)
    return servable


def _positions(
    played: list[SimJob],
    cut: list[SimJob],
    hosts: Mapping[str, tuple[str, ...]],
    probe_orders: Mapping[Key, int],
    handed: Mapping[str, str],
) -> tuple[dict[str, int], dict[Key, int]]:
    """Each queued job's position: the jobs the dispatcher starts before it on the groups that may
    run its model (those already handed to one of them, then the queued ones dispatched there
    first, in the forecast's order; jobs past the horizon come after, in the order of their
    extrapolated starts, counted where their models share a group). And a probe's, from the
    dispatches before it."""
    order = sorted(played, key=lambda j: j.order)
    positions: dict[str, int] = {}
    next_position: dict[Key, int] = {}
    for model, groups in hosts.items():
        eligible = set(groups)
        count = sum(1 for group in handed.values() if group in eligible)
        before: list[int] = []  # the orders of dispatches to its groups, ascending
        for job in order:
            if job.model == model:
                positions[job.id] = count
            if job.group in eligible:
                count += 1
                before.append(job.order)
        for job in cut:
            if job.model == model:
                positions[job.id] = count
            if eligible & set(hosts.get(job.model, ())):
                count += 1
        for key, at in probe_orders.items():
            if key[0] == model:
                next_position[key] = sum(
                    1 for group in handed.values() if group in eligible
                ) + bisect.bisect_left(before, at)
    return positions, next_position


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


# --- ETA revisions ----------------------------------------------------------------------------------
REVISION_FLOOR_S = 60.0  # an ETA move is recorded when it exceeds this, or a fifth of the wait
REVISION_SHARE = 0.2
REVISIONS_KEPT = 20  # a job keeps its last this many revisions
SINGLES_BEFORE_REFRESH = 16  # a forecast is redone once this many jobs came after it, one by one


@dataclass(frozen=True)
class Queued:
    """A queued job as its ETA is worked out: who, what, when it came, and the jobs of its tenant,
    model and priority submitted after the forecast and before it (``behind``)."""

    id: str
    model: str
    priority: int
    tenant: str
    submitted: float
    output_s: float = 0.0
    behind: int = 0

    def place(self, forecast: Forecast) -> Place | None:
        """Where ``forecast`` puts it."""
        return forecast.place(
            job_id=self.id,
            model=self.model,
            priority=self.priority,
            tenant=self.tenant,
            output_s=self.output_s,
            behind=self.behind,
        )


def revision_margin(published: float, submitted: float) -> float:
    """How far an ETA must move to be recorded as a revision: max(60 s, a fifth of the wait it
    showed). A job still queued this long after its ``published`` ETA has slipped (E3)."""
    return max(REVISION_FLOOR_S, REVISION_SHARE * max(0.0, published - submitted))


def revise(
    old: Forecast | None, new: Forecast, job: Queued, published: float | None
) -> tuple[float | None, dict[str, object] | None]:
    """The ETA ``job`` shows after ``new`` replaced ``old`` (``published``: the one it showed), and the
    revision to record when it moved by more than max(60 s, a fifth of the wait): at, old, new (POSIX
    seconds) and its cause in words. A job's first ETA is no revision."""
    place = job.place(new)
    if place is None:
        return published, None
    if published is None:
        return place.start, None
    if abs(place.start - published) <= revision_margin(published, job.submitted):
        return published, None
    before = job.place(old) if old is not None else None
    return place.start, {
        "at": new.at,
        "old": published,
        "new": place.start,
        "cause": cause(old, new, job, before=before, after=place),
    }


def late_start(
    old: Forecast | None, new: Forecast, job: Queued, published: float | None, started: float
) -> dict[str, object] | None:
    """The revision of a job that left the queue since ``old`` was made and started later than the
    ETA it showed (``published``) by more than a revision's margin, when no forecast in between
    revised it (it slipped and started between two forecasts): ``new`` records it, its new ETA the
    start itself, with the cause the two forecasts show. None when it started in time."""
    if published is None or started - published <= revision_margin(published, job.submitted):
        return None
    before = job.place(old) if old is not None else None
    why = cause(old, new, job, before=before, after=Place(started, None))
    return {"at": new.at, "old": published, "new": started, "cause": why}


def cause(old: Forecast | None, new: Forecast, job: Queued, *, before: Place | None, after: Place) -> str:
    """Why ``job``'s ETA moved from ``old``'s forecast to ``new``'s, in words: groups that went or came,
    tenants that began or stopped competing (with the job's share of the cards before and after), a
    model that ran slower or faster than measured, or the jobs ahead of it."""
    found: list[str] = []
    if old is not None:
        was, now = set(old.hosts.get(job.model, ())), set(new.hosts.get(job.model, ()))
        found += [f"group {g} offline" for g in sorted(was - now)]
        found += [f"group {g} online" for g in sorted(now - was)]
        share_was, _ = old.share(job.tenant, job.priority)
        share_now, _ = new.share(job.tenant, job.priority)
        rivals_was = set(old.competing.get(job.priority, {})) - {job.tenant}
        rivals_now = set(new.competing.get(job.priority, {})) - {job.tenant}
        shares = f"your share {_fraction(share_was)} -> {_fraction(share_now)}"
        found += [f'tenant "{t}" started competing: {shares}' for t in sorted(rivals_now - rivals_was)]
        found += [f'tenant "{t}" has nothing queued now: {shares}' for t in sorted(rivals_was - rivals_now)]
        if job.model in old.run_s and job.model in new.run_s:
            run_was = old.run_s[job.model][0] + old.run_s[job.model][1] * job.output_s
            run_now = new.run_s[job.model][0] + new.run_s[job.model][1] * job.output_s
            if run_was > 0 and abs(run_now / run_was - 1) >= 0.1:
                change = run_now / run_was - 1
                word = "slower" if change > 0 else "faster"
                found.append(f"{job.model} ran {abs(change) * 100:.0f} % {word} than measured")
    if not found:
        if before is not None and before.position is not None and after.position is not None:
            if before.position != after.position:
                found.append(f"jobs to start before it: {before.position} -> {after.position}")
        if not found:
            late = after.start > (before.start if before is not None else after.start)
            found.append(
                "the jobs ahead of it run longer than forecast" if late else "the jobs ahead of it end sooner"
            )
    return "; ".join(found[:3])


def _fraction(share: float) -> str:
    """A share of the cards as a fraction when it is one over a small number, else a percentage."""
    for whole in range(1, 13):
        if abs(share * whole - 1) < 1e-6:
            return f"1/{whole}"
    return f"{share * 100:.0f} %"

"""A fleet in virtual time: card groups that load models and run jobs as the policy decides.

The engine keeps the queue (per model, priority and tenant, oldest first), the groups (what they
hold, what they run, until when) and the tenants' decayed usage, and at every event (a job
submitted, a group done) asks ``jobservice.fleet.policy`` what each free group runs next, exactly
as the dispatcher does with the database. Nothing sleeps: a week of trace runs in seconds.

Two users: ``scripts/bench_fleet.py`` replays a trace through it (with the static baseline of
``scripts/bench_lib/static.py`` as the ``planner``, side by side), and ``jobservice.fleet.forecast``
runs a copy of the live fleet forward to tell each queued job when it should start (its ETA).

What the engine models of a worker, and nothing else: a job holds its group from dispatch to the
end of its generation; a cold start adds the model's ``load_s`` before generation; finishing
(gate, upload) overlaps the next job's generation, so it costs the card nothing unless the group
has nothing else to do (``finish_s``, default 0). Usage is charged when a job ends, as the
workers do.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import ClassVar

from jobservice.fleet.policy import (
    INTERACTIVE,
    CardGroupState,
    Decision,
    FleetState,
    InFlight,
    ModelCost,
    PolicyParams,
    Resident,
    Waiting,
    decayed,
    fair_usage,
    lift,
    plan,
    weight_of,
)

Planner = Callable[[FleetState], list[Decision]]


@dataclass(frozen=True)
class WhatIf(Waiting):
    """A what-if entry of the ETA forecast: "when would a job of this tenant start if it were
    submitted now?". The policy may pick it like any queued job, but it is no queued work."""

    queued_work: ClassVar[bool] = False
    adds_work: ClassVar[bool] = False


@dataclass(frozen=True)
class MarginalWhatIf(WhatIf):
    """The what-if entry that stands for "one more job of this model": its work counts in the work
    queued for its model, as a real submission's would (it may be what makes the policy load the
    model on one more group), but it is no job other models' decisions see (no rival, no demand
    that keeps a model resident). The forecast has one per model at a time, not one per probe."""

    adds_work: ClassVar[bool] = True


@dataclass
class SimJob:
    """One job: what it asks for, and what happened to it."""

    id: str
    model: str
    tenant: str
    priority: int
    output_s: float
    submitted: float
    index: int = -1  # its line in a trace
    group: str | None = None
    dispatched: float | None = None
    started: float | None = None  # generation began (after a load, if it waited for one)
    finished: float | None = None
    loaded: bool = False
    evicted: tuple[str, ...] = ()
    eta_start: float | None = None  # the ETA it was given when submitted
    held_after: tuple[str, ...] = ()  # what its group held once it was dispatched
    # An interactive job with no interactive job queued before it: when it should start at the
    # latest (the soonest end of a running job on a group that may run it, plus its load there).
    due: float | None = None
    due_strict: float | None = None  # the same over every group, also those a swap would take from
    # interactive users of another model
    order: int = -1  # its place among the engine's dispatches (the dispatcher's order)
    position: int | None = None  # the queue position it was given when submitted
    revisions: list[dict[str, object]] = field(default_factory=list)  # its ETA's moves (``forecast.revise``)


@dataclass
class Load:
    """A cold start or a swap: which group loaded (or made room for) which model when, what it
    evicted for it, and how long each evicted model had been resident."""

    at: float
    group: str
    model: str
    evicted: tuple[str, ...]
    ages: tuple[float, ...]
    cold: bool  # the model itself was loaded (False: room made for a per-run job)


@dataclass
class _Usage:
    value: float = 0.0
    as_of: float = 0.0


@dataclass(frozen=True)
class SimSpan:
    """A stretch of one group's time in one ledger state."""

    group: str
    state: str
    model: str
    start: float
    end: float


def timeline(engine: Engine, *, end: float) -> list[SimSpan]:
    """Every second of every group from the engine's start to ``end``, in one state each (the
    ledger): loading and generating from the jobs, finishing after a job until the next one or
    ``finish_s``, then idle warm or idle empty by what the group held."""
    spans: list[SimSpan] = []
    by_group: dict[str, list[SimJob]] = {g: [] for g in engine.groups}
    for job in [*engine.done, *engine.running.values()]:
        if job.group is not None:
            by_group[job.group].append(job)
    for group, jobs in by_group.items():
        jobs.sort(key=lambda j: j.dispatched or 0.0)
        at = engine.start
        held = bool(engine.initial_resident.get(group))
        for index, job in enumerate(jobs):
            assert job.dispatched is not None and job.started is not None and job.finished is not None
            if job.dispatched > at:
                spans.append(SimSpan(group, "idle_warm" if held else "idle_empty", "", at, job.dispatched))
            if job.started > job.dispatched:
                spans.append(SimSpan(group, "loading", job.model, job.dispatched, job.started))
            stop = min(job.finished, end)
            spans.append(SimSpan(group, "generating", job.model, job.started, stop))
            at = stop
            following = jobs[index + 1].dispatched if index + 1 < len(jobs) else end
            assert following is not None
            finish = min(job.finished + engine.finish_s.get(job.model, 0.0), following, end)
            if finish > at:
                spans.append(SimSpan(group, "finishing", job.model, at, finish))
                at = finish
            held = bool(job.held_after)
        if end > at:
            spans.append(SimSpan(group, "idle_warm" if held else "idle_empty", "", at, end))
    return spans


class Engine:
    """The fleet in virtual time (see the module docstring)."""

    def __init__(
        self,
        *,
        groups: Iterable[CardGroupState],
        models: Mapping[str, ModelCost],
        params: PolicyParams | None = None,
        planner: Planner = plan,
        half_life_s: float = 3600.0,
        weights: Mapping[str, float] | None = None,
        newcomer_credit_s: float = 60.0,
        finish_s: Mapping[str, float] | None = None,
        now: float = 0.0,
    ) -> None:
        self.start = self.now = now
        self.models = dict(models)
        self.params = params or PolicyParams()
        self.planner = planner  # the production policy, or a benchmark's baseline
        self.half_life_s = half_life_s
        self.weights = dict(weights or {})
        self.newcomer_credit_s = newcomer_credit_s
        self.activated: dict[str, float] = {}  # tenant -> when it last began competing
        self.floor: _Usage | None = None  # the least level among tenants with queued jobs, last seen
        self.finish_s = dict(finish_s or {})
        self.groups: dict[str, CardGroupState] = {g.id: g for g in groups}
        self.initial_resident = {g.id: tuple(g.resident) for g in self.groups.values()}
        self.running: dict[str, SimJob] = {}  # group -> its job
        self.queues: dict[tuple[str, int, str], deque[SimJob]] = {}
        self._output_s: dict[tuple[str, int, str], float] = {}  # seconds of video queued, per queue
        self.usage: dict[str, _Usage] = {}
        self.loads: list[Load] = []  # every cold start and every swap, in order
        self.done: list[SimJob] = []
        self.arrivals: dict[str, deque[float]] = {}  # model -> recent submission times
        self.interactive_arrivals: dict[str, deque[float]] = {}  # the same, interactive jobs only
        self.held_until: dict[str, float] = {}  # model -> until when its held interactive rate holds
        self.held_interactive: dict[str, float] | None = None  # interactive_rates() while a forecast plays
        self.held_rates: dict[str, float] | None = None  # rates() while a forecast plays forward
        self.latest: dict[str, SimJob] = {}  # model -> the job of it submitted last
        # What-if jobs (the ETA forecast): (model, priority, tenant) -> when one would have started.
        self.probes: dict[tuple[str, int, str], SimJob] = {}
        self.probe_starts: dict[tuple[str, int, str], float] = {}
        self.probe_orders: dict[tuple[str, int, str], int] = {}  # the dispatches before each probe's
        self.dispatched = 0  # how many jobs the engine has dispatched
        self._events: list[tuple[float, int, str]] = []  # (when a group frees, seq, group)
        self._expected: list[tuple[float, int, SimJob]] = []  # (when, seq, job): see ``expect``
        self._seq = itertools.count()
        self.on_dispatch: list[Callable[[Engine], None]] = []  # after every dispatch round

    # --- input -----------------------------------------------------------------------------------
    def submit(self, job: SimJob, *, arriving: bool = True) -> None:
        """Queue ``job`` (its ``submitted`` is when it arrived). An arriving job of a tenant with
        nothing queued starts competing: its level is lifted (``policy.lift``), as the service does
        at submission (``arriving=False``: a job already queued, copied from the live fleet)."""
        if arriving and not any(
            queue for (_, _, tenant), queue in self.queues.items() if tenant == job.tenant
        ):
            self.start_competing(job.tenant)
        key = (job.model, job.priority, job.tenant)
        self.queues.setdefault(key, deque()).append(job)
        self._output_s[key] = self._output_s.get(key, 0.0) + job.output_s
        self.arrivals.setdefault(job.model, deque()).append(job.submitted)
        if job.priority == INTERACTIVE:
            self.interactive_arrivals.setdefault(job.model, deque()).append(job.submitted)
        self.latest[job.model] = job

    def adopt(self, job: SimJob) -> None:
        """A job already on its group (the live fleet's, for a forecast): it ends at ``job.finished``."""
        assert job.group is not None and job.finished is not None
        self.running[job.group] = job
        heapq.heappush(self._events, (job.finished, next(self._seq), job.group))

    def charge(self, tenant: str, card_seconds: float, at: float) -> None:
        """Add card-seconds to a tenant's decayed usage (the workers do it when a job ends)."""
        entry = self.usage.setdefault(tenant, _Usage(0.0, at))
        entry.value = decayed(entry.value, at - entry.as_of, self.half_life_s) + card_seconds
        entry.as_of = at

    # --- the policy's view -----------------------------------------------------------------------
    def fair_usage(self) -> dict[str, float]:
        """Each tenant's level (``policy.fair_usage``): decayed charged card-seconds plus its jobs on
        the cards, each at the larger of what it should cost and what it used so far, per weight."""
        charged = {t: decayed(u.value, self.now - u.as_of, self.half_life_s) for t, u in self.usage.items()}
        for _, _, tenant in self.queues:
            charged.setdefault(tenant, 0.0)
        inflight = [
            InFlight(
                job.tenant,
                self.models[job.model].card_seconds(job.output_s, load=job.loaded),
                max(0.0, self.now - (job.dispatched or 0.0)) * self.models[job.model].cards,
            )
            for job in self.running.values()
        ]
        return fair_usage(charged, inflight, self.weights)

    def credit(self) -> float:
        """The newcomer credit, in level: ``newcomer_credit_s`` of every card of the fleet."""
        return self.newcomer_credit_s * sum(g.cards for g in self.groups.values())

    def backlogged(self) -> set[str]:
        """Tenants with queued jobs (what-if probes aside)."""
        return {tenant for (_, _, tenant), queue in self.queues.items() if queue}

    def start_competing(self, tenant: str) -> None:
        """``tenant`` submits with nothing queued: lift its level to the others' less the credit."""
        levels = self.fair_usage()
        level = levels.get(tenant, 0.0)
        others = [levels.get(t, 0.0) for t in self.backlogged() if t != tenant]
        floor = (
            None
            if self.floor is None
            else decayed(self.floor.value, self.now - self.floor.as_of, self.half_life_s)
        )
        lifted, _ = lift(level, others=others, floor=floor, credit=self.credit())
        if lifted > level:
            self.charge(tenant, (lifted - level) * weight_of(self.weights, tenant), self.now)
        self.activated[tenant] = self.now

    def note_floor(self, levels: Mapping[str, float], *, tenants: Iterable[str] | None = None) -> None:
        """Remember the least level among tenants with queued jobs (or ``tenants``): the lift's V
        when none queue."""
        queued = [levels.get(t, 0.0) for t in (self.backlogged() if tenants is None else tenants)]
        if queued:
            self.floor = _Usage(min(queued), self.now)

    def waiting(self) -> tuple[Waiting, ...]:
        """The queue as the policy sees it: one entry per (model, priority, tenant), and a probe
        entry for each what-if job whose tenant has nothing else queued there (a tenant's next job
        comes after the ones it queued); of each model's probe entries, the most urgent one's work
        counts as queued (``MarginalWhatIf``), the others' not (``WhatIf``)."""
        found = [
            Waiting(
                model=model,
                priority=priority,
                tenant=tenant,
                jobs=len(queue),
                output_s=max(0.0, self._output_s.get((model, priority, tenant), 0.0)),
                oldest=queue[0].submitted,
                next_output_s=queue[0].output_s,
            )
            for (model, priority, tenant), queue in self.queues.items()
            if queue
        ]
        counted: set[str] = set()  # models whose one more job counts already
        for key, probe in sorted(self.probes.items(), key=lambda item: item[0][1:]):  # most urgent first
            if self.queues.get(key):
                continue
            model, priority, tenant = key
            kind = WhatIf if model in counted else MarginalWhatIf
            counted.add(model)
            found.append(kind(model, priority, tenant, 1, probe.output_s, probe.submitted, probe.output_s))
        return tuple(found)

    def rates(self) -> dict[str, float]:
        """Jobs submitted per second, per model, over the policy's rate window (or as they were
        when a forecast began: it expects the arrivals of now to go on)."""
        if self.held_rates is not None:
            return dict(self.held_rates)
        return self._rates(self.arrivals)

    def interactive_rates(self) -> dict[str, float]:
        """``rates`` of interactive jobs alone."""
        found = self._rates(self.interactive_arrivals)
        if self.held_interactive is not None:  # held, each until its trickle should end
            for model, rate in self.held_interactive.items():
                if self.now < self.held_until.get(model, math.inf):
                    found[model] = rate
        return found

    def _rates(self, arrivals: dict[str, deque[float]]) -> dict[str, float]:
        window = self.params.rate_window_s
        found = {}
        for model, times in arrivals.items():
            while times and times[0] < self.now - window:
                times.popleft()
            if times:
                found[model] = len(times) / window
        return found

    def state(self) -> FleetState:
        """What the policy decides on, now."""
        return FleetState(
            now=self.now,
            groups=tuple(self.groups.values()),
            models=self.models,
            waiting=self.waiting(),
            usage=self.fair_usage(),
            weights=self.weights,
            activated=self.activated,
            rates=self.rates(),
            params=self.params,
            interactive_rates=self.interactive_rates(),
        )

    # --- time ------------------------------------------------------------------------------------
    def expect(self, job: SimJob) -> None:
        """Submit ``job`` when the clock reaches its ``submitted`` (a forecast's expected arrival)."""
        heapq.heappush(self._expected, (job.submitted, next(self._seq), job))

    def _due(self) -> float | None:
        times = [q[0][0] for q in (self._events, self._expected) if q]
        return min(times) if times else None

    def advance(self, until: float) -> None:
        """Run every group completion and expected arrival up to ``until`` (dispatching after
        each), then set the clock."""
        while (at := self._due()) is not None and at <= until:
            while self._events and self._events[0][0] == at:
                _, _, group = heapq.heappop(self._events)
                self._finish(group, at)
            self.now = at
            while self._expected and self._expected[0][0] == at:
                self.submit(heapq.heappop(self._expected)[2])
            self.dispatch()
        self.now = max(self.now, until)

    def run_until_idle(self, *, limit: int | None = None, enough: Callable[[], bool] | None = None) -> None:
        """Dispatch and run until every queued job has started and ended (or ``limit`` more started,
        or ``enough()`` says what the caller wanted to see has happened)."""
        begun = len(self.done) + len(self.running)
        self.dispatch()
        while (at := self._due()) is not None:
            if limit is not None and len(self.done) + len(self.running) - begun >= limit:
                return
            if enough is not None and enough():
                return
            self.advance(at)

    # --- dispatching -----------------------------------------------------------------------------
    def decide(self) -> list[Decision]:
        """The policy's decisions for the free groups now."""
        state = self.state()
        self.note_floor(state.usage)
        return self.planner(state)

    def dispatch(self) -> list[SimJob]:
        """Start a job on every free group the policy gives one. A decision that picks a probe
        records when that what-if job would have started, and the round is planned again without it.
        A tenant's jobs start in the order they were submitted, the probe's among them: a decision
        for a queue whose oldest job came after the probe (an expected arrival) is the probe's."""
        started: list[SimJob] = []
        again = True
        while again:
            again = False
            for decision in self.decide():
                key = (decision.model, decision.priority, decision.tenant)
                if self._probe_first(key):
                    load_s = self.models[decision.model].load_s if decision.load else 0.0
                    self.probe_starts[key] = self.now + load_s
                    self.probe_orders[key] = self.dispatched
                    del self.probes[key]
                    again = True
                    break
                started.append(self._start(decision))
        for hook in self.on_dispatch:
            hook(self)
        return started

    def _probe_first(self, key: tuple[str, int, str]) -> bool:
        """Whether a decision for ``key`` is its probe's: there is one, and nothing is queued under
        ``key`` or every job queued there was submitted after it (the policy saw a ``WhatIf``)."""
        probe, queue = self.probes.get(key), self.queues.get(key)
        if probe is None:
            return False
        return not queue or queue[0].submitted > probe.submitted

    def _start(self, decision: Decision) -> SimJob:
        key = (decision.model, decision.priority, decision.tenant)
        queue = self.queues[key]
        at = min(decision.skip, len(queue) - 1)
        job = queue[at]
        del queue[at]
        self._output_s[key] = self._output_s.get(key, 0.0) - job.output_s
        if not queue:
            del self.queues[key]
            self._output_s.pop(key, None)
        group = self.groups[decision.group]
        cost = self.models[job.model]
        resident = {m: r for m, r in group.resident.items() if m not in decision.evict}
        load_s = cost.load_s if decision.load else 0.0
        if decision.load or decision.evict:
            ages = tuple(self.now - group.resident[m].since for m in decision.evict)
            self.loads.append(Load(self.now, group.id, job.model, decision.evict, ages, decision.load))
        if not cost.per_run:
            since = resident[job.model].since if job.model in resident else self.now + load_s
            resident[job.model] = Resident(since=since, last_used=self.now)
        job.group, job.dispatched, job.loaded, job.evicted = group.id, self.now, decision.load, decision.evict
        job.order, self.dispatched = self.dispatched, self.dispatched + 1
        job.started = self.now + load_s
        job.finished = job.started + cost.run_s(job.output_s)
        job.held_after = tuple(resident)
        swaps = tuple(at for at in group.swaps if self.now - at < 3600.0)
        if decision.evict:
            swaps += (self.now,)
        self.groups[group.id] = replace(
            group, resident=resident, busy_until=job.finished, running=job.model, swaps=swaps
        )
        self.running[group.id] = job
        heapq.heappush(self._events, (job.finished, next(self._seq), group.id))
        return job

    def _finish(self, group_id: str, at: float) -> None:
        job = self.running.pop(group_id)
        cost = self.models[job.model]
        load_s = cost.load_s if job.loaded else 0.0
        self.charge(job.tenant, (load_s + cost.run_s(job.output_s)) * cost.cards, at)
        self.groups[group_id] = replace(self.groups[group_id], busy_until=None, running=None)
        self.done.append(job)

"""Traces and their replay: the fleet simulator's input format and the figures it reports.

A trace is JSON Lines. The first line describes the fleet and the models::

    {"fleet": [{"group": "npu:0,1,2,3", "cards": 4, "memory_gb_per_card": 64,
                "models": ["a", "b"], "pinned": ["a"]}, ...],
     "models": {"a": {"cards": 2, "memory_gb": 48, "load_s": 88,
                      "seconds_per_output_second": 1.0, "per_run": false}, ...},
     "tenants": {"team-a": {"weight": 3}}}

``models`` of a group are the models it may serve (eligible); ``pinned`` those today's static
fleet serves on it. A model may also carry ``overhead_s`` (seconds every job takes whatever its
length) and ``finish_s`` (the gate and upload after its last frame; they overlap the next job).
Every other line is one job::

    {"t": 12.5, "model": "a", "tenant": "team-a", "priority": "interactive", "output_seconds": 13.2}

``t`` is seconds from the start; ``priority`` is ``interactive`` or ``batch``. Errors name the line.

``replay`` runs a trace through ``jobservice.fleet.simulate.Engine`` (the production policy, or
the static baseline of ``scripts/bench_lib/static.py``) and ``figures`` reports what
``scripts/bench_fleet.py`` prints. The service never reads traces: this lives beside the benchmark.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import random
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from jobservice.fleet.forecast import (
    DAY,
    REVISIONS_KEPT,
    SINGLES_BEFORE_REFRESH,
    SLACK,
    ExpectedArrivals,
    Forecast,
    Queued,
    behind_counts,
    expect,
    forecast,
    fork,
    late_start,
    recurring,
    revise,
    revision_margin,
    trickle_ends,
    usage_levels,
)
from jobservice.fleet.policy import CardGroupState, ModelCost, PolicyParams, evictions_for, plan, serves
from jobservice.fleet.simulate import Engine, SimJob, SimSpan, timeline
from scripts.bench_lib.static import StaticPlanner

PRIORITIES = {"interactive": 0, "batch": 6}  # batch: the service's default batch priority


class TraceError(ValueError):
    """A trace that cannot be read; the message names the line."""


@dataclass(frozen=True)
class Trace:
    """A parsed trace."""

    groups: tuple[CardGroupState, ...]
    pinned: dict[str, frozenset[str]]
    models: dict[str, ModelCost]
    finish_s: dict[str, float]
    weights: dict[str, float]
    jobs: tuple[SimJob, ...]
    source: str = "<trace>"

    def fleet(self, policy: str) -> tuple[CardGroupState, ...]:
        """The groups as ``policy`` uses them: the static fleet serves only what is pinned."""
        if policy != "static":
            return self.groups
        return tuple(CardGroupState(**{**g.__dict__, "eligible": self.pinned[g.id]}) for g in self.groups)


def _number(raw: dict[str, Any], key: str, where: str, default: float | None = None) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise TraceError(f"{where}: '{key}' must be a number >= 0, got {value!r}")
    return float(value)


def parse_trace(lines: Iterable[str], *, source: str = "<trace>") -> Trace:
    """Read a trace from its lines (see the module docstring)."""
    header: dict[str, Any] | None = None
    jobs: list[SimJob] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source}:{number}"
        try:
            raw = json.loads(line)
        except ValueError as exc:
            raise TraceError(f"{where}: not JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise TraceError(f"{where}: each line must be a JSON object")
        if header is None:
            header = raw
            groups, pinned, models, finish, weights = _header(raw, where)
            continue
        model = raw.get("model")
        if model not in models:
            raise TraceError(f"{where}: unknown model {model!r} (the first line lists {sorted(models)})")
        priority = raw.get("priority", "interactive")
        if priority not in PRIORITIES:
            raise TraceError(f"{where}: 'priority' must be interactive or batch, got {priority!r}")
        jobs.append(
            SimJob(
                id=f"j{number}",
                model=str(model),
                tenant=str(raw.get("tenant", "default")),
                priority=PRIORITIES[priority],
                output_s=_number(raw, "output_seconds", where),
                submitted=_number(raw, "t", where),
                index=number,
            )
        )
    if header is None:
        raise TraceError(f"{source}: empty trace")
    jobs.sort(key=lambda j: (j.submitted, j.index))
    return Trace(groups, pinned, models, finish, weights, tuple(jobs), source)


def _header(
    raw: dict[str, Any], where: str
) -> tuple[
    tuple[CardGroupState, ...],
    dict[str, frozenset[str]],
    dict[str, ModelCost],
    dict[str, float],
    dict[str, float],
]:
    if not isinstance(raw.get("fleet"), list) or not isinstance(raw.get("models"), dict):
        raise TraceError(f"{where}: the first line needs 'fleet' (a list) and 'models' (an object)")
    models: dict[str, ModelCost] = {}
    finish: dict[str, float] = {}
    for model_id, spec in raw["models"].items():
        at = f"{where}: models.{model_id}"
        if not isinstance(spec, dict):
            raise TraceError(f"{at}: must be an object")
        models[model_id] = ModelCost(
            id=model_id,
            cards=int(_number(spec, "cards", at, 1)) or 1,
            memory_gb=_number(spec, "memory_gb", at, 0),
            load_s=_number(spec, "load_s", at, 0),
            per_run=bool(spec.get("per_run", False)),
            speed=_number(spec, "seconds_per_output_second", at, 1.0),
            overhead_s=_number(spec, "overhead_s", at, 0),
        )
        finish[model_id] = _number(spec, "finish_s", at, 0)
    groups: list[CardGroupState] = []
    pinned: dict[str, frozenset[str]] = {}
    for index, entry in enumerate(raw["fleet"]):
        at = f"{where}: fleet[{index}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("group"), str):
            raise TraceError(f"{at}: needs 'group' (a name)")
        eligible = entry.get("models", list(models))
        unknown = [m for m in [*eligible, *entry.get("pinned", [])] if m not in models]
        if unknown:
            raise TraceError(f"{at}: unknown models {unknown}")
        memory = entry.get("memory_gb_per_card")
        groups.append(
            CardGroupState(
                id=entry["group"],
                cards=int(_number(entry, "cards", at, 1)) or 1,
                eligible=frozenset(eligible),
                memory_gb_per_card=None if memory is None else _number(entry, "memory_gb_per_card", at),
                kind=str(entry.get("kind", "npu")),
            )
        )
        pinned[entry["group"]] = frozenset(entry.get("pinned") or eligible)
    weights = {
        str(name): _number(spec, "weight", f"{where}: tenants.{name}", 1.0) or 1.0
        for name, spec in (raw.get("tenants") or {}).items()
        if isinstance(spec, dict)
    }
    return tuple(groups), pinned, models, finish, weights


def read_trace(path: str | Path) -> Trace:
    """Read a trace file."""
    source = Path(path)
    with source.open(encoding="utf-8") as lines:
        return parse_trace(lines, source=source.name)


def nights(trace: Trace, count: int, *, jitter_s: float = 0.0, thin: float = 0.0, seed: int = 0) -> Trace:
    """``trace`` played ``count`` days in a row, each copy one ``DAY`` after the last (the ids of
    night ``k`` > 1 are suffixed ``@k``): the history the forecast learns arrivals from. Later nights
    are like the first, not the same: each tenant's arrivals move by one draw in [-jitter_s,
    jitter_s] and each job is left out with probability ``thin``."""
    if count < 1:
        raise TraceError(f"{trace.source}: nights must be at least 1, got {count}")
    if count > 1 and trace.jobs and trace.jobs[-1].submitted - trace.jobs[0].submitted + jitter_s >= DAY:
        raise TraceError(f"{trace.source}: its arrivals span a day or more; it cannot repeat daily")
    rng = random.Random(seed)
    copies = list(trace.jobs)
    tenants = sorted({job.tenant for job in trace.jobs})
    for k in range(1, count):
        shift = {tenant: rng.uniform(-jitter_s, jitter_s) for tenant in tenants}
        copies += [
            replace(
                job, id=f"{job.id}@{k + 1}", submitted=max(0.0, job.submitted + k * DAY + shift[job.tenant])
            )
            for job in trace.jobs
            if rng.random() >= thin
        ]
    copies.sort(key=lambda j: (j.submitted, j.index))
    return replace(trace, jobs=tuple(copies))


# --- replay ------------------------------------------------------------------------------------------
@dataclass
class _Unserved:
    """Stretches during which a model had queued work and no group serving it, each against what it
    is allowed: what was left of the jobs running in front of it on groups that may serve it when the
    stretch began (the longest), plus one load of the model."""

    open: dict[str, tuple[float, float]] = field(default_factory=dict)  # model -> (since, allowed)
    longest: dict[str, float] = field(default_factory=dict)
    over: dict[str, float] = field(default_factory=dict)  # model -> worst excess over its allowance

    def observe(self, engine: Engine) -> None:
        queued = {model for model, _, _ in engine.queues}
        for model in set(engine.models):
            cost = engine.models[model]
            served = any(serves(g, cost, engine.models) for g in engine.groups.values())
            if model in queued and not served:
                if model not in self.open:
                    front = [
                        (job.finished or 0.0) - engine.now  # what is left of it, its load included
                        for gid, job in engine.running.items()
                        if model in engine.groups[gid].eligible
                    ]
                    self.open[model] = (engine.now, max(front, default=0.0) + cost.load_s)
            elif model in self.open:
                since, allowed = self.open.pop(model)
                span = engine.now - since
                self.longest[model] = max(self.longest.get(model, 0.0), span)
                if span > allowed + 1e-6:
                    self.over[model] = max(self.over.get(model, 0.0), span - allowed)


@dataclass
class _Backlogs:
    """Which tenants had jobs waiting, from each event on: the epochs fairness is judged over."""

    epochs: list[tuple[float, frozenset[str]]] = field(default_factory=list)
    first_jobs: list[SimJob] = field(default_factory=list)  # a tenant's first job while others waited
    newcomers: list[SimJob] = field(default_factory=list)  # the first job ever of a tenant, while others
    seen: set[str] = field(default_factory=set)

    def observe(self, engine: Engine) -> None:
        waiting = frozenset(t for (_, _, t), q in engine.queues.items() if q)
        if not self.epochs or self.epochs[-1][1] != waiting:
            self.epochs.append((engine.now, waiting))

    def due(self, engine: Engine, job: SimJob) -> None:
        """Called before ``job`` is queued: an interactive job with no interactive job queued before
        it is due when the soonest-ending job on a group that may run it ends (plus its load)."""
        if job.priority != 0 or any(q for (_, p, _), q in engine.queues.items() if p == 0):
            return
        cost = engine.models[job.model]
        rates = engine.interactive_rates()
        wanted = {m for (m, p, _), q in engine.queues.items() if p == 0 and q} | {
            m for m, r in rates.items() if r
        }
        starts, strict = [], []
        for group in engine.groups.values():
            evict = evictions_for(group, cost, engine.models)
            if evict is None:
                continue
            at = (group.busy_until if group.busy_until is not None else engine.now) + (
                0.0 if cost.per_run or job.model in group.resident else cost.load_s
            )
            strict.append(at)
            if not wanted.intersection(evict):  # it takes nothing interactive users wait for
                starts.append(at)
        job.due = min(starts, default=None)
        job.due_strict = min(strict, default=None)

    def arriving(self, engine: Engine, job: SimJob) -> None:
        """Called before ``job`` is queued: is it its tenant's first while others hold the cards?"""
        waiting = {t for (_, _, t), q in engine.queues.items() if q}
        busy = {j.tenant for j in engine.running.values()}
        if job.tenant not in waiting and (waiting | busy) - {job.tenant}:
            self.first_jobs.append(job)
            if job.tenant not in self.seen:
                self.newcomers.append(job)
        self.seen.add(job.tenant)


@dataclass
class Replay:
    """A finished replay: the engine with every job done, and what was observed on the way."""

    trace: Trace
    policy: str
    engine: Engine
    jobs: list[SimJob]
    unserved: dict[str, float]
    unserved_over: dict[str, float]
    spans: list[SimSpan]
    end: float
    backlogs: _Backlogs = field(default_factory=_Backlogs)
    etas: Etas | None = None


NIGHT_GAP_S = 6 * 3600.0  # the goals' night batches: batch arrivals this far apart are two nights
REVISE_EVERY_S = 60.0  # between arrivals, the simulator's forecasts (for revisions) come this often


class Etas:
    """Gives each arriving job the ETA and queue position the service would answer its submission
    with, and keeps each job's ETA revisions as the service does: from the forecast refreshed every
    ``every_s`` (the one made at the last multiple of ``every_s``), or, for jobs that arrive
    together (a batch) or after ``SINGLES_BEFORE_REFRESH`` single submissions since the last
    forecast, from a forecast refreshed with them queued. As the service does, each forecast
    expects again what arrived a day earlier (``recurring``). With ``check_every`` > 0, every that
    many-th arrival is also played forward on its own with the same expected arrivals and no other
    later work (E2: what the forecast could know), its start and position noted on the job."""

    def __init__(self, every_s: float = 5.0, horizon: int = 2000, check_every: int = 0) -> None:
        self.every_s = every_s
        self.horizon = horizon
        self.check_every = check_every
        self.last: Forecast | None = None
        self.expected: list[SimJob] = []  # what the last forecast expected to arrive
        self.trickles: dict[str, float] | None = None  # and when it expected interactive trickles to end
        self.since: list[SimJob] = []  # jobs submitted after the last forecast
        self.seen: list[SimJob] = []  # every job submitted so far, in order (the jobs table)
        self.by_id: dict[str, SimJob] = {}  # the same, by id
        self.times: list[float] = []  # their submission times
        self.published: dict[str, float] = {}  # the ETA each queued job shows
        self.checked: dict[str, tuple[float, int]] = {}  # job id -> (start, position) in its E2 replay
        self.arrival_order: dict[str, int] = {}  # job id -> the engine's dispatches before it arrived

    def _refresh(self, engine: Engine) -> None:
        first = bisect.bisect_right(self.times, engine.now - DAY - SLACK)
        self.expected = recurring(
            self.seen[first:], engine.now, lowest=PRIORITIES["batch"], costs=engine.models
        )
        self.trickles = trickle_ends(self.seen[first:], engine.now, window=engine.params.rate_window_s)
        old, self.last = (
            self.last,
            forecast(
                engine,
                expected=self.expected,
                trickles=self.trickles,
                tenants=usage_levels(engine.fair_usage()),
                priorities=PRIORITIES.values(),
                horizon=self.horizon,
            ),
        )
        self.since = []
        # The queued jobs, and those dispatched that still load (here a job starts when its
        # generation does; in the service, when its worker claims it).
        loading = [job for job in engine.running.values() if (job.started or 0.0) > engine.now]
        waiting = [*(j for queue in engine.queues.values() for j in queue), *loading]
        for job in waiting:
            shown, revision = revise(old, self.last, _queued(job), self.published.get(job.id))
            if shown is not None:
                self.published[job.id] = shown
            if revision is not None:
                job.revisions = [*job.revisions, revision][-REVISIONS_KEPT:]
        # Those that started since the last forecast: a slip past its margin unrevised is revised now.
        current = {job.id for job in waiting}
        for job_id in [job_id for job_id in self.published if job_id not in current]:
            job, shown = self.by_id[job_id], self.published.pop(job_id)
            if job.started is not None:
                late = late_start(old, self.last, _queued(job), shown, job.started)
                if late is not None:
                    job.revisions = [*job.revisions, late][-REVISIONS_KEPT:]

    def before(self, engine: Engine, at: float) -> None:
        """Called before the clock moves to ``at``: make the periodic forecast due by then. While jobs
        wait, a forecast is also made every ``REVISE_EVERY_S`` between arrivals, and at the service's
        cadence (``every_s``) once a job still waiting has slipped past its ETA by a revision's margin
        (the service forecasts every few seconds: a slip is revised before the job starts)."""
        while self.last is not None and any(engine.queues.values()):
            following = min(self.last.at + REVISE_EVERY_S, self._slipping(engine))
            if following >= at:
                break
            engine.advance(following)
            self._refresh(engine)
        due = math.floor(at / self.every_s) * self.every_s
        if self.last is None or due > self.last.at:
            engine.advance(due)
            self._refresh(engine)

    def drain(self, engine: Engine) -> None:
        """After the last arrival: forecasts go on while jobs wait or load (their ETAs are still
        revised), and once more after the last has started (a late start is revised then)."""
        while self.last is not None and (any(engine.queues.values()) or self.published):
            engine.advance(min(self.last.at + REVISE_EVERY_S, self._slipping(engine)))
            self._refresh(engine)

    def _slipping(self, engine: Engine) -> float:
        """The first forecast time on the service's cadence (after the last forecast) at which a job
        still waiting is past its shown ETA by a revision's margin (infinity: none)."""
        assert self.last is not None
        slips = [
            self.published[job.id] + revision_margin(self.published[job.id], job.submitted)
            for queue in engine.queues.values()
            for job in queue
            if job.id in self.published
        ]
        if not slips:
            return math.inf
        return max(self.last.at + self.every_s, math.ceil(min(slips) / self.every_s) * self.every_s)

    def arrived(self, engine: Engine, jobs: list[SimJob]) -> None:
        """Jobs just queued (not yet dispatched): note the ETA and position each is given."""
        self.seen.extend(jobs)
        self.by_id.update((job.id, job) for job in jobs)
        self.times.extend(job.submitted for job in jobs)
        if len(jobs) > 1 or len(self.since) + 1 >= SINGLES_BEFORE_REFRESH:
            self._refresh(engine)
        assert self.last is not None
        self.since.extend(jobs)
        behind = behind_counts(self.since, self.last.at - 1e-9)
        for job in jobs:
            place = _queued(job, behind.get(job.id, 0)).place(self.last)
            job.eta_start = None if place is None else place.start
            job.position = None if place is None else place.position
            if job.eta_start is not None:
                self.published[job.id] = job.eta_start
            self.arrival_order[job.id] = engine.dispatched
        if self.check_every > 0:
            for job in jobs:
                if len(self.seen) % self.check_every == 0 or job is jobs[0] and len(jobs) > 1:
                    self.checked[job.id] = replay_alone(engine, job, self.last.expectation)


def _queued(job: SimJob, behind: int = 0) -> Queued:
    return Queued(job.id, job.model, job.priority, job.tenant, job.submitted, job.output_s, behind)


def replay_alone(engine: Engine, job: SimJob, expectation: ExpectedArrivals | None) -> tuple[float, int]:
    """E2: ``job``'s start and position in a copy of ``engine`` (the fleet just after it arrived)
    played forward with what the forecast that gave its ETA expected (its rates, and its arrivals
    still to come) and no other later work."""
    twin = fork(engine)
    expect(twin, (), same_as=expectation)
    target = next(j for j in twin.queues[(job.model, job.priority, job.tenant)] if j.id == job.id)
    twin.run_until_idle(enough=lambda: target.started is not None)
    assert target.started is not None
    return target.started, started_before(twin, target, since=engine.dispatched)


def started_before(engine: Engine, job: SimJob, *, since: int) -> int:
    """How many jobs ``engine`` dispatched to the groups that may run ``job``'s model after its
    ``since``-th dispatch and before ``job``."""
    eligible = {g for g, state in engine.groups.items() if job.model in state.eligible}
    return sum(
        1
        for other in [*engine.done, *engine.running.values()]
        if since <= other.order < job.order and other.group in eligible
    )


def replay(
    trace: Trace,
    *,
    policy: str = "demand",
    params: PolicyParams | None = None,
    half_life_s: float = 3600.0,
    etas: Etas | None = None,
) -> Replay:
    """Run every job of ``trace`` through the engine; with ``etas``, every job is given the ETA
    the service would have answered its submission with."""
    if policy not in {"demand", "static"}:
        raise ValueError(f"unknown policy {policy!r}: demand or static")
    jobs = [SimJob(**{**j.__dict__}) for j in trace.jobs]
    engine = Engine(
        groups=trace.fleet(policy),
        models=trace.models,
        params=params,
        planner=StaticPlanner() if policy == "static" else plan,
        half_life_s=half_life_s,
        weights=trace.weights,
        finish_s=trace.finish_s,
        now=jobs[0].submitted if jobs else 0.0,
    )
    watch = _Unserved()
    backlogs = _Backlogs()
    engine.on_dispatch.extend([watch.observe, backlogs.observe])
    index = 0
    while index < len(jobs):
        at = jobs[index].submitted
        if etas is not None:
            etas.before(engine, at)
        engine.advance(at)
        arriving = []
        while index < len(jobs) and jobs[index].submitted == at:
            backlogs.arriving(engine, jobs[index])
            backlogs.due(engine, jobs[index])
            engine.submit(jobs[index])
            arriving.append(jobs[index])
            index += 1
        if etas is not None:
            etas.arrived(engine, arriving)
        engine.dispatch()
    if etas is not None:
        etas.drain(engine)
    engine.run_until_idle()
    end = max((j.finished or 0.0) for j in jobs) if jobs else engine.now
    watch.observe(engine)
    backlogs.epochs.append((end, frozenset()))
    spans = timeline(engine, end=end)
    return Replay(
        trace, policy, engine, jobs, dict(watch.longest), dict(watch.over), spans, end, backlogs, etas
    )


# --- figures -------------------------------------------------------------------------------------------
def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) by the nearest-rank method; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _swaps_per_group_hour(result: Replay) -> float:
    worst = 0
    for group in result.engine.groups:
        times = sorted(load.at for load in result.engine.loads if load.group == group and load.evicted)
        lo = 0
        for hi, at in enumerate(times):
            while at - times[lo] >= 3600:
                lo += 1
            worst = max(worst, hi - lo + 1)
    return float(worst)


def figures(result: Replay) -> dict[str, Any]:
    """The figures of one replay (``scripts/bench_fleet.py`` prints them)."""
    jobs, engine = result.jobs, result.engine
    first = min((j.submitted for j in jobs), default=0.0)
    makespan = max(0.0, result.end - first)
    cards = sum(g.cards for g in engine.groups.values())
    generating = sum(
        (j.finished or 0) - (j.started or 0) for j in jobs for _ in range(engine.models[j.model].cards)
    )
    waits = {p: [(j.started or 0) - j.submitted for j in jobs if j.priority == p] for p in (0, 6)}
    runs = [j.finished - j.started for j in jobs if j.started is not None and j.finished is not None]
    ledger: dict[str, float] = {}
    for span in result.spans:
        group_cards = engine.groups[span.group].cards
        ledger[span.state] = ledger.get(span.state, 0.0) + (span.end - span.start) * group_cards
    return {
        "policy": result.policy,
        "jobs": len(jobs),
        "cards": cards,
        "makespan_s": round(makespan, 1),
        "useful_fraction": round(generating / (cards * makespan), 4) if makespan else 0.0,
        "loads": sum(1 for load in engine.loads if load.cold),
        "swaps": sum(1 for load in engine.loads if load.evicted),
        "swaps_per_group_hour_max": _swaps_per_group_hour(result),
        "interactive_wait_p95_s": round(pct(waits[0], 0.95), 1),
        "interactive_wait_p50_s": round(pct(waits[0], 0.50), 1),
        **_late(jobs),
        "batch_wait_p95_s": round(pct(waits[6], 0.95), 1),
        "job_run_max_s": round(max(runs, default=0.0), 1),
        "unserved_max_s": {m: round(v, 1) for m, v in sorted(result.unserved.items())},
        "unserved_over_bound": {m: round(v, 1) for m, v in sorted(result.unserved_over.items())},
        "ledger_card_seconds": {k: round(v, 1) for k, v in sorted(ledger.items())},
        "ledger_matches_wall": abs(sum(ledger.values()) - cards * max(0.0, result.end - engine.start)) < 1e-3,
        **eta_figures(jobs, result),
        **tenant_figures(result),
    }


def goals(trace: Trace, demand: Replay, static: Replay) -> dict[str, dict[str, Any]]:
    """Issue 34's per-trace goals, judged from a trace replayed with the demand policy against its
    replay with static pinning: each goal's value, its limit and whether it is met (None where the
    goal does not apply to the trace).

    - ``interactive_p95``: interactive wait p95 <= 1.1 x static's + one job's run time (the longest
      run of any job in the replay: what an interactive job may find in front of it);
    - ``interactive_late``: no interactive job, with none queued before it, starts after the
      soonest-ending job on a group that may run it (plus its load) ends (``_late``);
    - ``swaps``: at most 4 swaps in any group's worst hour;
    - ``useful``: a useful fraction at least static's;
    - ``night_batch``: each night's batch (its first arrival to its last end; a night ends where no
      batch job arrives for ``NIGHT_GAP_S``; the worst night is the value) takes at most 0.75 x
      static's, judged on nights where it saturates the fleet (its model's batch jobs at least twice
      the groups that may run it) and static leaves groups that may run it on other models idle at
      least half that time; ``floor`` is what it would take on every such group from its first
      arrival with no load (the groups static pins to it over those that may run it).
    """
    ours, base = figures(demand), figures(static)
    found: dict[str, dict[str, Any]] = {}
    if ours["interactive_due_jobs"] or ours["interactive_wait_p95_s"]:
        limit = 1.1 * base["interactive_wait_p95_s"] + ours["job_run_max_s"]
        p95 = ours["interactive_wait_p95_s"]
        found["interactive_p95"] = {"value": p95, "limit": round(limit, 1), "met": p95 <= limit + 1e-6}
        late = ours["interactive_late_jobs"]
        found["interactive_late"] = {"value": late, "limit": 0, "met": late == 0}
    swaps = ours["swaps_per_group_hour_max"]
    found["swaps"] = {"value": swaps, "limit": 4, "met": swaps <= 4}
    useful, floor = ours["useful_fraction"], base["useful_fraction"]
    found["useful"] = {"value": useful, "limit": floor, "met": useful >= floor}
    nights = [
        (a, b, _saturates(trace, static, a, b))
        for a, b in zip(_batches(demand), _batches(static), strict=False)
    ]
    if nights:
        worst = max(nights, key=lambda night: (night[2], _span(night[0]) / _span(night[1])))
        ratio = _span(worst[0]) / _span(worst[1])
        met = None if not worst[2] else all(_span(a) <= 0.75 * _span(b) for a, b, judged in nights if judged)
        model = _batch_model(worst[0])
        hosts = [g.id for g in trace.groups if model in g.eligible]
        pinned = [g for g in hosts if model in trace.pinned[g]]
        found["night_batch"] = {
            "value": round(ratio, 3),
            "limit": 0.75,
            "met": met,
            # What it would take with every group that may run it from its first arrival, no loads:
            # above 0.75 the goal cannot be met on this fleet whatever the policy does.
            "floor": round(len(pinned) / len(hosts), 3),
        }
    return found


def _batch_model(jobs: list[SimJob]) -> str:
    """The model most of a night's batch jobs ask for (a tie: the first by name)."""
    counts: dict[str, int] = {}
    for job in jobs:
        counts[job.model] = counts.get(job.model, 0) + 1
    return min(counts, key=lambda m: (-counts[m], m))


def _batches(result: Replay) -> list[list[SimJob]]:
    """The batch jobs of ``result`` night by night: a night ends where no batch job arrives for
    ``NIGHT_GAP_S``."""
    jobs = sorted(
        (j for j in result.jobs if j.priority > 0 and j.finished is not None), key=lambda j: j.submitted
    )
    found: list[list[SimJob]] = []
    for job in jobs:
        if not found or job.submitted - found[-1][-1].submitted >= NIGHT_GAP_S:
            found.append([])
        found[-1].append(job)
    return found


def _span(jobs: list[SimJob]) -> float:
    """From the first of ``jobs``' arrivals to the last one's end."""
    return max(j.finished or 0.0 for j in jobs) - min(j.submitted for j in jobs)


def _saturates(trace: Trace, static: Replay, ours: list[SimJob], pinned: list[SimJob]) -> bool:
    """Whether a night's batch is one the night-batch goal judges: its model's jobs (the model with
    the most) at least twice the groups that may run it, and static leaving groups that may run it
    on other models idle at least half the batch's time there."""
    model = _batch_model(ours)
    hosts = [g.id for g in trace.groups if model in g.eligible]
    spare = [g for g in hosts if model not in trace.pinned[g]]
    start = min(j.submitted for j in pinned)
    end = start + _span(pinned)
    busy = sum(
        max(0.0, min(end, span.end) - max(start, span.start))
        for span in static.spans
        if span.group in spare and not span.state.startswith("idle")
    )
    jobs = sum(1 for job in ours if job.model == model)
    return jobs >= 2 * len(hosts) and bool(spare) and busy <= 0.5 * len(spare) * (end - start)


def _late(jobs: list[SimJob]) -> dict[str, Any]:
    """Interactive jobs that started after they were due (``SimJob.due``): how many, and by how much."""
    interactive = sorted(
        (j for j in jobs if j.priority == 0 and j.started is not None), key=lambda j: j.submitted
    )
    overtaken: set[str] = set()  # a later interactive job (a tenant with less usage) started first
    soonest_later = math.inf  # the earliest start of the jobs submitted after the ones at hand
    for _, same in itertools.groupby(reversed(interactive), key=lambda j: j.submitted):
        batch = list(same)
        overtaken.update(j.id for j in batch if soonest_later < (j.started or 0.0))
        soonest_later = min(soonest_later, *((j.started or 0.0) for j in batch))
    due = [j for j in jobs if j.due is not None and j.started is not None and j.id not in overtaken]
    late = [(j.started or 0.0) - (j.due or 0.0) for j in due if (j.started or 0.0) > (j.due or 0.0) + 1e-6]
    strict = [
        (j.started or 0.0) - j.due_strict
        for j in jobs
        if j.due_strict is not None and (j.started or 0.0) > j.due_strict + 1e-6
    ]
    return {
        "interactive_due_jobs": len(due),
        "interactive_overtaken_jobs": len(overtaken),
        "interactive_late_jobs": len(late),
        "interactive_late_max_s": round(max(late, default=0.0), 1),
        "interactive_late_strict_jobs": len(strict),
        "interactive_late_strict_max_s": round(max(strict, default=0.0), 1),
    }


def _service(jobs: list[SimJob], engine: Engine, start: float, end: float) -> dict[str, float]:
    """Card-seconds each tenant's jobs held their groups (loading or generating) within [start, end)."""
    found: dict[str, float] = {}
    for job in jobs:
        if job.dispatched is None or job.finished is None:
            continue
        overlap = min(end, job.finished) - max(start, job.dispatched)
        if overlap > 0:
            found[job.tenant] = found.get(job.tenant, 0.0) + overlap * engine.models[job.model].cards
    return found


def tenant_figures(result: Replay) -> dict[str, Any]:
    """Fair share: card-seconds per tenant (all, and while every tenant of the epoch had work
    waiting), Jain's index over the tenants backlogged together (weighted, duration-weighted over
    epochs at least 10 mean jobs long), and the longest wait of a tenant's first job while others
    held the cards."""
    jobs, engine = result.jobs, result.engine
    weights = result.trace.weights
    total = _service(jobs, engine, -math.inf, math.inf)
    tenants = sorted({j.tenant for j in jobs})
    if len(tenants) < 2:
        return {"tenant_card_seconds": {t: round(v, 1) for t, v in total.items()}}
    mean_job = statistics.mean((j.finished or 0) - (j.dispatched or 0) for j in jobs)
    contended: dict[str, float] = {}
    weighted, span, worst, gap = 0.0, 0.0, math.inf, 0.0
    epochs = result.backlogs.epochs
    for (start, waiting), (end, _) in zip(epochs, epochs[1:], strict=False):
        if len(waiting) < 2 or end - start < 10 * mean_job:
            continue
        got = _service(jobs, engine, start, end)
        shares = [got.get(t, 0.0) / weights.get(t, 1.0) for t in waiting]
        if sum(shares) <= 0:
            continue
        jain = sum(shares) ** 2 / (len(shares) * sum(x * x for x in shares))
        weighted += jain * (end - start)
        span += end - start
        worst = min(worst, jain)
        gap = max(gap, _service_gap(jobs, engine, weights, waiting, start, end))
        for t in waiting:
            contended[t] = contended.get(t, 0.0) + got.get(t, 0.0)
    # The service gap in units of the largest job's cost over the least weight (VTC's bound).
    largest = max(((j.finished or 0) - (j.dispatched or 0)) * engine.models[j.model].cards for j in jobs)
    least = min([weights.get(t, 1.0) for t in tenants])
    starved = [(j.started or 0) - j.submitted for j in result.backlogs.first_jobs]
    late = _newcomers_late(result)
    return {
        "tenant_card_seconds": {t: round(total.get(t, 0.0), 1) for t in tenants},
        "tenant_card_seconds_contended": {t: round(v, 1) for t, v in sorted(contended.items())},
        "jain_index": round(weighted / span, 4) if span else None,
        "jain_worst_epoch": round(worst, 4) if span else None,
        "jain_contended_s": round(span, 1),
        "service_gap_jobs": round(gap / (largest / least), 2) if span and largest else None,
        "starved_max_wait_s": round(max(starved), 1) if starved else 0.0,
        "newcomer_jobs": len(result.backlogs.newcomers),
        "newcomer_late_jobs": len(late),
        "newcomer_late_max_s": round(max(late, default=0.0), 1),
    }


def _service_gap(
    jobs: list[SimJob],
    engine: Engine,
    weights: dict[str, float],
    tenants: frozenset[str],
    start: float,
    end: float,
) -> float:
    """The largest difference in weighted service (card-seconds per weight) that any two of
    ``tenants`` received over any stretch of [start, end): for each pair, the range of the running
    difference of what they received."""
    events: list[tuple[float, str, float]] = []  # (when, tenant, change of its cards per weight)
    for job in jobs:
        if job.tenant not in tenants or job.dispatched is None or job.finished is None:
            continue
        a, b = max(start, job.dispatched), min(end, job.finished)
        if b > a:
            pace = engine.models[job.model].cards / weights.get(job.tenant, 1.0)
            events += [(a, job.tenant, pace), (b, job.tenant, -pace)]
    events.sort()
    names = sorted(tenants)
    rate = dict.fromkeys(names, 0.0)
    got = dict.fromkeys(names, 0.0)
    lo = {(x, y): 0.0 for x in names for y in names if x < y}
    hi = dict(lo)
    at = start
    for when, tenant, change in events:
        if when > at:
            for name in names:
                got[name] += rate[name] * (when - at)
            for pair in lo:
                diff = got[pair[0]] - got[pair[1]]
                lo[pair], hi[pair] = min(lo[pair], diff), max(hi[pair], diff)
            at = when
        rate[tenant] += change
    return max((hi[pair] - lo[pair] for pair in lo), default=0.0)


def _newcomers_late(result: Replay) -> list[float]:
    """Lone newcomers (a tenant's first job ever, while others held the cards, and no other
    newcomer's came before it started) that a job of the same model and priority, dispatched after
    they arrived, went before: how much sooner that one was dispatched."""
    late = []
    arrivals = [j.submitted for j in result.backlogs.newcomers]
    for job in result.backlogs.newcomers:
        if job.dispatched is None or any(job.submitted < t <= job.dispatched for t in arrivals):
            continue
        before = [
            k.dispatched
            for k in result.jobs
            if k.model == job.model
            and k.priority == job.priority
            and k.dispatched is not None
            and job.submitted <= k.dispatched < job.dispatched - 1e-6
        ]
        if before:
            late.append(job.dispatched - min(before))
    return late


ETA_FLOOR_S = 60.0  # errors are relative to the actual wait, or to this when the wait was shorter


def eta_figures(jobs: list[SimJob], result: Replay | None = None) -> dict[str, Any]:
    """How far the ETA each job was given at submission was from when it started (E1), from its
    start in a replay with the same expected arrivals and no other later work (E2, the jobs checked
    so), whether every start that slipped past its ETA has a revision (E3), and how the queue
    position each job was given compares with the jobs that started before it."""
    errors, waited = [], []
    for job in jobs:
        if job.eta_start is None or job.started is None:
            continue
        wait = job.started - job.submitted
        error = abs(job.eta_start - job.started) / max(wait, ETA_FLOOR_S) * 100
        errors.append(error)
        if wait >= ETA_FLOOR_S:
            waited.append(error)
    if not errors:
        return {}
    found: dict[str, Any] = {
        "eta_start_error_median_pct": round(median(errors), 1),
        "eta_start_error_p90_pct": round(pct(errors, 0.9), 1),
        "eta_jobs": len(errors),
        "eta_start_error_median_pct_waited": round(median(waited), 1),
        "eta_start_error_p90_pct_waited": round(pct(waited, 0.9), 1),
        "eta_waited_jobs": len(waited),
    }
    slipped = [
        job
        for job in jobs
        if job.eta_start is not None
        and job.started is not None
        and job.started - job.eta_start > max(ETA_FLOOR_S, 0.2 * max(0.0, job.eta_start - job.submitted))
    ]
    found["eta_slipped_jobs"] = len(slipped)
    found["eta_slipped_with_revision_pct"] = (
        round(100.0 * sum(1 for j in slipped if j.revisions) / len(slipped), 1) if slipped else 100.0
    )
    found["eta_revisions"] = sum(len(j.revisions) for j in jobs)
    if result is None or result.etas is None:
        return found
    etas = result.etas
    checked = [(j, etas.checked[j.id]) for j in jobs if j.id in etas.checked and j.eta_start is not None]
    if checked:
        e2 = [
            abs((j.eta_start or 0.0) - start) / max(start - j.submitted, ETA_FLOOR_S) * 100
            for j, (start, _) in checked
        ]
        found["e2_eta_error_median_pct"] = round(median(e2), 1)
        found["e2_eta_error_p90_pct"] = round(pct(e2, 0.9), 1)
        found["e2_jobs"] = len(checked)
        same = [j.position == position for j, (_, position) in checked if j.position is not None]
        found["e2_position_exact_pct"] = round(100.0 * sum(same) / len(same), 1) if same else None
    gaps = [
        abs((j.position or 0) - started_before(result.engine, j, since=etas.arrival_order[j.id]))
        for j in jobs
        if j.position is not None and j.id in etas.arrival_order and j.started is not None
    ]
    if gaps:
        found["position_exact_pct"] = round(100.0 * sum(1 for g in gaps if g == 0) / len(gaps), 1)
        found["position_error_median"] = median([float(g) for g in gaps])
        found["position_error_p90"] = pct([float(g) for g in gaps], 0.9)
    return found


def schedule(result: Replay) -> Iterator[dict[str, Any]]:
    """One line per job, in trace order (``--schedule-out``)."""
    for job in sorted(result.jobs, key=lambda j: j.index):
        yield {
            "index": job.index,
            "tenant": job.tenant,
            "model": job.model,
            "priority": "interactive" if job.priority == 0 else "batch",
            "group": job.group,
            "submitted": round(job.submitted, 3),
            "started": round(job.started or 0.0, 3),
            "finished": round(job.finished or 0.0, 3),
            "loaded": job.loaded,
            "eta_start": None if job.eta_start is None else round(job.eta_start, 3),
            "queue_position": job.position,
            "due": None if job.due is None else round(job.due, 3),
            "eta_revisions": [
                {**r, "old": round(float(r["old"]), 3), "new": round(float(r["new"]), 3)}  # type: ignore[arg-type]
                for r in job.revisions
            ],
        }


def median(values: list[float]) -> float:
    """The median, 0 for no values."""
    return statistics.median(values) if values else 0.0

"""Residency and fair share: which job a free card group runs next, and what it holds to run it.

Pure decisions: a ``FleetState`` in, ``Decision`` objects out. No I/O and no clock (``now`` is part
of the state), so the dispatcher (``jobservice.fleet.dispatch``, state read from the database), the
workers (``evictions_for`` before a load) and the simulator (``jobservice.fleet.simulate``, state
kept in virtual time by ``scripts/bench_fleet.py`` and by the ETA forecast) call the very same code.

The rules, in the order they apply when a group is free (between jobs; nothing is ever preempted):

1. **Priority, and interactive first.** Interactive work (priority 0) before batch work; a group
   looks at batch work only when it has no interactive option it should take. An interactive job
   never waits for batch work: the first group that frees up and may run it takes it, evicting
   what only batch work uses however much the swap costs, unless a group holding its model warm
   would start it sooner. When several of a tenant's interactive jobs of a model wait and a group
   loads the model while a group holding it warm will start some of them before that load ends, the
   loading group takes the job the warm one would start last (``Decision.skip``): the tenant's jobs
   start in the order they came. (A swap that takes a model other interactive users wait for, or
   submit lately, is weighed by the rules below like any other.)
2. **Unserved first.** A model with queued work that no group holds, loads or runs (for a per-run
   back end: that no group could run without evicting something) is served by the first eligible
   group that frees up, unless that would evict a model the group loaded less than
   ``min_residency_s`` ago (a swap is never undone before it paid for itself). A swap that only
   moves who is unserved (it evicts a model that has queued work as urgent and no other group)
   waits instead: it is taken once the evicted model has held the group, and the waiting model's
   oldest job has waited, ``hysteresis`` times what the swap costs (this model's load plus the
   evicted ones' reload), so a lone group between two busy models runs each in turns that pay for
   their loads rather than swapping on every job. Nor does batch work take an unserved model's
   swap on a group when another group that could start it without evicting anything frees before
   the reload of what the swap would evict (a model with queued work or used in the last
   ``recent_s``): that group takes it, and this one keeps its model.
3. **Warm next.** A job of a model the group holds (or, per-run, can run beside what it holds)
   needs no load.
4. **Load only when it pays.** A model that other groups serve is loaded here only if the work
   the group would do with it (its queued work per serving group) exceeds ``hysteresis`` times
   what the swap costs: this model's load, plus the reload of each evicted model that was used in
   the last ``recent_s``. If the swap leaves an evicted model that still receives jobs with no
   other group, rule 2 pulls the group back at its next job (at once if that job is more urgent,
   else after rule 2's wait), so the stint is counted, conservatively, only until that job arrives
   (one over that model's arrival rate): a trickle of talking heads keeps its group, a long
   batch of them does not. And a job is not loaded here when a group holding its model warm will
   start it sooner.
5. **A place for the trickle.** A model that interactive users submit often keeps one group with
   room for it when its jobs would bring a group to the swap cap of rule 7 (at its arrival rate,
   counting a resident model's swap back, spread over the groups that may host it, on top of the
   swaps the busiest of them made in the last hour: there the cap would make its next job wait for
   another group), or when they come sooner than ``hysteresis`` times what making room for one
   costs: the last group that could start it without evicting anything takes no batch work that
   would take that room while its interactive jobs keep coming (the arrival rate over
   ``rate_window_s``). A lone group is never held back.
6. **Fair share within a choice.** Among the jobs of the chosen class, the tenant with the least
   card-seconds for its weight (decayed, plus what runs now) goes first; then the oldest job.
   Fairness picks among jobs the group can run well: it never forces a swap by itself.
7. **A swap cap.** No group makes a swap (for any of the reasons above) once it made
   ``swap_cap`` in the last hour, while another group that could run the job has made fewer: that
   group takes it when it frees. With every such group at the cap, the first free one takes it (no
   job waits an hour for a swap to age out).

Memory: a model's ``memory_gb`` is summed over its ``cards`` and spread evenly over them; every
model a group holds or runs occupies the group's first cards, so a set fits when each card's share
stays within ``memory_gb_per_card``. A group without declared memory holds anything.

The baseline the fleet had before this module (each group serves its pinned models only, in turn)
is a benchmark's, not the product's: ``scripts/bench_lib/static.py``.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import ClassVar

INTERACTIVE = 0  # the priority of interactive jobs; batch jobs carry a larger number


@dataclass(frozen=True)
class ModelCost:
    """What running a model costs: its footprint, its cold load and its measured speed."""

    id: str
    cards: int = 1
    memory_gb: float = 0.0  # resident (and while running), summed over its cards
    load_s: float = 0.0  # a cold load, measured (else the deployment's default)
    per_run: bool = False  # nothing stays resident: every run starts and loads its own process
    speed: float = 1.0  # seconds of generation per second of output
    overhead_s: float = 0.0  # seconds every job takes whatever its length

    def run_s(self, output_seconds: float) -> float:
        """Estimated generation time of one job producing ``output_seconds`` of video."""
        return max(0.0, self.overhead_s + self.speed * max(0.0, output_seconds))

    def card_seconds(self, output_seconds: float, *, load: bool = False) -> float:
        """What one job should cost its tenant: its generation (and its load, if it pays for one)
        on every card of the model."""
        return ((self.load_s if load else 0.0) + self.run_s(output_seconds)) * self.cards

    @property
    def per_card_gb(self) -> float:
        """Memory on each of its cards."""
        return self.memory_gb / max(1, self.cards)


@dataclass(frozen=True)
class Resident:
    """A model a group holds: since when, and when a job last used it."""

    since: float
    last_used: float


@dataclass(frozen=True)
class CardGroupState:
    """One card group (one worker process) as the policy sees it."""

    id: str
    cards: int
    eligible: frozenset[str]
    memory_gb_per_card: float | None = None  # None: not declared, no limit
    resident: Mapping[str, Resident] = field(default_factory=dict)
    busy_until: float | None = None  # None: free now; else when its current job should end
    running: str | None = None  # the model of the job it runs (or loads for)
    kind: str = "cpu"
    swaps: tuple[float, ...] = ()  # when it evicted a model to make room, over the last hour

    @property
    def free(self) -> bool:
        """Whether the group can take a job now."""
        return self.busy_until is None


@dataclass(frozen=True)
class Waiting:
    """The queued (not yet dispatched) jobs of one model, priority and tenant."""

    model: str
    priority: int
    tenant: str
    jobs: int
    output_s: float  # seconds of video all of them will produce
    oldest: float  # when the oldest of them was submitted
    next_output_s: float  # seconds of video the oldest will produce
    # False for an entry that may be picked like any job but is no queued job (the ETA forecast's
    # what-ifs, ``jobservice.fleet.simulate.WhatIf``): demand, claims and rivals skip it.
    queued_work: ClassVar[bool] = True
    # Whether its work counts in the work queued for its own model (``work_s``: how long the jobs of
    # the model wait, whether loading it on one more group pays). True for jobs, and for the one
    # what-if of a model that stands for one more job of it (``simulate.MarginalWhatIf``).
    adds_work: ClassVar[bool] = True


@dataclass(frozen=True)
class PolicyParams:
    """The knobs of the demand policy (defaults measured with scripts/bench_fleet.py)."""

    hysteresis: float = 3.0
    recent_s: float = 1800.0  # a model used this recently costs its reload when evicted
    min_residency_s: float = 0.0
    rate_window_s: float = 1800.0  # arrival rates are counted over this window
    # A swap made because it pays (rule 4), or after a turn (rule 2), waits while its group has made
    # this many swaps in the last hour; interactive first and an unserved model's first group don't.
    swap_budget: int = 3
    # No swap, whatever its reason, on a group that made this many in the last hour while another
    # group that may run the job has made fewer (rule 7).
    swap_cap: int = 4


@dataclass(frozen=True)
class FleetState:
    """Everything a decision looks at."""

    now: float
    groups: tuple[CardGroupState, ...]
    models: Mapping[str, ModelCost]
    waiting: tuple[Waiting, ...]
    usage: Mapping[str, float] = field(default_factory=dict)  # tenant -> its level (``fair_usage``)
    rates: Mapping[str, float] = field(default_factory=dict)  # model -> jobs submitted per second lately
    params: PolicyParams = field(default_factory=PolicyParams)
    # model -> interactive jobs submitted per second lately (the trickle a group is kept for)
    interactive_rates: Mapping[str, float] = field(default_factory=dict)
    weights: Mapping[str, float] = field(default_factory=dict)  # tenant -> fair-share weight (1)
    activated: Mapping[str, float] = field(default_factory=dict)  # tenant -> when it last began competing


@dataclass(frozen=True)
class Decision:
    """Run the oldest queued job of (``model``, ``priority``, ``tenant``) on ``group`` (after ``skip``)."""

    group: str
    model: str
    priority: int
    tenant: str
    load: bool  # the group loads the model first (a cold start)
    evict: tuple[str, ...] = ()  # what it unloads before that
    reason: str = "warm"  # warm | unserved | backlog (a benchmark's baseline: static)
    # Leave this many of the oldest jobs to groups that start them sooner, and run the next: a group
    # that loads the model while another holds it warm takes the job the warm one would start last.
    skip: int = 0


# --- memory ---------------------------------------------------------------------------------------
def fits(group: CardGroupState, models: Mapping[str, ModelCost], held: Iterable[str]) -> bool:
    """Whether ``held`` (models resident or running at once) fits in the group's memory."""
    if group.memory_gb_per_card is None:
        return True
    costs = [models[m] for m in held if m in models]
    for card in range(group.cards):
        if sum(c.per_card_gb for c in costs if c.cards > card) > group.memory_gb_per_card + 1e-9:
            return False
    return True


def can_host(group: CardGroupState, model: ModelCost) -> bool:
    """Whether the group could run ``model`` at all (eligible, enough cards, fits alone)."""
    return (
        model.id in group.eligible
        and model.cards <= group.cards
        and fits(group, {model.id: model}, [model.id])
    )


def evictions_for(
    group: CardGroupState,
    model: ModelCost,
    models: Mapping[str, ModelCost],
    *,
    demand: Mapping[str, float] | None = None,
) -> tuple[str, ...] | None:
    """What the group unloads so that ``model`` fits beside the rest (None: it cannot host it).

    Victims go in order: models with no queued work first, then the least queued work, then the
    least recently used. A per-run model needs room only while it runs; a resident one keeps it.
    """
    if not can_host(group, model):
        return None
    held = [m for m in group.resident if m != model.id]
    if fits(group, models, [*held, model.id]):
        return ()
    want = demand or {}
    order = sorted(held, key=lambda m: (want.get(m, 0.0) > 0, want.get(m, 0.0), group.resident[m].last_used))
    evicted: list[str] = []
    for victim in order:
        evicted.append(victim)
        rest = [m for m in held if m not in evicted]
        if fits(group, models, [*rest, model.id]):
            return tuple(evicted)
    return tuple(evicted)  # everything out: it fits alone (can_host)


def warm_on(group: CardGroupState, model: ModelCost, models: Mapping[str, ModelCost]) -> bool:
    """Whether the group can start ``model`` without loading or evicting anything."""
    if model.per_run:
        return can_host(group, model) and fits(group, models, [*group.resident, model.id])
    return model.id in group.resident


def serves(group: CardGroupState, model: ModelCost, models: Mapping[str, ModelCost]) -> bool:
    """Whether the group serves ``model``: holds it, loads or runs it, or (per-run) could run it
    without evicting anything. A model with queued work and no such group is *unserved*."""
    return can_host(group, model) and (group.running == model.id or warm_on(group, model, models))


# --- fair share -----------------------------------------------------------------------------------
def decayed(value: float, elapsed_s: float, half_life_s: float) -> float:
    """``value`` recorded ``elapsed_s`` ago, halved every ``half_life_s``."""
    if half_life_s <= 0:
        return 0.0
    return value * math.pow(0.5, max(0.0, elapsed_s) / half_life_s)


@dataclass(frozen=True)
class InFlight:
    """A job handed to a group and not yet ended, as fair share counts it."""

    tenant: str
    estimate: float  # card-seconds it should cost in all (``ModelCost.card_seconds``)
    used: float  # card-seconds it has held its cards so far


def fair_usage(
    charged: Mapping[str, float], inflight: Iterable[InFlight], weights: Mapping[str, float]
) -> dict[str, float]:
    """Each tenant's fair-share level: its charged card-seconds (decayed by the caller), plus for
    every job of it handed to a group and not yet ended the larger of what that job should cost and
    what it used so far (a job is charged when it is dispatched; when it ends, what it really used
    replaces the estimate), divided by the tenant's weight."""
    found = dict(charged)
    for job in inflight:
        found[job.tenant] = found.get(job.tenant, 0.0) + max(job.estimate, job.used)
    return {tenant: value / weight_of(weights, tenant) for tenant, value in found.items()}


def weight_of(weights: Mapping[str, float], tenant: str) -> float:
    """A tenant's fair-share weight (1 unless set; never below a tiny positive number)."""
    return max(1e-9, weights.get(tenant, 1.0))


def lift(
    level: float, *, others: Iterable[float], floor: float | None, credit: float
) -> tuple[float, float | None]:
    """The level a tenant comes in at when it starts competing (it submits with no job waiting to be
    dispatched): at least ``V - credit``, where V is the least level among the other tenants with
    jobs waiting (none: ``floor``, the last such V, decayed), so idleness banks nothing beyond a small
    newcomer ``credit`` (VTC's lift, Sheng et al., OSDI 2024). Returns (the new level, V or None)."""
    v = min(others, default=None)
    if v is None:
        v = floor
    if v is None:
        return level, None
    return max(level, v - credit), v


def fair_key(
    usage: Mapping[str, float], item: Waiting, activated: Mapping[str, float] | None = None
) -> tuple[float, float, float, str]:
    """Sort key of fair order: the least level first; on a tie the tenant that began competing most
    recently (a newcomer lifted to the others' level goes first), then the oldest job."""
    since = (activated or {}).get(item.tenant, -math.inf)
    return (usage.get(item.tenant, 0.0), -since, item.oldest, item.tenant)


# --- the demand policy ----------------------------------------------------------------------------
@dataclass
class _Option:
    waiting: Waiting
    rank: int  # 0 unserved, 1 warm, 2 backlog
    load: bool
    evict: tuple[str, ...]
    reason: str
    skip: int = 0


class _Round:
    """One planning round: the state, updated as each free group is given a job."""

    def __init__(self, state: FleetState) -> None:
        self.state = state
        self.now = state.now
        self.params = state.params
        self.models = state.models
        self.groups = {g.id: g for g in state.groups}
        self.waiting: dict[tuple[str, int, str], Waiting] = {
            (w.model, w.priority, w.tenant): w for w in state.waiting if w.jobs > 0
        }
        self.usage = dict(state.usage)

    # demand -------------------------------------------------------------------------------------
    def work_s(self, model: str, max_priority: int | None = None) -> float:
        cost = self.models[model]
        return sum(
            w.jobs * cost.overhead_s + cost.speed * w.output_s
            for w in self.waiting.values()
            if w.model == model and w.adds_work and (max_priority is None or w.priority <= max_priority)
        )

    def demand(self) -> dict[str, float]:
        found: dict[str, float] = {}
        for w in self.waiting.values():
            if w.queued_work:
                found[w.model] = found.get(w.model, 0.0) + w.jobs
        return found

    def servers(self, model: ModelCost, *, besides: str) -> list[CardGroupState]:
        """Groups other than ``besides`` that serve ``model``: hold it, load it, run it, or (per-run)
        could run it without evicting anything."""
        return [g for g in self.groups.values() if g.id != besides and serves(g, model, self.models)]

    # options of one free group --------------------------------------------------------------------
    def options(self, group: CardGroupState, kept: frozenset[str]) -> list[_Option]:
        demand = self.demand()
        found: list[_Option] = []
        for item in self.waiting.values():
            cost = self.models.get(item.model)
            if cost is None or not can_host(group, cost):
                continue
            if warm_on(group, cost, self.models):
                found.append(_Option(item, 1, False, (), "warm"))
                continue
            evict = evictions_for(group, cost, self.models, demand=demand) or ()
            option = self._cold_option(group, item, cost, evict, kept)
            if option is not None:
                found.append(option)
        return found

    def _cold_option(
        self,
        group: CardGroupState,
        item: Waiting,
        cost: ModelCost,
        evict: tuple[str, ...],
        kept: frozenset[str],
    ) -> _Option | None:
        load = not cost.per_run
        protected = [
            m
            for m in evict
            if self.now - group.resident[m].since < self.params.min_residency_s and self.demand().get(m)
        ]
        if protected or (evict and self._capped_here(group, cost)):
            return None
        servers = self.servers(cost, besides=group.id)
        if not servers:
            stranded = self._stranded(group, item, evict)
            if stranded and (self.spent(group) or self._waits_turn(group, item, stranded, load)):
                return None
            if item.priority != INTERACTIVE and self._cheaper_soon(group, item, cost, evict, kept):
                return None
            return _Option(item, 0, load, evict, "unserved")
        # Would a group that holds it warm start this job sooner than loading it here?
        load_here = cost.load_s if load else 0.0
        soonest = min((g.busy_until if g.busy_until is not None else self.now) for g in servers)
        ahead = self.work_s(cost.id, item.priority) / len(servers)
        if item.priority == INTERACTIVE and not self._rivals(group, item, evict):
            # Interactive first: against batch work, it starts wherever it starts soonest, whatever
            # the swap costs; a group holding its model warm is waited for only when it would start
            # it sooner.
            before = max(0.0, self.work_s(cost.id, item.priority) - cost.run_s(item.next_output_s))
            if soonest - self.now + before / len(servers) <= load_here:
                return None
            return _Option(
                item, 2, load, evict, "interactive", self._left_warm(item, cost, servers, load_here)
            )
        if soonest - self.now + ahead <= load_here:
            return None
        reload = sum(
            self.models[m].load_s
            for m in evict
            if m in self.models and self.now - group.resident[m].last_used < self.params.recent_s
        )
        stint = ahead
        for victim in evict:
            rate = self.state.rates.get(victim, 0.0)
            alone = (
                not self.servers(self.models[victim], besides=group.id) if victim in self.models else False
            )
            if rate > 0 and alone:  # its next job brings the group back (rule 2)
                stint = min(stint, 1.0 / rate + cost.run_s(item.next_output_s))
        if stint <= self.params.hysteresis * (load_here + reload) or (evict and self.spent(group)):
            return None
        return _Option(item, 2, load, evict, "backlog")

    def _left_warm(self, item: Waiting, cost: ModelCost, servers: list[CardGroupState], load_s: float) -> int:
        """How many of ``item``'s oldest jobs the groups serving its model start before a load of
        ``load_s`` here would end: they take those, and this group the next (judged only where
        ``item``'s tenant has all of the model's queued work at its priority; else none)."""
        if item.jobs < 2 or any(
            w.model == item.model
            and w.priority == item.priority
            and w.tenant != item.tenant
            and w.queued_work
            for w in self.waiting.values()
        ):
            return 0
        frees = [g.busy_until if g.busy_until is not None else self.now for g in servers]
        heapq.heapify(frees)
        run_s, ready, skip = cost.run_s(item.output_s / item.jobs), self.now + load_s, 0
        while skip < item.jobs - 1 and frees[0] < ready:
            heapq.heappush(frees, heapq.heappop(frees) + run_s)
            skip += 1
        return skip

    def spent(self, group: CardGroupState, budget: int | None = None) -> bool:
        """Whether ``group`` has made ``budget`` (default ``swap_budget``) swaps in the last hour."""
        return self.swapped(group) >= (self.params.swap_budget if budget is None else budget)

    def swapped(self, group: CardGroupState) -> int:
        """How many swaps ``group`` made in the last hour."""
        return sum(1 for at in group.swaps if self.now - at < 3600.0)

    def _capped_here(self, group: CardGroupState, cost: ModelCost) -> bool:
        """Rule 7: whether ``group`` is at its swap cap while another group that could run ``cost`` is
        not (that one takes the job when it frees; with every such group capped, the job is not held
        back for an hour)."""
        cap = self.params.swap_cap
        if not self.spent(group, cap):
            return False
        return any(
            g.id != group.id and can_host(g, cost) and not self.spent(g, cap) for g in self.groups.values()
        )

    def _cheaper_soon(
        self,
        group: CardGroupState,
        item: Waiting,
        cost: ModelCost,
        evict: tuple[str, ...],
        kept: frozenset[str],
    ) -> bool:
        """Whether another group will start ``item`` (batch work) without evicting anything before the
        swap here would pay back the reload of what it evicts (a model with queued work, or used in
        the last ``recent_s``), and would take it (it is not ``kept`` trickles' last room): the
        unserved model waits for it, and this group keeps its model."""
        reload = sum(
            self.models[m].load_s
            for m in evict
            if m in self.models
            and (self.demand().get(m) or self.now - group.resident[m].last_used < self.params.recent_s)
        )
        if reload <= 0:
            return False
        for other in self.groups.values():
            if other.id == group.id or other.busy_until is None or other.busy_until - self.now >= reload:
                continue
            if evictions_for(other, cost, self.models) != ():
                continue
            freed = replace(other, busy_until=None, running=None)
            if not self.takes_room(freed, _Option(item, 0, not cost.per_run, (), "unserved"), kept):
                return True
        return False

    def _stranded(self, group: CardGroupState, item: Waiting, evict: tuple[str, ...]) -> list[str]:
        """The models a swap for ``item`` would leave unserved that have work as urgent as it (queued,
        or, for interactive work, interactive users submitting it lately): it only moves who is
        unserved."""
        return [
            m
            for m in evict
            if m in self.models
            and (self.queued(m, item.priority) or (item.priority == INTERACTIVE and self.interactive(m)))
            and not self.servers(self.models[m], besides=group.id)
        ]

    def _waits_turn(self, group: CardGroupState, item: Waiting, stranded: list[str], load: bool) -> bool:
        """Whether a swap that strands ``stranded`` waits: until they have held the group, and the
        oldest job of ``item`` has waited, ``hysteresis`` times what the swap costs: a turn each that
        pays for its loads."""
        load_s = self.models[item.model].load_s if load else 0.0
        turn_s = self.params.hysteresis * (load_s + sum(self.models[m].load_s for m in stranded))
        held_s = min(self.now - group.resident[m].since for m in stranded)
        return min(held_s, self.now - item.oldest) < turn_s

    def _rivals(self, group: CardGroupState, item: Waiting, evict: tuple[str, ...]) -> bool:
        """Whether other interactive users have a claim on ``group``: the swap evicts a model they
        wait for (or submit lately), or they have queued jobs of another model it could run. Between
        interactive users the rules below weigh the swap; interactive first is against batch work."""
        if any(self.interactive(m) for m in evict):
            return True
        return any(
            w.priority == INTERACTIVE
            and w.model != item.model
            and w.queued_work
            and w.model in self.models
            and can_host(group, self.models[w.model])
            for w in self.waiting.values()
        )

    def interactive(self, model: str) -> bool:
        """Whether interactive users wait for ``model`` (queued jobs) or submit it lately."""
        return self.queued(model, INTERACTIVE) > 0 or self.state.interactive_rates.get(model, 0.0) > 0

    def queued(self, model: str, max_priority: int) -> int:
        """Queued jobs of ``model`` at ``max_priority`` or more urgent (what-if entries aside)."""
        return sum(
            w.jobs
            for w in self.waiting.values()
            if w.model == model and w.queued_work and w.priority <= max_priority
        )

    # keeping room for a trickle ----------------------------------------------------------------
    def kept(self) -> frozenset[str]:
        """Models whose trickle of interactive jobs keeps a group with room for them: the swaps
        their jobs would make in an hour, spread over the groups that may host them, would take the
        busiest of those groups to the swap cap (rule 7, where a job waits for another group), or
        the jobs come sooner (one over the rate) than ``hysteresis`` times what making room for one
        costs."""
        found = set()
        for model, rate in self.state.interactive_rates.items():
            cost = self.models.get(model)
            if cost is None or rate <= 0:
                continue
            hosts = [g for g in self.groups.values() if can_host(g, cost)]
            if len(hosts) < 2:  # a lone group is never held back from other work
                continue
            swaps = [self._room_cost(g, cost) for g in hosts if not self.has_room(g, cost)]
            if not swaps:
                continue
            # Each job of it that finds no room swaps one group, and a resident model is swapped
            # out again by the work it displaced.
            per_job = 1 if cost.per_run else 2
            busiest = max(self.swapped(g) for g in hosts)
            often = rate * per_job * 3600.0 / len(hosts) + busiest >= self.params.swap_cap
            if often or 1.0 / rate <= self.params.hysteresis * min(swaps):
                found.add(model)
        return frozenset(found)

    def _room_cost(self, group: CardGroupState, cost: ModelCost) -> float:
        """What making room for ``cost`` on ``group`` costs: its load, and the reload of what goes."""
        evict = evictions_for(group, cost, self.models) or ()
        own = 0.0 if cost.per_run else cost.load_s
        return own + sum(self.models[m].load_s for m in evict if m in self.models)

    def has_room(self, group: CardGroupState, cost: ModelCost, resident: Iterable[str] | None = None) -> bool:
        """Whether ``group`` can start ``cost`` without evicting anything (or runs it now)."""
        if resident is not None:
            group = replace(group, resident={m: Resident(self.now, self.now) for m in resident})
        return can_host(group, cost) and (group.running == cost.id or warm_on(group, cost, self.models))

    def takes_room(self, group: CardGroupState, option: _Option, kept: frozenset[str]) -> bool:
        """Whether ``option`` (batch work) would take the last room a kept trickle has: after it,
        ``group`` could no longer start the trickle's model without a swap, and no other group can."""
        if option.waiting.priority == INTERACTIVE or not (option.load or option.evict):
            return False
        after = [m for m in group.resident if m not in option.evict]
        if option.load:
            after.append(option.waiting.model)
        for model in kept:
            cost = self.models[model]
            if not self.has_room(group, cost) or self.has_room(group, cost, after):
                continue
            if not any(self.has_room(g, cost) for g in self.groups.values() if g.id != group.id):
                return True
        return False

    def best(self, group: CardGroupState) -> _Option | None:
        kept = self.kept()
        options = [o for o in self.options(group, kept) if not self.takes_room(group, o, kept)]
        if not options:
            return None
        top = min(o.waiting.priority for o in options)
        options = [o for o in options if o.waiting.priority == top]
        rank = min(o.rank for o in options)
        options = [o for o in options if o.rank == rank]
        if rank == 0:  # unserved: the model waiting longest first, then its tenants in fair order
            return min(options, key=lambda o: (self.oldest(o.waiting), self.fair(o.waiting)))
        return min(options, key=lambda o: self.fair(o.waiting))

    def oldest(self, item: Waiting) -> float:
        """When the oldest queued job of ``item``'s model and priority, whatever its tenant, came."""
        return min(
            w.oldest for w in self.waiting.values() if w.model == item.model and w.priority == item.priority
        )

    def fair(self, item: Waiting) -> tuple[float, float, float, str]:
        """``fair_key`` of ``item`` as the round stands."""
        return fair_key(self.usage, item, self.state.activated)

    # applying a decision -------------------------------------------------------------------------
    def take(self, group: CardGroupState, option: _Option) -> Decision:
        item = option.waiting
        cost = self.models[item.model]
        run_s = cost.run_s(item.next_output_s)
        key = (item.model, item.priority, item.tenant)
        if item.jobs <= 1:
            del self.waiting[key]
        else:
            left = item.jobs - 1
            rest = max(0.0, item.output_s - item.next_output_s)
            self.waiting[key] = replace(
                item, jobs=left, output_s=rest, next_output_s=rest / left if left else 0.0
            )
        # Charged at dispatch: what the job should cost, for its tenant's weight.
        charge = cost.card_seconds(item.next_output_s, load=option.load)
        self.usage[item.tenant] = self.usage.get(item.tenant, 0.0) + charge / weight_of(
            self.state.weights, item.tenant
        )
        resident = {m: r for m, r in group.resident.items() if m not in option.evict}
        if not cost.per_run:
            since = resident[cost.id].since if cost.id in resident else self.now
            resident[cost.id] = Resident(since=since, last_used=self.now)
        load_s = cost.load_s if option.load else 0.0
        self.groups[group.id] = replace(
            group, resident=resident, busy_until=self.now + load_s + run_s, running=cost.id
        )
        return Decision(
            group=group.id,
            model=item.model,
            priority=item.priority,
            tenant=item.tenant,
            load=option.load,
            evict=option.evict,
            reason=option.reason,
            skip=option.skip,
        )


def plan(state: FleetState) -> list[Decision]:
    """Jobs for every free group, most urgent first (one job per group; none for a group that
    should wait). Each decision is applied to the round's copy of the state before the next, so
    two groups are never given the same job and fairness sees what was just handed out."""
    round_ = _Round(state)
    decisions: list[Decision] = []
    while True:
        best: (
            tuple[tuple[int, int, float, tuple[float, float, float, str]], CardGroupState, _Option] | None
        ) = None
        for group in round_.groups.values():
            if not group.free:
                continue
            option = round_.best(group)
            if option is None:
                continue
            key = (
                option.waiting.priority,
                option.rank,
                round_.oldest(option.waiting) if option.rank == 0 else 0.0,
                round_.fair(option.waiting),
            )
            if best is None or key < best[0]:
                best = (key, group, option)
        if best is None:
            return decisions
        decisions.append(round_.take(best[1], best[2]))


def standing_offers(state: FleetState, priorities: Iterable[int]) -> list[Decision]:
    """What ``plan`` would do with one new job of each model a free group may run, at each of
    ``priorities``, were it submitted now: the decisions that start it at once and warm (no load,
    nothing evicted), one per model and priority (``jobservice.fleet.offers`` records them, and a
    submission takes one instead of waiting for a round). None while jobs wait: a new job then
    competes with them, and a round decides."""
    if any(w.jobs > 0 for w in state.waiting):
        return []
    models = sorted({m for g in state.groups if g.free for m in g.eligible if m in state.models})
    found: list[Decision] = []
    for model in models:
        for priority in sorted(set(priorities)):
            job = Waiting(model, priority, "", jobs=1, output_s=0.0, oldest=state.now, next_output_s=0.0)
            found.extend(d for d in plan(replace(state, waiting=(job,))) if not d.load and not d.evict)
    return found

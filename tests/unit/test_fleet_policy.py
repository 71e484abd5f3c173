"""The residency and fair-share policy on its own: pure decisions from hand-made states."""

from __future__ import annotations

from dataclasses import replace

from jobservice.fleet.policy import (
    INTERACTIVE,
    CardGroupState,
    FleetState,
    ModelCost,
    PolicyParams,
    Resident,
    Waiting,
    decayed,
    evictions_for,
    fits,
    plan,
)
from jobservice.fleet.simulate import WhatIf
from scripts.bench_lib.static import plan_static

BATCH = 6
BIG = ModelCost("big", cards=4, memory_gb=224, load_s=88, speed=1.0)  # 56 GB on each card
HEAD = ModelCost("head", cards=2, memory_gb=48, per_run=True, overhead_s=70, speed=1.3)
T2V = ModelCost("t2v", cards=2, memory_gb=48, load_s=210, speed=35.6)
MODELS = {m.id: m for m in (BIG, HEAD, T2V)}
ALL = frozenset(MODELS)


def group(
    gid: str, *held: str, busy_until: float | None = None, running: str | None = None
) -> CardGroupState:
    return CardGroupState(
        id=gid,
        cards=4,
        eligible=ALL,
        memory_gb_per_card=64,
        resident={m: Resident(since=0.0, last_used=0.0) for m in held},
        busy_until=busy_until,
        running=running,
    )


def wait(
    model: str, tenant: str = "a", *, jobs: int = 1, priority: int = BATCH, oldest: float = 0.0
) -> Waiting:
    return Waiting(model, priority, tenant, jobs, 10.0 * jobs, oldest, 10.0)


def state(groups: list[CardGroupState], waiting: list[Waiting], **kw: object) -> FleetState:
    return FleetState(now=100.0, groups=tuple(groups), models=MODELS, waiting=tuple(waiting), **kw)  # type: ignore[arg-type]


def test_memory_is_per_card_and_every_model_starts_on_the_first_cards() -> None:
    g = group("g")
    assert fits(g, MODELS, ["head", "t2v"])  # 24 + 24 GB on cards 0 and 1
    assert not fits(g, MODELS, ["big", "head"])  # 56 + 24 GB on cards 0 and 1
    assert fits(CardGroupState("free", 4, ALL), MODELS, ["big", "head", "t2v"])  # no memory declared
    assert evictions_for(group("g", "big"), T2V, MODELS) == ("big",)
    assert evictions_for(group("g", "t2v"), HEAD, MODELS) == ()
    small = CardGroupState("small", 1, ALL, memory_gb_per_card=64)
    assert evictions_for(small, BIG, MODELS) is None  # four cards' model on one card


def test_evictions_keep_what_has_queued_work_then_the_recently_used() -> None:
    models = {
        **MODELS,
        "x": ModelCost("x", cards=1, memory_gb=30),
        "y": ModelCost("y", cards=1, memory_gb=30),
    }
    g = CardGroupState(
        "g",
        1,
        frozenset(models),
        memory_gb_per_card=64,
        resident={"x": Resident(0, 50), "y": Resident(0, 10)},
    )
    z = ModelCost("z", cards=1, memory_gb=30)
    models["z"] = z
    g = CardGroupState(**{**g.__dict__, "eligible": frozenset(models)})
    assert evictions_for(g, z, models) == ("y",)  # least recently used
    assert evictions_for(g, z, models, demand={"y": 3}) == ("x",)  # y has queued work


def test_interactive_before_batch_and_warm_before_a_load() -> None:
    decisions = plan(
        state(
            [group("g", "t2v")],
            [wait("t2v", priority=BATCH, oldest=1), wait("big", priority=INTERACTIVE, oldest=50)],
        )
    )
    assert [(d.model, d.load, d.evict) for d in decisions] == [("big", True, ("t2v",))]
    other = group("h", "t2v", busy_until=400.0, running="t2v")  # t2v is served, just busy
    decisions = plan(state([group("g", "big"), other], [wait("big", oldest=90), wait("t2v", oldest=1)]))
    assert [(d.group, d.model, d.load) for d in decisions] == [("g", "big", False)]


def test_an_unserved_model_takes_the_first_free_group() -> None:
    # g holds big, which has queued work, but another group serves big too; nobody serves t2v: it is
    # served now, by the group that frees up.
    other = group("h", "big", busy_until=500.0, running="big")
    decisions = plan(state([group("g", "big"), other], [wait("big", jobs=50), wait("t2v", oldest=95)]))
    assert [(d.group, d.model, d.reason, d.evict) for d in decisions] == [("g", "t2v", "unserved", ("big",))]


def test_a_swap_that_only_moves_who_is_unserved_waits_until_it_pays() -> None:
    # One group, room for one model, both with queued batch work: swapping to t2v would leave big's
    # 50 jobs with nobody. It waits until t2v's oldest job has waited 3 x (210 load + 88 reload).
    lone = [group("g", "big")]
    waiting = [wait("big", jobs=50), wait("t2v", oldest=5)]
    assert plan(state(lone, waiting))[0].model == "big"  # waited 95 s
    turn = 3 * 298
    early = FleetState(now=5 + turn - 1, groups=tuple(lone), models=MODELS, waiting=tuple(waiting))
    assert plan(early)[0].model == "big"
    later = FleetState(now=5 + turn + 1, groups=tuple(lone), models=MODELS, waiting=tuple(waiting))
    assert [(d.model, d.reason, d.evict) for d in plan(later)] == [("t2v", "unserved", ("big",))]
    # Nor does it swap back the moment big was loaded (its own jobs have waited long too): big
    # keeps the group for its turn first.
    fresh = CardGroupState(
        "g", 4, ALL, memory_gb_per_card=64, resident={"big": Resident(since=800.0, last_used=890.0)}
    )
    assert plan(replace(later, groups=(fresh,)))[0].model == "big"
    # Once big's queue is empty, the swap strands nothing: taken at once.
    assert plan(state(lone, [wait("t2v", oldest=95)]))[0].model == "t2v"


def test_an_interactive_job_does_not_wait_for_batch_work_it_would_strand() -> None:
    lone = [group("g", "big")]
    waiting = [wait("big", jobs=50), wait("t2v", oldest=99, priority=INTERACTIVE)]
    assert [(d.model, d.reason) for d in plan(state(lone, waiting))] == [("t2v", "unserved")]
    # ... but it does wait for interactive work of the model it would strand.
    both = [wait("big", jobs=5, priority=INTERACTIVE), wait("t2v", oldest=99, priority=INTERACTIVE)]
    assert plan(state(lone, both))[0].model == "big"


def test_a_load_waits_for_a_warm_group_that_frees_sooner() -> None:
    busy = group("h", "big", busy_until=110.0, running="big")  # frees in 10 s
    free = group("g", "t2v")
    decisions = plan(state([busy, free], [wait("big", jobs=1)]))
    assert decisions == []  # 88 s of load would start it later than h will


def test_a_swap_happens_only_when_the_backlog_pays_for_it() -> None:
    busy = group("h", "big", busy_until=130.0, running="big")
    free = group("g", "t2v")
    small = plan(state([busy, free], [wait("big", jobs=5)]))
    assert small == []  # 5 x 10 s per server against 3 x (88 + 210 reload of a recently used t2v)
    large = plan(state([busy, free], [wait("big", jobs=500)]))
    assert [(d.model, d.reason, d.evict) for d in large] == [("big", "backlog", ("t2v",))]


def test_an_evicted_model_that_keeps_receiving_jobs_shortens_the_stint() -> None:
    busy = group("h", "big", busy_until=130.0, running="big")
    old = Resident(since=0.0, last_used=-10_000.0)  # not used for hours: no reload cost
    free = CardGroupState("g", 4, ALL, memory_gb_per_card=64, resident={"t2v": old})
    work = [wait("big", jobs=80)]  # 800 s of work for one server
    assert plan(state([busy, free], work))[0].model == "big"
    trickle = plan(state([busy, free], work, rates={"t2v": 1 / 60}))  # a t2v job a minute
    assert trickle == []  # it would be pulled back within a minute: no swap


def test_fair_share_picks_the_tenant_with_least_usage_for_its_weight() -> None:
    g = group("g", "big")
    waiting = [wait("big", "heavy", jobs=100, oldest=0), wait("big", "light", jobs=1, oldest=50)]
    first = plan(state([g], waiting, usage={"heavy": 5000.0, "light": 0.0}))
    assert first[0].tenant == "light"
    weighted = plan(state([g], waiting, usage={"heavy": 5000.0 / 3, "light": 2000.0}))
    assert weighted[0].tenant == "heavy"  # usage per weight: 1,667 < 2,000


def test_two_free_groups_never_get_the_same_job_and_fairness_sees_the_first_pick() -> None:
    groups = [group("g1", "big"), group("g2", "big")]
    waiting = [wait("big", "a", jobs=1, oldest=0), wait("big", "b", jobs=5, oldest=1)]
    decisions = plan(state(groups, waiting, usage={"a": 0.0, "b": 0.0}))
    assert sorted(d.tenant for d in decisions) == ["a", "b"]
    assert len({d.group for d in decisions}) == 2


def test_what_if_entries_are_picked_but_add_no_work() -> None:
    busy = group("h", "big", busy_until=130.0, running="big")
    free = group("g", "t2v")
    probe = WhatIf("big", BATCH, "x", 1, 10_000.0, 0.0, 10_000.0)
    assert plan(state([busy, free], [probe])) == []  # a probe's size recruits nobody
    alone = plan(state([group("g", "big")], [probe]))
    assert alone[0].tenant == "x" and alone[0].model == "big"


def test_a_recent_swap_is_not_undone_before_min_residency() -> None:
    fresh = CardGroupState(
        "g", 4, ALL, memory_gb_per_card=64, resident={"big": Resident(since=90.0, last_used=95.0)}
    )
    waiting = [wait("big", jobs=3), wait("t2v")]
    params = PolicyParams(min_residency_s=60.0)
    decisions = plan(state([fresh], waiting, params=params))
    assert decisions[0].model == "big"  # t2v is unserved, but big was loaded 10 s ago


def test_static_takes_pinned_queues_in_turn_and_never_evicts() -> None:
    pinned = CardGroupState("g", 4, frozenset({"t2v", "head"}), memory_gb_per_card=64)
    turns: dict[str, int] = {}
    waiting = [wait("t2v", jobs=3), wait("head", jobs=3), wait("big", jobs=3)]
    picks = []
    for _ in range(4):
        decision = plan_static(state([pinned], waiting), turns)[0]
        picks.append(decision.model)
    assert picks == ["head", "t2v", "head", "t2v"]


def test_decay_halves_every_half_life() -> None:
    assert decayed(100.0, 3600.0, 3600.0) == 50.0
    assert decayed(100.0, 0.0, 3600.0) == 100.0
    assert decayed(100.0, -5.0, 3600.0) == 100.0  # a clock step back never grows usage


def test_an_interactive_job_takes_the_first_free_group_from_batch_work_whatever_the_swap_costs() -> None:
    # big is served by h too, and one interactive t2v job is far too little work to pay for a swap
    # by rule 4; interactive first: it evicts big's batch residency on g at once.
    busy = group("h", "big", busy_until=500.0, running="big")
    waiting = [wait("big", jobs=500), wait("t2v", oldest=99, priority=INTERACTIVE)]
    t2v_busy = group("k", "t2v", busy_until=900.0, running="t2v")  # t2v is served, but busy long
    decisions = plan(state([group("g", "big"), busy, t2v_busy], waiting))
    assert [(d.group, d.model, d.reason, d.evict) for d in decisions] == [
        ("g", "t2v", "interactive", ("big",))
    ]
    # A group holding t2v warm that frees before the load would end is waited for instead.
    soon = group("k", "t2v", busy_until=150.0, running="t2v")
    assert [d.model for d in plan(state([group("g", "big"), busy, soon], waiting))] == ["big"]
    # And it does not evict what other interactive users wait for: the cost rules decide that.
    rival = [
        wait("big", jobs=5, priority=INTERACTIVE, oldest=0),
        wait("t2v", oldest=99, priority=INTERACTIVE),
    ]
    assert [d.model for d in plan(state([group("g", "big"), busy, t2v_busy], rival))] == ["big"]


def test_a_trickle_of_interactive_jobs_keeps_a_group_with_room_for_it() -> None:
    # Two groups with nothing loaded, a batch of big, and talking heads (per run) every 5 minutes:
    # one group loads big, the last one with room for head keeps it.
    empty = [group("g1"), group("g2"), group("g3")]
    work = [wait("big", jobs=500)]
    trickle = {"head": 1 / 300}
    assert len(plan(state(empty, work))) == 3
    kept = plan(state(empty, work, interactive_rates=trickle))
    assert len(kept) == 2 and all(d.model == "big" for d in kept)
    # A trickle rarer than a swap pays for (and than the swap budget) keeps nothing.
    assert len(plan(state(empty, work, interactive_rates={"head": 1 / 7200}))) == 3
    # A lone group is never held back from other work.
    assert [d.model for d in plan(state([group("g")], work, interactive_rates=trickle))] == ["big"]
    # Once a group has room for head, the others are free to take the batch.
    busy_head = group("g3", busy_until=200.0, running="head")
    assert len(plan(state([group("g1"), group("g2"), busy_head], work, interactive_rates=trickle))) == 2


def test_a_trickle_keeps_a_group_only_where_its_swaps_would_reach_the_cap() -> None:
    # Two groups, a batch of big, talking heads three times an hour: too rare to keep a group for
    # what a swap costs (one every 20 minutes, 88 s reload). Spread over two quiet groups their swaps
    # stay far under the cap, so both groups take the batch (a head evicts big when it comes).
    work = [wait("big", jobs=500)]
    trickle = {"head": 3 / 3600}
    quiet = [group("g1"), group("g2")]
    assert [d.model for d in plan(state(quiet, work, interactive_rates=trickle))] == ["big", "big"]
    # A group that swapped three times this hour would reach the cap with one more of its swaps:
    # the last room for head is kept, so a head never waits for the cap (rule 7).
    churned = [replace(group("g1"), swaps=(10.0, 40.0, 70.0)), group("g2")]
    assert [d.model for d in plan(state(churned, work, interactive_rates=trickle))] == ["big"]
    # Swaps of the hour before do not count.
    aged = [replace(group("g1"), swaps=(10.0 - 3600, 40.0 - 3600, 70.0 - 3600)), group("g2")]
    assert len(plan(state(aged, work, interactive_rates=trickle))) == 2
    # Nine an hour over two groups reach the cap by themselves.
    assert len(plan(state(quiet, work, interactive_rates={"head": 9 / 3600}))) == 1


def test_a_group_that_swapped_three_times_this_hour_makes_no_swap_that_could_wait() -> None:
    busy = group("h", "big", busy_until=130.0, running="big")
    swapped = replace(group("g", "t2v"), swaps=(20.0, 50.0, 90.0))
    large = [wait("big", jobs=500)]
    assert plan(state([busy, swapped], large)) == []  # rule 4 would pay, but the budget is spent
    hour_later = replace(swapped, swaps=(20.0 - 3600, 50.0, 90.0))
    assert [d.reason for d in plan(state([busy, hour_later], large))] == ["backlog"]
    # Interactive first is not held back by it.
    urgent = [wait("big", jobs=1, priority=INTERACTIVE)]
    t2v_only = group("h", "t2v", busy_until=900.0, running="t2v")
    busy_big = group("k", "big", busy_until=900.0, running="big")
    decisions = plan(
        state([busy_big, t2v_only, replace(group("g", "head"), swaps=(20.0, 50.0, 90.0))], urgent)
    )
    assert [(d.group, d.reason) for d in decisions] == [("g", "interactive")]


def test_an_unserved_model_waits_for_a_group_that_frees_soon_with_nothing_to_evict() -> None:
    # g holds t2v, used a moment ago; k runs a per-run talking head and holds nothing after it.
    g = replace(group("g"), resident={"t2v": Resident(since=0.0, last_used=90.0)})
    work = [wait("big", jobs=20)]
    soon = group("k", busy_until=150.0, running="head")  # frees in 50 s < t2v's reload (210 s)
    assert plan(state([g, soon], work)) == []  # k loads big when it frees; g keeps t2v
    late = replace(soon, busy_until=400.0)  # 300 s: the swap here pays first
    assert [(d.group, d.model, d.evict) for d in plan(state([g, late], work))] == [("g", "big", ("t2v",))]
    # Nothing worth keeping here (t2v unused for an hour), or interactive work: no waiting.
    stale = replace(group("g"), resident={"t2v": Resident(since=0.0, last_used=-3600.0)})
    assert [d.group for d in plan(state([stale, soon], work))] == ["g"]
    assert [d.group for d in plan(state([g, soon], [wait("big", priority=INTERACTIVE)]))] == ["g"]


def test_no_group_makes_a_fifth_swap_in_an_hour_while_another_could_take_the_job() -> None:
    # g (free, holding big) swapped four times this hour; k holds big too and ends its job soon.
    urgent = [wait("head", jobs=1, priority=INTERACTIVE)]
    capped = replace(group("g", "big"), swaps=(-3000.0, 20.0, 50.0, 90.0))
    other = group("k", "big", busy_until=130.0, running="big")
    assert plan(state([capped, other], urgent)) == []  # k takes it when it frees
    freed = replace(other, busy_until=None, running=None)
    assert [d.group for d in plan(state([capped, freed], urgent))] == ["k"]
    # A swap of the hour before no longer counts; a warm start is never held back.
    aged = replace(capped, swaps=(-3600.0, 20.0, 50.0, 90.0))
    assert [d.group for d in plan(state([aged, other], urgent))] == ["g"]
    assert [d.reason for d in plan(state([capped, other], [wait("big", jobs=3)]))] == ["warm"]
    # Every group that could run it at its cap: the job is not held back for an hour.
    both = replace(other, swaps=capped.swaps)
    assert [d.group for d in plan(state([capped, both], urgent))] == ["g"]


def test_interactive_first_is_against_batch_work_not_other_interactive_users() -> None:
    # t2v (interactive, one short job) is served by a busy group; a free empty group could load it
    # at once, but interactive users of big have 50 jobs queued it could run: the cost rules weigh
    # the load there (big's backlog pays for its load; t2v's one job does not).
    busy = group("h", "t2v", busy_until=400.0, running="t2v")
    waiting = [
        wait("t2v", priority=INTERACTIVE, oldest=90),
        wait("big", jobs=50, priority=INTERACTIVE, oldest=95),
    ]
    assert [(d.model, d.reason) for d in plan(state([group("g"), busy], waiting))] == [("big", "unserved")]
    batch = [wait("t2v", priority=INTERACTIVE, oldest=90), wait("big", jobs=50, oldest=95)]
    assert [(d.model, d.reason) for d in plan(state([group("g"), busy], batch))] == [("t2v", "interactive")]


def test_a_group_that_loads_beside_a_warm_one_takes_the_job_the_warm_one_would_start_last() -> None:
    # h holds big warm and frees in 10 s; g is free and empty; three interactive jobs of one tenant
    # (60 s each) wait. g loads big (88 s) for one of them: h starts the oldest at 110 and the next
    # at 170, both before g's load ends at 188, so g takes the third; the oldest is not the one kept
    # waiting for the load.
    busy = group("h", "big", busy_until=110.0, running="big")
    free = group("g")
    three = Waiting("big", INTERACTIVE, "a", 3, 180.0, 0.0, 60.0)
    [decision] = plan(state([busy, free], [three]))
    assert (decision.group, decision.load, decision.skip) == ("g", True, 2)
    # Another tenant's job of the model waits too: who h takes next is fair share's, so g takes its
    # tenant's oldest.
    other = Waiting("big", INTERACTIVE, "b", 1, 60.0, 5.0, 60.0)
    assert [d.skip for d in plan(state([busy, free], [three, other]))] == [0]
    # One job: nothing to leave.
    one = Waiting("big", INTERACTIVE, "a", 2, 120.0, 0.0, 60.0)
    assert plan(state([busy, free], [one])) == []  # 10 + 60 s ahead: h starts both by 170 < 188

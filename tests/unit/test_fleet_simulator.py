"""The fleet simulator, its traces and the ETA forecast: the production policy in virtual time."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from jobservice.fleet.forecast import DAY, EXPECTED, forecast, recurring
from jobservice.fleet.simulate import Engine, SimJob
from scripts.bench_lib.replay import (
    Etas,
    TraceError,
    eta_figures,
    figures,
    nights,
    parse_trace,
    read_trace,
    replay,
)

TRACES = Path(__file__).resolve().parents[2] / "scripts" / "traces"
HEADER = {
    "fleet": [
        {"group": "g1", "cards": 1, "memory_gb_per_card": 10, "models": ["a", "b"], "pinned": ["a"]},
        {"group": "g2", "cards": 1, "memory_gb_per_card": 10, "models": ["a", "b"], "pinned": ["b"]},
    ],
    "models": {
        "a": {"cards": 1, "memory_gb": 8, "load_s": 20, "seconds_per_output_second": 1.0},
        "b": {"cards": 1, "memory_gb": 8, "load_s": 20, "seconds_per_output_second": 1.0},
    },
}


def lines(*jobs: dict[str, object], header: dict[str, object] | None = None) -> list[str]:
    return [json.dumps(header or HEADER), *(json.dumps(j) for j in jobs)]


def test_trace_errors_name_the_line() -> None:
    with pytest.raises(TraceError, match=r"t\.jsonl:2: unknown model 'zzz'"):
        parse_trace(lines({"t": 0, "model": "zzz", "output_seconds": 1}), source="t.jsonl")
    with pytest.raises(TraceError, match=r":3: 'priority' must be interactive or batch"):
        parse_trace(
            lines({"t": 0, "model": "a", "output_seconds": 1}, {"t": 1, "model": "a", "priority": "urgent"})
        )
    with pytest.raises(TraceError, match=r":2: 't' must be a number >= 0"):
        parse_trace(lines({"t": -1, "model": "a", "output_seconds": 1}))


def test_every_shipped_trace_replays_with_a_ledger_that_sums_to_wall_time() -> None:
    for path in sorted(TRACES.glob("*.jsonl")):
        result = replay(read_trace(path))
        out = figures(result)
        assert out["ledger_matches_wall"], path.name
        assert all(j.finished is not None for j in result.jobs), path.name
        assert out["unserved_over_bound"] == {}, path.name
        # Spans of one group never overlap and leave no gap.
        for group in result.engine.groups:
            spans = sorted((s for s in result.spans if s.group == group), key=lambda s: s.start)
            assert all(a.end == pytest.approx(b.start) for a, b in zip(spans, spans[1:], strict=False)), group


def test_the_night_batch_uses_both_groups_where_static_pinning_uses_one() -> None:
    trace = read_trace(TRACES / "910b-night.jsonl")
    demand, static = figures(replay(trace)), figures(replay(trace, policy="static"))
    assert demand["useful_fraction"] >= 0.9 > 0.6 > static["useful_fraction"]
    assert demand["loads"] == 2 and demand["swaps"] == 0


def test_weights_share_the_cards_three_to_one_and_a_newcomer_is_not_starved() -> None:
    out = figures(replay(read_trace(TRACES / "tenants-2-weighted.jsonl")))
    share = out["tenant_card_seconds_contended"]
    assert share["alpha"] / share["beta"] == pytest.approx(3.0, rel=0.1)
    starved = figures(replay(read_trace(TRACES / "starvation.jsonl")))
    static = figures(replay(read_trace(TRACES / "starvation.jsonl"), policy="static"))
    one_job = 937 / 25
    assert starved["starved_max_wait_s"] <= one_job < static["starved_max_wait_s"]


def test_the_forecast_is_the_engine_played_forward() -> None:
    trace = parse_trace(
        lines(
            *[
                {"t": 0, "model": "a", "tenant": "x", "priority": "batch", "output_seconds": 30}
                for _ in range(6)
            ],
            *[
                {"t": 0, "model": "b", "tenant": "y", "priority": "batch", "output_seconds": 50}
                for _ in range(3)
            ],
        )
    )
    engine = Engine(groups=trace.groups, models=trace.models)
    for job in trace.jobs:
        engine.submit(SimJob(**job.__dict__))
    predicted = forecast(engine, tenants=["x", "y", "z"], priorities=[6])
    engine.run_until_idle()
    for job in engine.done:
        assert predicted.jobs[job.id] == (job.started, job.finished)
    # A job of z submitted at the forecast's time would start when a group first frees for it.
    probe = predicted.next_start[("a", 6, "z")]
    assert probe == min(j.finished or 0.0 for j in engine.done if j.model == "a")


def test_a_probe_keeps_its_tenants_order_among_expected_arrivals() -> None:
    """x queued two jobs and is expected to submit five more in 10 s: a job x submits now starts
    after the two it queued and before the five it has not submitted yet (it once hid behind them)."""
    one = {**HEADER, "fleet": HEADER["fleet"][:1]}  # type: ignore[index]
    trace = parse_trace(lines(header=one))
    engine = Engine(groups=trace.groups, models=trace.models)
    for i in range(2):
        engine.submit(SimJob(f"x{i}", "a", "x", 6, 30.0, 0.0))
    later = [SimJob(f"{EXPECTED}x{i}", "a", "x", 6, 30.0, 10.0) for i in range(5)]
    predicted = forecast(engine, expected=later, tenants=["x"], priorities=[6])
    assert predicted.jobs["x0"] == (20.0, 50.0) and predicted.jobs["x1"] == (50.0, 80.0)  # a load, then two
    assert predicted.next_start[("a", 6, "x")] == 80.0


def test_etas_at_submission_are_exact_when_nothing_arrives_later() -> None:
    trace = parse_trace(
        lines(
            *[
                {"t": 0, "model": "a", "tenant": "x", "priority": "batch", "output_seconds": 30}
                for _ in range(8)
            ]
        )
    )
    result = replay(trace, etas=Etas())
    assert all(j.eta_start == pytest.approx(j.started) for j in result.jobs)
    assert figures(result)["eta_start_error_p90_pct"] == 0.0


def test_the_forecast_expects_the_arrivals_of_now_to_go_on() -> None:
    """A model whose interactive jobs keep coming takes a group back when its next job arrives, and
    the group stays with it (its next job would bring it back again). The forecast expects that
    next job (one, at 1 / its rate from now) and holds the arrival rates of now instead of letting
    them age out of the window as its virtual clock runs on; without either, it predicts both
    groups on the backlog and the backlog's last start ~18 % early."""
    trace = parse_trace(lines())
    engine = Engine(groups=trace.groups, models=trace.models)
    a_jobs = [SimJob(f"a{i}", "a", "x", 0, 5.0, i * 100.0) for i in range(40)]
    for job in a_jobs[:18]:  # one every 100 s for the last half hour
        engine.advance(job.submitted)
        engine.submit(job)
        engine.dispatch()
    engine.advance(1800.0)
    b_jobs = [SimJob(f"b{i}", "b", "y", 0, 10.0, 1800.0) for i in range(100)]
    for job in b_jobs:
        engine.submit(job)
    engine.dispatch()
    predicted = forecast(engine, tenants=["x", "y"], priorities=[0])
    for job in a_jobs[18:]:  # a's jobs go on arriving
        engine.advance(job.submitted)
        engine.submit(job)
        engine.dispatch()
    engine.run_until_idle()
    held = {j.group for j in engine.done if j.model == "a" and j.submitted >= 1800}
    assert len(held) == 1, "one group stays with a while its jobs keep coming"
    last = max(b_jobs, key=lambda j: j.started or 0.0)
    assert last.started is not None and last.started >= 1800 + 99 * 10
    # a's next job came at once (1800 s), the forecast expected it 100 s later: 70 s off a 1,000 s wait
    assert predicted.jobs[last.id][0] - 1800 == pytest.approx(last.started - 1800, rel=0.1)
    assert not any(job_id.startswith("expected:") for job_id in predicted.jobs)


def test_what_arrived_a_day_ago_is_expected_again_and_an_early_batch_is_not_expected_twice() -> None:
    now = DAY + 1000.0
    history = [
        *[SimJob(f"x{i}", "a", "x", 6, 10.0, 2000.0) for i in range(3)],  # due in 1,000 s
        SimJob("late", "a", "x", 6, 10.0, DAY / 2 + 1001.0),  # past the 12 hours ahead
        SimJob("chat", "a", "x", 0, 10.0, 2000.0),  # interactive: the rates of now stand for it
        *[SimJob(f"y{i}", "b", "y", 6, 10.0, 3000.0) for i in range(4)],  # y's batch, due in 2,000 s
        *[SimJob(f"y-today{i}", "b", "y", 6, 10.0, now - 10.0) for i in range(4)],  # ... came early
        SimJob("z", "a", "z", 6, 10.0, 600.0),  # z's job was due 400 s ago ...
        SimJob("z-today", "a", "z", 6, 10.0, DAY + 650.0),  # ... and came
    ]
    expected = recurring(history, now, lowest=6)
    assert sorted(j.id for j in expected) == [f"{EXPECTED}x{i}" for i in range(3)]
    assert all(
        j.submitted == 2000.0 + DAY and (j.model, j.tenant, j.priority) == ("a", "x", 6) for j in expected
    )
    half = recurring(history[:-4], now, lowest=6)  # two of y's four came early: two still expected
    assert sorted(j.id for j in half if j.tenant == "y") == [f"{EXPECTED}y2", f"{EXPECTED}y3"]
    assert recurring(history, 1000.0, lowest=6) == []  # a service younger than a day expects nothing


def test_a_batch_that_has_not_come_at_yesterdays_time_is_expected_late() -> None:
    """Yesterday w queued 3 jobs at 500 s and 2 more at 560 s; today, at 1,000 s, none has come:
    all five are late, expected from now on with yesterday's spacing. Had one come, the rest are
    not waited for (a smaller batch); an hour later nothing is expected."""
    now = DAY + 1000.0
    history = [
        *[SimJob(f"w{i}", "a", "w", 6, 10.0, 500.0) for i in range(3)],
        *[SimJob(f"w{i}", "a", "w", 6, 10.0, 560.0) for i in range(3, 5)],
    ]
    expected = sorted(recurring(history, now, lowest=6), key=lambda j: (j.submitted, j.id))
    assert [j.id for j in expected] == [f"{EXPECTED}w{i}" for i in range(5)]
    assert [j.submitted - now for j in expected] == [1.0, 1.0, 1.0, 61.0, 61.0]
    came = [*history, SimJob("w-today", "a", "w", 6, 10.0, DAY + 990.0)]
    assert recurring(came, now, lowest=6) == []
    assert recurring(history, now + 3600.0, lowest=6) == []


def test_yesterdays_bunches_of_interactive_jobs_are_expected_again_and_single_requests_are_not() -> None:
    """Model a runs 10 s of output in 10 s: jobs of one tenant submitted within 10 s of each other
    are a bunch, expected again the next day; a single request an hour from others is not."""
    models = parse_trace(lines({"t": 0, "model": "a", "output_seconds": 1})).models
    now = DAY + 1000.0
    history = [
        *[SimJob(f"p{i}", "a", "x", 0, 10.0, 2000.0 + 5 * i) for i in range(4)],  # a bunch of previews
        SimJob("one", "a", "x", 0, 10.0, 5000.0),  # a single request
        SimJob("two", "a", "x", 0, 10.0, 5011.0),  # 11 s later: past one run time, single too
        *[SimJob(f"q{i}", "b", "y", 0, 10.0, 3000.0 + 8 * i) for i in range(3)],  # y's bunch ...
        *[SimJob(f"q-today{i}", "b", "y", 0, 10.0, now - 30.0 + 2 * i) for i in range(2)],  # 2 came early
    ]
    expected = recurring(history, now, lowest=6, costs=models)
    assert sorted(j.id for j in expected) == sorted([*(f"{EXPECTED}p{i}" for i in range(4)), f"{EXPECTED}q2"])
    assert all(j.priority == 0 and j.submitted > now for j in expected)
    assert recurring(history, now, lowest=6) == []  # without costs: no bunches, the rates stand for it


def test_a_tenant_that_comes_every_night_is_expected_the_second_night() -> None:
    """Alpha queues 30 jobs at 0 s, beta 10 at 60 s (equal weights, one group). The first night
    alpha's ETAs assume it keeps the card, and beta's arrival moves them; the second night (beta 5
    minutes later, a job or two fewer) the forecast expects beta and alpha's ETAs hold."""
    one = {**HEADER, "fleet": HEADER["fleet"][:1]}  # type: ignore[index]
    trace = parse_trace(
        lines(
            *[{"t": 0, "model": "a", "tenant": "alpha", "priority": "batch", "output_seconds": 30}] * 30,
            *[{"t": 60, "model": "a", "tenant": "beta", "priority": "batch", "output_seconds": 30}] * 10,
            header=one,
        )
    )
    result = replay(nights(trace, 2, jitter_s=300.0, thin=0.1, seed=4), etas=Etas())
    first = eta_figures([j for j in result.jobs if "@" not in j.id])
    second = eta_figures([j for j in result.jobs if j.id.endswith("@2")])
    assert first["eta_start_error_median_pct"] > 20.0
    assert second["eta_start_error_median_pct"] < first["eta_start_error_median_pct"] / 2
    assert len(result.jobs) < 80  # the second night is not a copy of the first


def test_nights_refuses_a_trace_that_cannot_repeat_daily() -> None:
    trace = parse_trace(
        lines({"t": 0, "model": "a", "output_seconds": 5}, {"t": DAY, "model": "a", "output_seconds": 5})
    )
    with pytest.raises(TraceError, match="a day or more"):
        nights(trace, 2)
    with pytest.raises(TraceError, match="at least 1"):
        nights(trace, 0)


def test_interactive_jobs_do_not_wait_for_the_night_batch() -> None:
    # 16 cards saturated by a FlashTalk batch while FlashHead requests trickle in: every interactive
    # job with no other interactive job queued before it starts by the time the soonest-ending job
    # on a group that may run it ends; no group swaps more than 4 times an hour; the batch still
    # ends far sooner than on the pinned fleet.
    trace = read_trace(TRACES / "trickle-16card.jsonl")
    demand, static = figures(replay(trace)), figures(replay(trace, policy="static"))
    assert demand["interactive_due_jobs"] > 30
    assert demand["interactive_late_jobs"] == 0
    assert demand["swaps_per_group_hour_max"] <= 4
    assert demand["makespan_s"] <= 0.75 * static["makespan_s"]
    assert demand["useful_fraction"] >= static["useful_fraction"]


def test_fair_share_banks_no_idle_credit() -> None:
    # Four teams with equal weights join a backlogged fleet one by one: every epoch of constant
    # backlog shares the cards evenly (no newcomer takes most cards until it catches up, and the
    # incumbent keeps its share), and no two teams' service drifts apart by more than 3 jobs' cost.
    out = figures(replay(read_trace(TRACES / "catch-up.jsonl")))
    assert out["jain_index"] >= 0.95 and out["jain_worst_epoch"] >= 0.90
    assert out["service_gap_jobs"] <= 3
    # Weights 3:1 hold while both are backlogged.
    weighted = figures(replay(read_trace(TRACES / "tenants-2-weighted.jsonl")))
    got = weighted["tenant_card_seconds_contended"]
    assert got["alpha"] / got["beta"] == pytest.approx(3.0, rel=0.10)
    # A lone newcomer goes before every job of its model and priority dispatched after it came.
    for name in ("starvation.jsonl", "tenants-5.jsonl"):
        late = figures(replay(read_trace(TRACES / name)))
        assert late["newcomer_jobs"] >= 1 and late["newcomer_late_jobs"] == 0, name


def test_the_lift_and_the_fair_levels_are_the_policys_pure_functions() -> None:
    from jobservice.fleet.policy import InFlight, fair_usage, lift

    # A job on the cards counts at the larger of its estimate and what it used; weights divide.
    levels = fair_usage({"a": 100.0}, [InFlight("a", 50.0, 10.0), InFlight("b", 20.0, 80.0)], {"a": 2.0})
    assert levels == {"a": 75.0, "b": 80.0}
    assert lift(0.0, others=[500.0, 300.0], floor=None, credit=60.0) == (240.0, 300.0)
    assert lift(900.0, others=[500.0], floor=None, credit=60.0) == (900.0, 500.0)  # never lowered
    assert lift(0.0, others=[], floor=400.0, credit=60.0) == (340.0, 400.0)  # nobody waits: the floor
    assert lift(0.0, others=[], floor=None, credit=60.0) == (0.0, None)  # a fleet's first tenant


@pytest.mark.parametrize("queued", [0, 1, 2, 3])
@pytest.mark.parametrize("output_s", [30.0, 60.0])
def test_a_probe_counts_its_own_work_as_a_job_submitted_then_would(queued: int, output_s: float) -> None:
    """What a job submitted now is forecast to get is what it gets when nothing else arrives, also
    where its own work decides the policy: g1 runs model a with ``queued`` more of x's jobs waiting,
    g2 holds b idle; one more job of a may make the backlog worth loading a on g2 (the probe once
    added nothing to the queued work, so it waited for g1 where the real job started on g2)."""
    trace = parse_trace(lines())  # the header: two groups, g1 holding a, g2 b
    engine = Engine(groups=trace.groups, models=trace.models)
    for i in range(queued + 1):
        engine.submit(SimJob(f"x{i}", "a", "x", 6, output_s, 0.0))
    engine.run_until_idle(limit=1)  # g1 runs x0; the rest wait
    predicted = forecast(engine, tenants=["z"], priorities=[6])
    job = SimJob("z0", "a", "z", 6, output_s, engine.now)
    engine.submit(job)
    engine.run_until_idle()
    assert predicted.next_start[("a", 6, "z")] == pytest.approx(job.started)


def test_a_waiting_job_past_its_eta_is_forecast_again_on_the_services_cadence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Between arrivals the simulator forecasts every 60 s (the service every 5 s); once a waiting
    job is past the ETA it shows by a revision's margin, the next forecast is the first on the 5 s
    grid after that, so a slip is revised before the job starts, as in the service (E3)."""
    one = {**HEADER, "fleet": HEADER["fleet"][:1]}  # type: ignore[index]
    trace = parse_trace(lines(header=one))
    engine = Engine(groups=trace.groups, models=trace.models)
    engine.submit(SimJob("long", "a", "x", 6, 500.0, 0.0))
    engine.dispatch()  # g1 runs it until 520
    waiting = SimJob("waits", "a", "x", 6, 30.0, 0.0)
    engine.submit(waiting)
    etas = Etas()
    etas.before(engine, 0.0)  # the first forecast shows it 520 s (after the long one)
    assert etas._slipping(engine) == 625.0  # noqa: SLF001 - 520 + a fifth of its wait, on the grid
    shown = etas.published.pop(waiting.id)
    assert etas._slipping(engine) == math.inf  # noqa: SLF001 - no ETA shown: no slip
    etas.published[waiting.id] = shown - 490.0  # told 30 s instead: slipped by the margin (60 s) at 90
    assert etas._slipping(engine) == 90.0  # noqa: SLF001
    etas.published[waiting.id] = 101.0  # 101 + max(60, 20 % of 101): 161.2, on the grid 165
    assert etas._slipping(engine) == 165.0  # noqa: SLF001

    made: list[float] = []

    def refresh(engine: Engine) -> None:  # the forecast's time only: the shown ETA stays as it was
        assert etas.last is not None
        made.append(engine.now)
        etas.last = dataclasses.replace(etas.last, at=engine.now)

    monkeypatch.setattr(etas, "_refresh", refresh)
    etas.before(engine, 200.0)
    assert made[:3] == [60.0, 120.0, 165.0]  # every 60 s, then at the slip, then every 5 s
    assert made[3:] == [170.0, 175.0, 180.0, 185.0, 190.0, 195.0, 200.0]


def test_jobs_of_one_tenant_start_in_the_order_they_came_when_a_second_group_loads_for_them() -> None:
    # g1 loads a for the first talking head at 0 (100 s) and runs it to 160; three more come at 101.
    # g2 loads a too (100 s: ready at 201): g1 starts the oldest of the three at 160 and the newest
    # at 220, g2 the middle one at 201, so they start in the order they came (the oldest was the
    # one g2's load kept waiting until 201, behind a job that came after it).
    slow = json.loads(json.dumps(HEADER))
    slow["models"]["a"]["load_s"] = 100
    jobs = [{"t": 0, "model": "a", "tenant": "x", "priority": "interactive", "output_seconds": 60}]
    jobs += [{"t": 101, "model": "a", "tenant": "x", "priority": "interactive", "output_seconds": 60}] * 3
    result = replay(parse_trace(lines(*jobs, header=slow)))
    later = sorted((j for j in result.jobs if j.submitted == 101), key=lambda j: j.index)
    assert [j.started for j in later] == pytest.approx([160.0, 201.0, 220.0])
    assert [j.group for j in later] == ["g1", "g2", "g1"]
    assert figures(result)["interactive_overtaken_jobs"] == 0

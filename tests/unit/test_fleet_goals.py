"""Issue 34's goals judged per trace (``scripts.bench_lib.replay.goals``), the random unseen nights
of ``scripts/traces/make_traces.py --random`` and ``scripts/bench_fleet.py`` sweeping several traces."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from scripts.bench_lib.replay import figures, goals, parse_trace, replay
from scripts.traces.make_traces import random_night, write_random_nights

ROOT = Path(__file__).resolve().parents[2]


def trace_of(
    pinned: tuple[list[str], list[str]], jobs: list[dict[str, object]], load_s: float = 20
) -> list[str]:
    header = {
        "fleet": [
            {"group": f"g{k + 1}", "cards": 1, "memory_gb_per_card": 10, "models": ["a", "b"], "pinned": p}
            for k, p in enumerate(pinned)
        ],
        "models": {
            "a": {"cards": 1, "memory_gb": 8, "load_s": load_s, "seconds_per_output_second": 1.0},
            "b": {"cards": 1, "memory_gb": 8, "load_s": 20, "seconds_per_output_second": 1.0},
        },
    }
    return [json.dumps(header), *(json.dumps(j) for j in jobs)]


def batch(n: int, *, t: float = 0.0, model: str = "a") -> list[dict[str, object]]:
    return [
        {"t": t, "model": model, "tenant": "x", "priority": "batch", "output_seconds": 60} for _ in range(n)
    ]


def judged(lines: list[str]) -> dict[str, dict[str, Any]]:
    trace = parse_trace(lines)
    return goals(trace, replay(trace), replay(trace, policy="static"))


def test_a_night_batch_on_a_fleet_static_pins_half_to_another_model_is_judged_and_met() -> None:
    # 40 jobs of a; static runs them on g1 alone while g2 (pinned to b) idles: demand uses both.
    found = judged(trace_of((["a"], ["b"]), batch(40)))
    assert found["night_batch"]["met"] is True
    assert found["night_batch"]["value"] == pytest.approx(0.5, abs=0.02)
    assert found["night_batch"]["floor"] == 0.5  # g1 of g1 and g2
    assert found["swaps"] == {"value": 0.0, "limit": 4, "met": True}
    assert found["useful"]["met"] is True and found["useful"]["value"] > found["useful"]["limit"]
    assert "interactive_p95" not in found  # no interactive job: nothing to judge


def test_the_night_batch_goal_is_not_judged_where_static_leaves_no_group_idle() -> None:
    # Both groups pinned to a: static already runs the batch everywhere; the goal does not apply.
    found = judged(trace_of((["a"], ["a", "b"]), batch(40)))
    assert found["night_batch"]["met"] is None
    # Static's spare group busy with b's own batch for the whole night: not judged either.
    found = judged(trace_of((["a"], ["b"]), batch(40) + batch(40, model="b")))
    assert found["night_batch"]["met"] is None


def test_a_missed_goal_is_reported_with_its_value_and_limit() -> None:
    # a's load (1,000 s) is more than a third of its batch's work (2,400 s), so no second group
    # loads it: the batch takes what static's takes, while static's g2 idles. Judged, and missed.
    found = judged(trace_of((["a"], ["b"]), batch(40), load_s=1000))
    assert found["night_batch"] == {
        "value": pytest.approx(1.0, abs=0.01),
        "limit": 0.75,
        "met": False,
        "floor": 0.5,
    }
    # A batch under twice the groups that may run it is not judged.
    assert judged(trace_of((["a"], ["b"]), batch(3)))["night_batch"]["met"] is None


def test_interactive_waits_are_judged_against_statics_p95_and_one_jobs_run() -> None:
    jobs = batch(40) + [
        {"t": 100.0, "model": "b", "tenant": "y", "priority": "interactive", "output_seconds": 10}
    ]
    trace = parse_trace(trace_of((["a"], ["b"]), jobs))
    demand, static = replay(trace), replay(trace, policy="static")
    found = goals(trace, demand, static)
    ours, base = figures(demand), figures(static)
    p95 = found["interactive_p95"]
    assert p95["value"] == ours["interactive_wait_p95_s"] > base["interactive_wait_p95_s"] == 20.0  # b's load
    assert p95["limit"] == pytest.approx(1.1 * 20.0 + ours["job_run_max_s"], abs=0.1)
    assert ours["job_run_max_s"] == pytest.approx(60.0)
    assert p95["met"] is True  # it waited for one job of the batch at most (and b's load)
    assert found["interactive_late"] == {"value": 0, "limit": 0, "met": True}


def test_two_nights_in_one_trace_are_judged_night_by_night() -> None:
    # The same night twice, a day apart: each night's batch against static's, not the day between.
    found = judged(trace_of((["a"], ["b"]), batch(40) + batch(40, t=86_400.0)))
    assert found["night_batch"]["value"] == pytest.approx(0.5, abs=0.02)
    assert found["night_batch"]["met"] is True


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6])
def test_a_random_night_is_a_valid_trace_drawn_the_same_way_each_time(seed: int) -> None:
    header, jobs, name = random_night(seed)
    again = random_night(seed)
    assert (header, jobs, name) == again
    trace = parse_trace([json.dumps(header), *(json.dumps(j) for j in jobs)])
    assert trace.jobs and {j.priority for j in trace.jobs} == {0, 6}
    for group in trace.groups:
        assert trace.pinned[group.id] and trace.pinned[group.id] <= group.eligible, group.id
    # Every model with jobs may run somewhere, and static pins it somewhere.
    for model in {j.model for j in trace.jobs}:
        assert any(model in trace.pinned[g.id] for g in trace.groups), model


def test_random_nights_replay_to_the_end_with_a_ledger_that_sums_to_wall_time(tmp_path: Path) -> None:
    write_random_nights(tmp_path, range(7, 10))
    paths = sorted(tmp_path.glob("random-*.jsonl"))
    assert len(paths) == 3
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_fleet.py"), "--trace", str(tmp_path), "--no-eta"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r.get("trace") for r in rows[:-1]] == [p.name for p in paths]
    for row in rows[:-1]:
        assert row["ledger_matches_wall"], row["trace"]
        assert set(row["goals"]) >= {"swaps", "useful"}
    summary = rows[-1]
    assert summary["traces"] == 3 and summary["goals_judged"]["swaps"] == 3
    missed = {name for names in summary["goals_missed"].values() for name in names}
    assert missed == {r["trace"] for r in rows[:-1] if any(v["met"] is False for v in r["goals"].values())}

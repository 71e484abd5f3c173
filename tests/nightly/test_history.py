"""Which earlier nights a case is judged against (jobservice/nightly/history.py), on hand-made results."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobservice.nightly.figures import METRICS
from jobservice.nightly.history import EarlierRun, MetricHistory, case_histories, metric_history, pool_drifts
from jobservice.nightly.verdicts import Drift

GENERATE = METRICS["generate_ms"]
START = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)
CASE = {"name": "x", "digest": "d", "figures": "warm"}


def night(
    index: int,
    value: float = 1000.0,
    *,
    case_verdict: str | None = "inconclusive",
    metric_verdict: str | None = "inconclusive",
    status: str = "passed",
    digest: str = "d",
    figures: str = "warm",
    episode: dict[str, Any] | None = None,
    pinned: bool = False,
) -> EarlierRun:
    """Night ``index`` (0: the oldest) of case x, its generate times around ``value``."""
    case = {
        "name": "x",
        "digest": digest,
        "figures": figures,
        "status": status,
        "samples": {"generate_ms": [value * 0.99, value, value * 1.01]},
    }
    judged = {
        "case": "x",
        "verdict": case_verdict,
        "metrics": [{"metric": "generate_ms", "verdict": metric_verdict, "episode": episode}],
    }
    results = {"cases": [case], "comparison": {"cases": [judged]} if case_verdict else None}
    return EarlierRun(f"n{index}", START + timedelta(days=index), pinned, results)


def newest_first(nights: list[EarlierRun]) -> list[EarlierRun]:
    return sorted(nights, key=lambda n: n.created_at, reverse=True)


def runs_of(history: MetricHistory) -> list[str]:
    return [str(r.run) for r in history.reference]


def test_the_reference_is_the_newest_twenty_runs_that_did_not_regress_or_fail() -> None:
    nights = [night(i, 1000 + i) for i in range(30)]
    nights[29] = night(29, case_verdict="regressed", metric_verdict="regression")
    nights[28] = night(28, status="failed", case_verdict="failed")
    nights[27] = night(27, metric_verdict="regression", case_verdict="inconclusive")  # this metric regressed
    nights[26] = night(26, digest="other")  # other work
    nights[25] = night(25, figures="cold")  # other kind of figures
    nights[24] = night(24, case_verdict=None, metric_verdict=None)  # no comparison yet: counts
    nights[23] = night(23, case_verdict="ok", metric_verdict="ok")
    history = metric_history(CASE, GENERATE, newest_first(nights))
    assert runs_of(history) == [f"n{i}" for i in range(24, 4, -1)]
    assert len(history.window) == 25 and history.drift is not None
    assert history.drift.source == "history" and history.drift.df == 24
    assert history.reference[0].median == pytest.approx(math.log(1000.0))


def test_a_pin_restarts_the_history_and_counts_even_if_it_regressed() -> None:
    nights = [night(i) for i in range(12)]
    nights[5] = night(5, 1200.0, case_verdict="regressed", metric_verdict="regression", pinned=True)
    history = metric_history(CASE, GENERATE, newest_first(nights))
    assert runs_of(history) == ["n11", "n10", "n9", "n8", "n7", "n6", "n5"]
    assert history.drift is not None and history.drift.source == "reference" and history.drift.df == 6


def test_fewer_than_five_runs_is_a_cold_start_without_drift_or_episode() -> None:
    episode = {"state": "open", "nights": [{"run": "n3", "median": 7.0, "n": 3, "var": 1e-4}]}
    nights = [night(i) for i in range(3)] + [night(3, episode=episode)]
    history = metric_history(CASE, GENERATE, newest_first(nights))
    assert len(history.reference) == 4 and history.drift is None and history.episode is None


def test_an_open_episode_is_continued_and_its_nights_kept_out_of_the_reference() -> None:
    nights = [night(i) for i in range(10)]
    first = {"run": "n8", "median": math.log(1050.0), "n": 3, "var": 1e-4}
    second = {"run": "n9", "median": math.log(1040.0), "n": 3, "var": 1e-4}
    nights[8] = night(8, 1050.0, episode={"state": "open", "night": 1, "nights": [first]})
    nights[9] = night(9, 1040.0, episode={"state": "open", "night": 2, "nights": [first, second]})
    history = metric_history(CASE, GENERATE, newest_first(nights))
    assert history.episode is not None and history.episode["night"] == 2
    assert runs_of(history) == [f"n{i}" for i in range(7, -1, -1)], "the reference from before the episode"
    # An episode that closed is not continued, and its nights count again (it did not regress).
    nights[9] = night(9, 1040.0, episode={"state": "closed", "outcome": "ok", "nights": [first, second]})
    history = metric_history(CASE, GENERATE, newest_first(nights))
    assert history.episode is None and runs_of(history)[:2] == ["n9", "n8"]


def test_the_nights_of_an_episode_that_ended_in_a_regression_stay_out() -> None:
    nights = [night(i) for i in range(10)]
    first = {"run": "n7", "median": math.log(1050.0), "n": 3, "var": 1e-4}
    second = {"run": "n8", "median": math.log(1060.0), "n": 3, "var": 1e-4}
    nights[7] = night(7, 1050.0, episode={"state": "open", "nights": [first]})
    closed = {"state": "closed", "outcome": "regression", "nights": [first, second]}
    nights[8] = night(8, 1060.0, case_verdict="regressed", metric_verdict="regression", episode=closed)
    history = metric_history(CASE, GENERATE, newest_first(nights))
    assert "n7" not in runs_of(history) and "n8" not in runs_of(history) and runs_of(history)[0] == "n9"


def test_accepting_a_night_of_an_open_episode_ends_the_episode() -> None:
    nights = [night(i) for i in range(10)]
    first = {"run": "n8", "median": math.log(1050.0), "n": 3, "var": 1e-4}
    second = {"run": "n9", "median": math.log(1045.0), "n": 3, "var": 1e-4}
    nights[8] = night(8, 1050.0, episode={"state": "open", "nights": [first]}, pinned=True)
    nights[9] = night(9, 1045.0, episode={"state": "open", "nights": [first, second]})
    history = metric_history(CASE, GENERATE, newest_first(nights))
    assert history.episode is None
    assert runs_of(history) == ["n9", "n8"], "the accepted state: the pin and what came after"


def test_stored_histories_read_back() -> None:
    nights = [night(i, 1000 + 3 * i) for i in range(8)]
    history = metric_history(CASE, GENERATE, newest_first(nights))
    again = MetricHistory.from_dict(history.as_dict())
    assert again.reference == history.reference and again.drift == history.drift


def test_drifts_are_pooled_over_cases_only_when_they_agree() -> None:
    def with_drift(omega2: float, df: float = 19) -> MetricHistory:
        return MetricHistory(drift=Drift(omega2, df, "reference", int(df) + 1))

    alike = {"a": with_drift(4e-4), "b": with_drift(5e-4), "c": with_drift(3.5e-4)}
    pool_drifts(alike)
    for history in alike.values():
        assert history.drift is not None and history.drift.source == "pooled" and history.drift.df == 57
        assert history.drift.omega2 == pytest.approx((4e-4 + 5e-4 + 3.5e-4) / 3)
    apart = {"a": with_drift(4e-4), "b": with_drift(4e-3)}
    pool_drifts(apart)
    assert all(h.drift is not None and h.drift.source == "reference" for h in apart.values())
    few = {"a": with_drift(4e-4, df=9), "b": with_drift(4e-4, df=9)}
    pool_drifts(few)
    assert all(h.drift is not None and h.drift.source == "reference" for h in few.values()), "18 df: too few"
    long = {"a": with_drift(4e-4, df=40), "b": with_drift(4e-4)}
    pool_drifts(long)
    assert long["a"].drift is not None and long["a"].drift.df == 40, "its own window is enough"
    assert long["b"].drift is not None and long["b"].drift.source == "pooled"


def test_case_histories_cover_every_case_and_metric() -> None:
    nights = newest_first([night(i) for i in range(6)])
    found = case_histories([CASE, {**CASE, "name": "y"}], ["generate_ms", "rtf"], nights)
    assert len(found["x"]["generate_ms"].reference) == 6 and found["x"]["rtf"].reference == []
    assert found["y"]["generate_ms"].reference == []

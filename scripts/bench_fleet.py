#!/usr/bin/env python3
"""The fleet simulator: replays a trace in virtual time through the production policy.

Every decision comes from ``jobservice.fleet.policy`` (the functions the dispatcher and the workers
call); ``jobservice.fleet.simulate`` only plays the cards' time (loads, generation) forward, and
``scripts.bench_lib.replay`` reads the trace and counts. A week of trace runs in seconds.

Usage: scripts/bench_fleet.py --trace scripts/traces/910b-night.jsonl [more traces or folders]
       [--policy demand|static]
       [--no-compare] [--no-eta] [--schedule-out FILE] [--half-life S] [--nights N]

With ``--nights N`` the trace is played N days in a row, later days like the first but not the same
(each tenant's arrivals moved by up to ``--jitter`` seconds, each job left out with probability
``--thin``): the forecast expects each day what arrived the day before (as the service does from its
jobs table), and the ETA figures are those of the last day, with the first day's (no history yet)
under ``"eta_first_night"``.

With ``--policy demand`` (the default) the same trace is also replayed with ``static`` (today's
pinned fleet) and its figures are printed under ``"static"``, with the ratios and issue 34's goals
judged on that trace (``"goals"``: each goal's value, limit and ``met``; ``goals`` in
scripts/bench_lib/replay.py says how each is judged), in the same run.
The last line is one JSON object; the trace format is in scripts/bench_lib/replay.py.

``--trace`` takes several traces, or folders of them (``--no-eta`` keeps a sweep fast): one JSON line
per trace, then one line of the goals missed and on which traces. Unseen traces to sweep:
``scripts/traces/make_traces.py --random DIR`` (random fleets, models, batches, trickles, tenants).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from jobservice.fleet.forecast import DAY  # noqa: E402
from scripts.bench_lib.replay import (  # noqa: E402
    Etas,
    TraceError,
    eta_figures,
    figures,
    goals,
    nights,
    read_trace,
    replay,
    schedule,
)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--trace", required=True, type=Path, nargs="+", help="trace files, or folders of *.jsonl traces"
    )
    parser.add_argument("--policy", choices=["demand", "static"], default="demand")
    parser.add_argument(
        "--compare",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also replay with static pinning (default: with --policy demand)",
    )
    parser.add_argument("--schedule-out", type=Path, help="write one JSON line per job here")
    parser.add_argument("--half-life", type=float, default=3600.0, help="fair share's half-life (s)")
    parser.add_argument(
        "--eta",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="give every arrival the ETA the service would (a forecast per 5 s of trace with arrivals; "
        "--no-eta replays the policy alone, much faster)",
    )
    parser.add_argument("--nights", type=int, default=1, help="play the trace this many days in a row")
    parser.add_argument(
        "--jitter", type=float, default=600.0, help="later nights: a tenant's arrivals move by up to this (s)"
    )
    parser.add_argument(
        "--thin", type=float, default=0.1, help="later nights: each job left out with this probability"
    )
    parser.add_argument("--seed", type=int, default=1, help="the draw of later nights' differences")
    parser.add_argument(
        "--checks",
        type=int,
        default=150,
        help="E2: about this many arrivals are each played forward alone with the forecast's expected "
        "arrivals and no other later work (0: none)",
    )
    args = parser.parse_args()
    try:
        paths = trace_paths(args.trace)
    except FileNotFoundError as exc:
        parser.error(str(exc))
    if args.schedule_out and len(paths) > 1:
        parser.error("--schedule-out takes one --trace")
    missed: dict[str, list[str]] = {}
    judged: dict[str, int] = {}
    for path in paths:
        try:
            out = run(args, path)
        except TraceError as exc:
            parser.error(str(exc))
        for goal, verdict in out.get("goals", {}).items():
            if verdict["met"] is not None:
                judged[goal] = judged.get(goal, 0) + 1
            if verdict["met"] is False:
                missed.setdefault(goal, []).append(path.name)
        print(json.dumps(out), flush=True)
    if len(paths) > 1:
        print(json.dumps({"traces": len(paths), "goals_judged": judged, "goals_missed": missed}))
    return 0


def trace_paths(given: list[Path]) -> list[Path]:
    """The traces named, a folder standing for the ``*.jsonl`` in it."""
    found: list[Path] = []
    for path in given:
        if path.is_dir():
            found.extend(sorted(path.glob("*.jsonl")))
        elif path.exists():
            found.append(path)
        else:
            raise FileNotFoundError(f"no trace at {path}")
    if not found:
        raise FileNotFoundError(f"no *.jsonl trace in {' '.join(map(str, given))}")
    return found


def run(args: argparse.Namespace, path: Path) -> dict[str, Any]:
    """One trace replayed as ``args`` say: its figures (with static's, the ratios and the goals)."""
    trace = nights(read_trace(path), args.nights, jitter_s=args.jitter, thin=args.thin, seed=args.seed)
    started = time.perf_counter()
    every = max(1, len(trace.jobs) // args.checks) if args.checks > 0 else 0
    etas = Etas(check_every=every) if args.policy == "demand" and args.eta else None
    result = replay(trace, policy=args.policy, half_life_s=args.half_life, etas=etas)
    out = figures(result)
    out["trace"] = path.name
    out["nights"] = args.nights
    if args.nights > 1:
        out["later_nights"] = {"jitter_s": args.jitter, "thin": args.thin, "seed": args.seed}
    if args.nights > 1 and etas is not None:
        out.update(eta_figures([j for j in result.jobs if j.id.endswith(f"@{args.nights}")], result))
        out["eta_first_night"] = eta_figures([j for j in result.jobs if "@" not in j.id], result)
    if etas is not None and trace.jobs and trace.jobs[-1].submitted - trace.jobs[0].submitted >= DAY:
        # A trace of two nights in one file: the second night scored on the incumbents' jobs (the
        # tenants of the first), and the first apart.
        start = trace.jobs[0].submitted
        known = {j.tenant for j in result.jobs if j.submitted < start + DAY}
        later = [j for j in result.jobs if j.submitted >= start + DAY]
        out["eta_night_2_incumbents"] = eta_figures([j for j in later if j.tenant in known], result)
        out["eta_night_1"] = eta_figures([j for j in result.jobs if j.submitted < start + DAY], result)
    if args.compare if args.compare is not None else args.policy == "demand":
        pinned = replay(trace, policy="static", half_life_s=args.half_life)
        base = figures(pinned)
        out["static"] = base
        if base["useful_fraction"]:
            out["useful_vs_static"] = round(out["useful_fraction"] / base["useful_fraction"], 3)
        if base["interactive_wait_p95_s"]:
            out["interactive_wait_p95_vs_static"] = round(
                out["interactive_wait_p95_s"] / base["interactive_wait_p95_s"], 3
            )
        if args.policy == "demand":
            out["goals"] = goals(trace, result, pinned)
    out["wall_s"] = round(time.perf_counter() - started, 2)
    if args.schedule_out:
        with args.schedule_out.open("w", encoding="utf-8") as sink:
            for line in schedule(result):
                sink.write(json.dumps(line) + "\n")
    print(f"{path.name}:", file=sys.stderr)
    for key in (
        "useful_fraction",
        "loads",
        "swaps",
        "interactive_wait_p95_s",
        "batch_wait_p95_s",
        "makespan_s",
    ):
        extra = f"   (static {out['static'][key]})" if "static" in out else ""
        print(f"{key:>26}: {out[key]}{extra}", file=sys.stderr)
    missed = [goal for goal, verdict in out.get("goals", {}).items() if verdict["met"] is False]
    if "goals" in out:
        print(f"{'goals missed':>26}: {', '.join(missed) or 'none'}", file=sys.stderr)
    return out


if __name__ == "__main__":
    raise SystemExit(main())

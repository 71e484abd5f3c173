#!/usr/bin/env python3
"""Nightly verdicts on this host: the noise of a per-run model's figures with and without the
service's own finishing beside them, and what the verdicts say about known slowdowns.

Three modes (the last line of each is one JSON object):

  (default)     the overlap study below: undisturbed vs overlapped measurement, round by round
  --sequence    nights against the history of nights (issue 36): ``--warm-up`` unchanged nights,
                then ``--blocks`` blocks of [unchanged, 5 % slower, 15 % slower, 15 % slower] (a
                15 % slowdown persists for two nights, so episodes show). The stand-in's slowdown
                factor is set so that the generate time, not just its compute, should move by 5 %
                and 15 % (factor = 1 + shift x generate time / compute seconds, from the warm-up
                nights); the shift each night actually shows against its reference is reported.
                Reports the host's σ (noise within a night) and τ (drift between nights) from the
                unchanged nights, the shifts, and the verdicts per round kind.
  --calibrate   no stack: the error rates of the decided procedure on synthetic nights at the
                2-core host's σ, τ and a quiet card host's (tests/nightly/calibration.py, the
                production verdict function), with 95 % intervals: the table of docs/benchmarks.md

Starts its own stack (embedded Redis, SQLite, local store, the API and one worker on a fake NPU
card) serving the FlashHead stand-in (tests/standins/fake_generate_video.py, the real flags) in
its CPU mode: each run does a fixed amount of CPU work (calibrated here: half the run, idle) and
waits as long again for its "device", then writes its video with ffmpeg, so, like a real model's
host-side work, it runs slower when something shares the cores. Then, for ``--rounds`` rounds,
for each way of measuring (``undisturbed: false``, the overlap: the worker gates and stores job
N while job N+1 generates; ``undisturbed: true``, the default: job N+1 waits), in alternating
order: a baseline batch of ``--repeats`` runs, then the same unchanged, 5 % slower and 15 % slower
(the stand-in's ``slower:<factor>`` mode), each compared with that round's baseline.

Prints a table and, as its LAST line, one JSON object:

  noise_rel_median{overlapped,undisturbed}  within-run noise of generate time: the Shamos sigma of
                                            a batch's repeats over their median, median over batches
  noise_ratio                               undisturbed / overlapped, measured in this run
  noise_rel_pooled{mode}, pooled_ratio      the pooled standard deviation of generate time within
                                            batches, relative to each batch's mean: unlike the
                                            robust figure above it counts the odd disturbed run
  generate_ms_unchanged{mode}               median generate time of the unchanged model's runs
                                            (baselines and unchanged batches): what the overlap
                                            adds to a run
  drift_rel{mode}                           how far a whole unchanged batch moves: the robust sigma
                                            of the unchanged batches' medians over their median
                                            (what the verdicts allow for once a spec has 3 good runs)
  verdicts{mode}{scenario}                  generate time's verdict counts over the rounds
                                            (printed lines show "drift" when it set the threshold)
  goals                                     unchanged never regressed; 15 % always regressed;
                                            5 % never ok (undisturbed)
  host{mode}                                medians of the runs' host figures: other_cores,
                                            finishing_ms, waited_ms; and the share of runs disturbed
  batch_wall_ratio                          undisturbed / overlapped wall time of a batch (the cost)
  exit_lateness_ms                          how late a child's exit is noticed: the pidfd wait the
                                            worker uses, and Popen.wait(0.2) in a loop (what it used
                                            until 2026-12-01), over children living 1.00..1.18 s

Usage: scripts/bench_nightly.py [--rounds 3] [--repeats 3] [--cpu-s 1.5] [--device-s 1.5]
       [--speech-s 13] [--no-lateness] [--keep]
       scripts/bench_nightly.py --sequence [--warm-up 5] [--blocks 3] [--repeats 3] [--speech-s 6]
       scripts/bench_nightly.py --calibrate [--draws 30000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from jobservice.nightly.stats import (  # noqa: E402
    mean_factor,
    pooled_variance,
    robust_sigma,
    run_stats,
    sample_variance,
)
from scripts.bench_lib.stack import BenchStack  # noqa: E402
from tests.nightly.calibration import QUIET_CARD, SHIFTS, TWO_CORE, calibrate  # noqa: E402
from tests.standins.common import cpu_units_per_second  # noqa: E402
from tests.standins.deploy import FakeCheckout, flashhead_checkout, write_deployment  # noqa: E402
from workers.adapters.processes.child import wait_for_exit  # noqa: E402

MODEL = "soulx-flashhead-1.3b"
MODES = {"overlapped": False, "undisturbed": True}
SCENARIOS = {"unchanged": "ok", "slower_5pc": "slower:1.05", "slower_15pc": "slower:1.15"}


def site(
    folder: Path, *, cpu_s: float, device_s: float, speech_s: float
) -> tuple[FakeCheckout, Path, Path, int]:
    """The stand-in checkout, its deployment file, the batch root (speech and portrait) and the CPU
    work units that take ``cpu_s`` on one idle core here."""
    checkout = flashhead_checkout(folder / "site")
    units = int(cpu_units_per_second() * cpu_s)
    entry = checkout.script_entry(timeout=300)
    for key in ("torchrun", "ascend_env_script"):  # one card: plain python, no Ascend toolkit
        entry.pop(key)
    entry["env"].update({"STANDIN_CPU_WORK": str(units), "STANDIN_DEVICE_S": f"{device_s:g}"})
    deployment = write_deployment(
        folder / "deploy.yaml", {"reference_models": True, "models": {MODEL: entry}}
    )
    root = folder / "batches"
    root.mkdir()
    shutil.copyfile(ROOT / "samples/portrait.png", root / "portrait.png")
    subprocess.run(  # the sample speech, looped to ``speech_s`` seconds
        ["ffmpeg", "-v", "error", "-y", "-stream_loop", "4", "-i", str(ROOT / "samples/speech.wav")]
        + ["-t", f"{speech_s:g}", "-ac", "1", "-ar", "16000", str(root / "speech.wav")],
        check=True,
    )
    return checkout, deployment, root, units


def stand_in_stack(folder: Path, args: argparse.Namespace) -> tuple[FakeCheckout, BenchStack, int]:
    """The stand-in's site and a (not yet started) stack serving it on one fake NPU card."""
    checkout, deployment, root, units = site(
        folder, cpu_s=args.cpu_s, device_s=args.device_s, speech_s=args.speech_s
    )
    stack = BenchStack(
        deployment=deployment,
        devices="npu:0",
        preload=False,
        keep=args.keep,
        env={"JOBSERVICE_BATCH_ROOT": str(root)},
    )
    return checkout, stack, units


def spec(
    name: str,
    *,
    repeats: int,
    undisturbed: bool,
    baseline: str | None,
    metrics: tuple[str, ...] = ("generate_ms",),
) -> dict[str, Any]:
    """One case of the stand-in, tracking generate time."""
    return {
        "name": name,
        "repeat": repeats,
        "undisturbed": undisturbed,
        "baseline": baseline or "auto",
        "metrics": list(metrics),
        "cases": [
            {
                "name": "flashhead",
                "model": MODEL,
                "inputs": {"image": "portrait.png", "audio": "speech.wav"},
            }
        ],
    }


def run_batch(stack: BenchStack, body: dict[str, Any]) -> dict[str, Any]:
    """Create a batch and wait until it finishes: its view, wall seconds and runs' host figures."""
    started = time.monotonic()
    response = requests.post(f"{stack.base}/batches", json={"spec": body}, timeout=60)
    response.raise_for_status()
    batch_id = response.json()["id"]
    while True:
        view = requests.get(f"{stack.base}/batches/{batch_id}", timeout=30).json()
        if view["status"] in ("finished", "canceled"):
            break
        time.sleep(0.5)
    wall = time.monotonic() - started
    assert view["status"] == "finished", view
    report = requests.get(f"{stack.base}/batches/{batch_id}/report", params={"format": "json"}, timeout=30)
    jobs = requests.get(f"{stack.base}/batches/{batch_id}/jobs", timeout=30).json()["jobs"]
    hosts = [stack.report(j["id"]).get("host") or {} for j in jobs]
    generate = [
        float(j["timings"]["generate_ms"]) for j in jobs if (j.get("timings") or {}).get("generate_ms")
    ]
    return {"id": batch_id, "wall_s": wall, "report": report.json(), "hosts": hosts, "generate_ms": generate}


def exit_lateness() -> dict[str, Any]:
    """How late a waiter notices a child's exit, the pidfd way and the Popen.wait(0.2) way."""
    stamp = Path(tempfile.mkdtemp(prefix="jobservice-lateness-")) / "exit"
    out: dict[str, Any] = {}
    for how in ("pidfd", "popen_wait_0.2"):
        late = []
        for step in range(7):
            life = 1.0 + 0.03 * step
            code = f"import time; time.sleep({life}); open({str(stamp)!r}, 'w').write(repr(time.time()))"
            child = subprocess.Popen([sys.executable, "-c", code])
            while child.poll() is None:
                if how == "pidfd":
                    wait_for_exit(child, 0.2)
                else:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        child.wait(0.2)
            late.append((time.time() - float(stamp.read_text())) * 1000)
        out[how] = {"median": round(statistics.median(late), 1), "max": round(max(late), 1)}
        out[how]["each"] = [round(x, 1) for x in late]
    shutil.rmtree(stamp.parent, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cpu-s", type=float, default=1.5, help="CPU seconds of a run (idle, one core)")
    parser.add_argument("--device-s", type=float, default=1.5, help="seconds a run waits for its device")
    parser.add_argument(
        "--speech-s",
        type=float,
        default=13.0,
        help="seconds of speech: of video to gate (at 6 s the gate overlaps a run by ~0.15 s: too little to see)",
    )
    parser.add_argument("--no-lateness", action="store_true")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--sequence", action="store_true", help="nights against the history (issue 36)")
    parser.add_argument("--warm-up", type=int, default=5, help="--sequence: unchanged nights first")
    parser.add_argument("--blocks", type=int, default=3, help="--sequence: blocks of 4 rounds")
    parser.add_argument("--calibrate", action="store_true", help="synthetic nights: the goals' rates")
    parser.add_argument("--draws", type=int, default=30_000, help="--calibrate: draws per scenario")
    args = parser.parse_args()
    if args.calibrate:
        print(json.dumps(calibration(args.draws)))
        return
    if args.sequence:
        print(json.dumps(sequence(args)))
        return

    folder = Path(tempfile.mkdtemp(prefix="jobservice-nightly-"))
    checkout, stack, units = stand_in_stack(folder, args)
    noise: dict[str, list[float]] = {m: [] for m in MODES}
    samples: dict[str, list[list[float]]] = {m: [] for m in MODES}  # every batch's generate times
    unchanged: dict[str, list[float]] = {m: [] for m in MODES}  # runs of the unchanged model
    unchanged_batches: dict[str, list[list[float]]] = {m: [] for m in MODES}  # ... batch by batch
    verdicts: dict[str, dict[str, dict[str, int]]] = {m: {s: {} for s in SCENARIOS} for m in MODES}
    walls: dict[str, list[float]] = {m: [] for m in MODES}
    hosts: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    changes: dict[str, dict[str, list[float]]] = {m: {s: [] for s in SCENARIOS} for m in MODES}
    with stack:
        for rnd in range(args.rounds):
            order = list(MODES) if rnd % 2 == 0 else list(reversed(MODES))
            for mode in order:
                name = f"nightly-{mode}"
                checkout.set_mode("ok")
                base = run_batch(
                    stack, spec(name, repeats=args.repeats, undisturbed=MODES[mode], baseline=None)
                )
                for batch in (base,):
                    noise[mode].append(_noise(batch["generate_ms"]))
                    samples[mode].append(batch["generate_ms"])
                    unchanged[mode].extend(batch["generate_ms"])
                    unchanged_batches[mode].append(batch["generate_ms"])
                    walls[mode].append(batch["wall_s"])
                    hosts[mode].extend(batch["hosts"])
                for scenario, act in SCENARIOS.items():
                    checkout.set_mode(act)
                    body = spec(name, repeats=args.repeats, undisturbed=MODES[mode], baseline=base["id"])
                    batch = run_batch(stack, body)
                    noise[mode].append(_noise(batch["generate_ms"]))
                    samples[mode].append(batch["generate_ms"])
                    if act == "ok":
                        unchanged[mode].extend(batch["generate_ms"])
                        unchanged_batches[mode].append(batch["generate_ms"])
                    walls[mode].append(batch["wall_s"])
                    hosts[mode].extend(batch["hosts"])
                    metric = _generate(batch)
                    verdict = str(metric.get("verdict"))
                    verdicts[mode][scenario][verdict] = verdicts[mode][scenario].get(verdict, 0) + 1
                    changes[mode][scenario].append(float(metric.get("change") or 0.0))
                    print(
                        f"round {rnd + 1} {mode:<11} {scenario:<12} generate {_fmt(metric)}  "
                        f"noise {noise[mode][-1]:.2%}  wall {batch['wall_s']:.1f} s",
                        flush=True,
                    )
    checkout.set_mode("ok")
    result = summarize(args, units, noise, verdicts, walls, hosts, changes)
    pooled = {m: _pooled(batches) for m, batches in samples.items()}
    result["noise_rel_pooled"] = pooled
    result["pooled_ratio"] = (
        round(pooled["undisturbed"] / pooled["overlapped"], 3) if pooled["overlapped"] else None
    )
    # How far a whole batch of the unchanged model moves (the drift the verdicts allow for once a
    # spec has 3 good runs): the robust sigma of its batches' medians, relative.
    result["drift_rel"] = {
        m: round((robust_sigma(meds) or 0.0) / statistics.median(meds), 4) if len(meds) > 2 else None
        for m, meds in (
            (m, [statistics.median(b) for b in batches if b]) for m, batches in unchanged_batches.items()
        )
    }
    result["generate_ms_unchanged"] = {
        m: round(statistics.median(v), 1) if v else None for m, v in unchanged.items()
    }
    if not args.no_lateness:
        result["exit_lateness_ms"] = exit_lateness()
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps(result))


def _generate(batch: dict[str, Any]) -> dict[str, Any]:
    """Generate time's row in a batch's report: median, change, threshold, verdict (vs its baseline)."""
    case = (batch["report"].get("cases") or [{}])[0]
    return dict((case.get("metrics") or {}).get("generate_ms") or {})


def _noise(values: list[float]) -> float:
    """Within-run noise of a batch's generate times: the Shamos sigma of its repeats over their median."""
    sigma = robust_sigma(values) if len(values) > 1 else None
    return (sigma or 0.0) / statistics.median(values) if values else 0.0


def _pooled(batches: list[list[float]]) -> float | None:
    """The pooled standard deviation of batches' generate times, each relative to its batch's mean."""
    squares, freedom = 0.0, 0
    for values in batches:
        if len(values) > 1:
            mean = statistics.fmean(values)
            squares += sum(((v - mean) / mean) ** 2 for v in values)
            freedom += len(values) - 1
    return round((squares / freedom) ** 0.5, 4) if freedom else None


def _fmt(metric: dict[str, Any]) -> str:
    change = metric.get("change")
    text = f"{change:+.1%}" if isinstance(change, float) else "n/a"
    limit = metric.get("threshold")
    drift = metric.get("drift")
    text += f" (drift {drift:.1%})" if isinstance(drift, float) else ""
    return f"{text} (threshold {limit:.1%}) {metric.get('verdict')}" if isinstance(limit, float) else text


def summarize(
    args: argparse.Namespace,
    units: int,
    noise: dict[str, list[float]],
    verdicts: dict[str, dict[str, dict[str, int]]],
    walls: dict[str, list[float]],
    hosts: dict[str, list[dict[str, Any]]],
    changes: dict[str, dict[str, list[float]]],
) -> dict[str, Any]:
    """The JSON line."""

    def med(values: list[float]) -> float | None:
        return round(statistics.median(values), 4) if values else None

    rel = {m: med(v) for m, v in noise.items()}
    quiet = verdicts["undisturbed"]
    goals = {
        "unchanged_never_regressed": not quiet["unchanged"].get("regression"),
        "slower_15pc_always_regressed": quiet["slower_15pc"].get("regression", 0) == args.rounds,
        "slower_5pc_never_ok": not quiet["slower_5pc"].get("ok"),
    }
    return {
        "rounds": args.rounds,
        "repeats": args.repeats,
        "cpu_work_units": units,
        "noise_rel_median": rel,
        "noise_ratio": round(rel["undisturbed"] / rel["overlapped"], 3)
        if rel["undisturbed"] is not None and rel["overlapped"]
        else None,
        "verdicts": verdicts,
        "change_median": {m: {s: med(v) for s, v in c.items()} for m, c in changes.items()},
        "goals": goals,
        "host": {
            m: {
                "other_cores": med([h["other_cores"] for h in hs if h.get("other_cores") is not None]),
                "finishing_ms": med([h["finishing_ms"] for h in hs if "finishing_ms" in h]),
                "waited_ms": med([h["waited_ms"] for h in hs if "waited_ms" in h]),
                "disturbed_share": round(sum(1 for h in hs if h.get("disturbed")) / len(hs), 3)
                if hs
                else None,
            }
            for m, hs in hosts.items()
        },
        "batch_wall_ratio": round(
            statistics.median(walls["undisturbed"]) / statistics.median(walls["overlapped"]), 3
        ),
    }


def calibration(draws: int) -> dict[str, Any]:
    """The rates of the decided procedure on synthetic nights, per host, drift source and shift."""
    out: dict[str, Any] = {"draws": draws}
    for host in (TWO_CORE, QUIET_CARD):
        ways = (
            (20, 1, "own 20 nights (19 df)"),
            (60, 1, "own 60 nights (59 df): adaptive"),
            (20, 3, "pooled, 3 cases sharing drift: adaptive"),
        )
        for window, cases, drift in ways:
            for shift in SHIFTS:
                started = time.monotonic()
                seed = 36_000 + window + cases
                tally = calibrate(host, shift, draws=draws, seed=seed, window=window, cases=cases)
                row = {
                    "night1": {v: _rate(tally.first(v)) for v in ("regression", "ok", "inconclusive")},
                    "per_night": {v: _rate(tally.per_night(v)) for v in ("regression", "ok")},
                    "regression_by_night2": _rate(tally.by_night2()),
                    "mean_repeats": round(tally.mean_repeats, 3),
                    "judged_nights": tally.judged_nights,
                }
                out.setdefault(host.name, {}).setdefault(drift, {})[shift] = row
                print(
                    f"{host.name:<10} {drift:<40} {shift:<10} night 1: regression "
                    f"{tally.first('regression').text()}, ok {tally.first('ok').text()}; per night: "
                    f"regression {tally.per_night('regression').text()}, ok {tally.per_night('ok').text()}; "
                    f"regression by night 2 {tally.by_night2().text()}; repeats {tally.mean_repeats:.2f} "
                    f"({time.monotonic() - started:.0f} s)",
                    flush=True,
                )
    return out


def _rate(rate: Any) -> dict[str, float]:
    low, high = rate.interval()
    return {"rate": round(rate.value, 6), "low": round(low, 6), "high": round(high, 6), "hits": rate.hits}


ROUNDS = ("unchanged", "slower_5pc", "slower_15pc", "slower_15pc")  # a block of the sequence
TARGETS = {"unchanged": 0.0, "slower_5pc": 0.05, "slower_15pc": 0.15}


def sequence(args: argparse.Namespace) -> dict[str, Any]:
    """Warm-up nights, then blocks of rounds, each night judged against the history of nights."""
    folder = Path(tempfile.mkdtemp(prefix="jobservice-sequence-"))
    checkout, stack, units = stand_in_stack(folder, args)
    body = spec("nightly-sequence", repeats=args.repeats, undisturbed=True, baseline=None)
    nights: list[dict[str, Any]] = []
    with stack:
        checkout.set_mode("ok")
        for night in range(args.warm_up):
            nights.append(_night(stack, body, "warm-up", 1.0, night))
        generate = statistics.median(statistics.median(n["generate_ms"]) for n in nights if n["generate_ms"])
        compute_ms = (args.cpu_s + args.device_s) * 1000
        for _block in range(args.blocks):
            for kind in ROUNDS:
                factor = 1.0 + TARGETS[kind] * generate / compute_ms
                checkout.set_mode("ok" if factor == 1.0 else f"slower:{factor:.4f}")
                nights.append(_night(stack, body, kind, factor, len(nights)))
    checkout.set_mode("ok")
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
    return _sequence_summary(args, units, generate, nights)


def _night(stack: BenchStack, body: dict[str, Any], kind: str, factor: float, index: int) -> dict[str, Any]:
    batch = run_batch(stack, body)
    metric = _generate(batch)
    view = requests.get(f"{stack.base}/batches/{batch['id']}", timeout=30).json()
    case = (batch["report"].get("cases") or [{}])[0]
    night = {
        "index": index,
        "kind": kind,
        "factor": round(factor, 4),
        "id": batch["id"],
        "wall_s": round(batch["wall_s"], 1),
        "generate_ms": [float(v) for v in (case.get("samples") or {}).get("generate_ms") or []],
        "verdict": metric.get("verdict"),
        # the night's own change (in an episode, ``change`` is the pooled nights')
        "change": metric.get("tonight_change")
        if metric.get("tonight_change") is not None
        else metric.get("change"),
        "pooled_change": metric.get("change"),
        "upper": metric.get("upper"),
        "detectable": metric.get("detectable"),
        "mode": metric.get("mode"),
        "reference_runs": metric.get("reference_runs"),
        "nights": metric.get("nights"),
        "episode": metric.get("episode"),
        "runs": case.get("repeats"),
        "disturbed": sum(1 for h in batch["hosts"] if h.get("disturbed")),
        "batch_verdict": view.get("verdict"),
    }
    change = night["change"]
    print(
        f"night {index + 1:>2} {kind:<12} x{factor:.3f} {night['verdict'] or '-':<12} "
        f"change {change if change is None else f'{change:+.1%}'} upper {night['upper']} "
        f"({night['mode']}, {night['reference_runs']} runs, {night['nights']} nights) "
        f"runs {night['runs']} disturbed {night['disturbed']} wall {night['wall_s']} s",
        flush=True,
    )
    return night


def _sequence_summary(
    args: argparse.Namespace, units: int, generate: float, nights: list[dict[str, Any]]
) -> dict[str, Any]:
    """σ and τ from the unchanged nights, the shift each kind of round showed, and the verdicts."""
    unchanged = [n for n in nights if n["kind"] in ("warm-up", "unchanged")]
    runs = [r for r in (run_stats(n["generate_ms"]) for n in unchanged) if r is not None]
    s2, s_df = pooled_variance(runs)
    omega2 = sample_variance([r.median for r in runs]) if len(runs) > 1 else None
    tau2 = None if omega2 is None or s2 is None else max(0.0, omega2 - mean_factor(runs) * s2)
    kinds = ("unchanged", "slower_5pc", "slower_15pc")
    verdicts = {k: {} for k in kinds}  # type: dict[str, dict[str, int]]
    for n in nights:
        if n["kind"] in verdicts and n["verdict"]:
            verdicts[n["kind"]][n["verdict"]] = verdicts[n["kind"]].get(n["verdict"], 0) + 1
    shifts = {k: [n["change"] for n in nights if n["kind"] == k and n["change"] is not None] for k in kinds}
    # The 15 % rounds come in pairs: was each pair a regression by its second night?
    pairs = [
        nights[i : i + 2]
        for i in range(len(nights) - 1)
        if nights[i]["kind"] == "slower_15pc" and nights[i + 1]["kind"] == "slower_15pc"
    ]
    return {
        "mode": "sequence",
        "warm_up": args.warm_up,
        "blocks": args.blocks,
        "repeats": args.repeats,
        "cpu_work_units": units,
        "generate_ms_unchanged": round(generate, 1),
        "sigma": None if s2 is None else round(s2**0.5, 4),
        "sigma_df": s_df,
        "tau": None if tau2 is None else round(tau2**0.5, 4),
        "tau_runs": len(runs),
        "shift_median": {k: round(statistics.median(v), 4) if v else None for k, v in shifts.items()},
        "shifts": {k: [round(x, 4) for x in v] for k, v in shifts.items()},
        "verdicts": verdicts,
        "slower_15pc_regressed_by_second_night": [
            any(n["verdict"] == "regression" for n in pair) for pair in pairs
        ],
        "episodes": [n["episode"] for n in nights if n["episode"]],
        "disturbed_runs": sum(n["disturbed"] for n in nights),
        "runs": sum(n["runs"] or 0 for n in nights),
        "nights": [{k: v for k, v in n.items() if k not in ("generate_ms", "episode")} for n in nights],
    }


if __name__ == "__main__":
    main()

"""The device check: the service on one card, through real workers, as one JSON document.

Run by scripts/verify_device.sh (which can install the offline bundle first). On ``--device``
(cuda:0 by default; npu:0; cpu for a dry run), it starts a stack (its own Redis, SQLite, the local
object store, the API) with TWO card groups on that one card, each its own worker with its own
``--name`` and a declared ``--memory-gb``, half the card's memory each (as NVML reads it; 8 GB on
the CPU), and then:

1. figures: the reference text2video and talking-head models and a tiny random Wan2.1 diffusers
   pipeline (built here, as tests/integration/test_diffusers_e2e.py does: no downloads), each run
   ``--runs`` times on the group ``check-b``: cold (the model loads in the job), then warm;
2. cards: the card as the check itself reads it (NVML or npu-smi, ``workers.card_health``) before
   and after, and as each worker read it when a job's last frame was out (each RunReport's
   ``memory.card_used_mb`` and ``device_placement.card_health``);
3. residency: on the group ``check-a``, two copies of the tiny Wan pipeline that each declare
   ``min_memory_gb`` of 30 % of the card: they do not fit side by side in the group's half, so
   the jobs a, a, b, a must load a, keep it, evict it for b, evict b for a. The jobs' cold starts,
   the group's fleet events (load, evict) and the memory the card had in use after each job say
   whether that happened, and what each load and eviction did to the card's real memory (the
   worker's budget check reads the free memory of the card, which both groups share);
4. nightly: ``--rounds`` unchanged nightly batches of one small reference-t2v case with
   ``--repeats`` runs each, each compared by the service with the one before (its auto baseline).
   ``sigma_rel``: the within-run noise of generate time (the median over rounds of each round's
   robust sigma over its median); ``between_rel``: the robust sigma of the rounds' medians over
   their median; ``tau_lower_bound_rel``: what of that spread the within-run noise does not
   explain, sqrt(max(0, between^2 - (1.2533 sigma)^2 / repeats)). Rounds in one warm process share
   what nights do not (the process, the card's state, the host's load), so this bounds the drift
   between nights from below only.

It writes the document to ``--out``/device-check.json and prints it as its LAST line.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from jobservice.fleet.placement import parse_devices  # noqa: E402
from jobservice.nightly.stats import MEDIAN_SE, robust_sigma  # noqa: E402
from scripts.bench_lib.stack import BenchStack  # noqa: E402
from tests.standins.deploy import write_deployment  # noqa: E402
from workers.card_health import CardHealth, CardMonitor  # noqa: E402

WAN = "wan2.1-t2v-1.3b"
WAN_A, WAN_B = "wan-resident-a", "wan-resident-b"
GROUP_FIGURES, GROUP_RESIDENCY = "check-b", "check-a"
CPU_CARD_GB = 16.0  # what the dry run on the CPU declares as its "card"
WAN_JOB = {"prompt": "a red kite over the sea", "width": 64, "height": 48, "num_frames": 17, "fps": 8}
JOBS: dict[str, dict[str, Any]] = {
    "reference-t2v": {"task": "text2video", "prompt": "waves of amber light over a dark sea", "seed": 1},
    "reference-talking-head": {"task": "audio2video", "max_size": 384, "seed": 1},
    WAN: {**WAN_JOB, "seed": 3},
}
RESIDENCY = [WAN_A, WAN_A, WAN_B, WAN_A]
NIGHTLY_CASE = {
    "name": "t2v-256x160",
    "model": "reference-t2v",
    "params": {"prompt": "a lighthouse in a storm", "width": 256, "height": 160, "num_frames": 24, "fps": 12},
}


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--device", default="cuda:0", help="the one card (cuda:0, npu:0), or cpu for a dry run"
    )
    parser.add_argument("--runs", type=int, default=2, help="runs per model: the first is cold")
    parser.add_argument("--rounds", type=int, default=20, help="unchanged nightly rounds")
    parser.add_argument("--repeats", type=int, default=3, help="runs per nightly round")
    parser.add_argument("--out", type=Path, default=None, help="folder for device-check.json (default: none)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument(
        "--install-s", type=float, default=None, help="(verify_device.sh) the bundle's install"
    )
    parser.add_argument(
        "--deadline-s",
        type=float,
        default=270,
        help="seconds for the whole check, the install included: no nightly round starts that would end later",
    )
    return parser.parse_args()


def read_cards(spec: str) -> list[dict[str, Any]] | None:
    """The card as the check reads it (NVML, nvidia-smi or npu-smi)."""
    monitor = CardMonitor(parse_devices(spec))
    try:
        cards = monitor.read()
    finally:
        monitor.close()
    return None if cards is None else [card_dict(c) for c in cards]


def card_dict(card: CardHealth) -> dict[str, Any]:
    return {
        "index": card.index,
        "name": card.name,
        "memory_total_mb": card.memory_total_mb,
        "memory_used_mb": card.memory_used_mb,
        "healthy": card.healthy,
        "problems": list(card.problems),
        "source": card.source,
    }


def build_site(folder: Path, *, wan_gb: float) -> Path:
    """The tiny Wan pipeline and a deployment: the reference models, the Wan figures model, and two
    copies of it that each declare ``wan_gb`` of card memory (the residency models)."""
    wan = folder / "Wan2.1-T2V-tiny-Diffusers"
    subprocess.run([sys.executable, "-m", "tests.standins.tiny_wan", str(wan)], cwd=ROOT, check=True)
    entry = {
        "backend": "diffusers",
        "path": str(wan),
        "defaults": {"num_inference_steps": 4, "guidance_scale": 5.0},
    }
    models = {
        WAN: entry,
        WAN_A: {**entry, "min_memory_gb": wan_gb},
        WAN_B: {**entry, "min_memory_gb": wan_gb},
    }
    return write_deployment(folder / "deploy.yaml", {"reference_models": True, "models": models})


def speech(folder: Path, seconds: float = 4.0) -> Path:
    """The sample speech cut to ``seconds``."""
    out = folder / "speech.wav"
    source = ROOT / "samples/speech.wav"
    subprocess.run(
        ["ffmpeg", "-v", "error", "-y", "-i", str(source), "-t", f"{seconds:g}", str(out)], check=True
    )
    return out


def run_one(stack: BenchStack, model: str, audio: Path, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """One job of ``model``; the figures of its RunReport."""
    body = {**(body or JOBS[model]), "model": model}
    if body.get("task") == "audio2video":
        job_id = stack.submit_a2v(image=ROOT / "samples/portrait.png", audio=audio, fields=body)
    else:
        job_id = stack.submit_json(body)
    job = stack.wait(job_id, timeout=240)
    assert job["status"] == "succeeded", job
    report = stack.report(job_id)
    timings = report["timings"]
    placement = report.get("device_placement") or {}
    return {
        "job_id": job_id,
        "group": str(report.get("worker_id", "")).split("#", 1)[0],
        "cold_start": report["cold_start"],
        "load_ms": timings.get("load_ms"),
        "generate_ms": timings["generate_ms"],
        "total_ms": timings["total_ms"],
        "render_fps": report["render_fps"],
        "rtf": report["rtf"],
        "frames": report["frames_generated"],
        "verdict": report["validation"]["verdict"],
        "card_health": placement.get("card_health"),
        **dict(report["memory"].items()),
    }


def figures(stack: BenchStack, audio: Path, runs: int) -> dict[str, Any]:
    """Cold and warm runs of each model on the figures group."""
    result: dict[str, Any] = {}
    for model in JOBS:
        done = [run_one(stack, model, audio) for _ in range(runs)]
        result[model] = {
            ("cold" if i == 0 else f"warm{i}" if i > 1 else "warm"): run for i, run in enumerate(done)
        }
        print(model, json.dumps(done), flush=True)
    return result


def residency(stack: BenchStack, audio: Path) -> dict[str, Any]:
    """The jobs a, a, b, a on the residency group, its fleet events and the card's memory."""
    from sqlalchemy import select

    from jobservice.db.tables import FleetEvent

    jobs = [run_one(stack, model, audio, {**WAN_JOB, "seed": 5}) for model in RESIDENCY]
    with stack.db.session() as session:
        rows = session.scalars(
            select(FleetEvent).where(FleetEvent.group_id == GROUP_RESIDENCY).order_by(FleetEvent.id)
        ).all()
        events = [
            {
                "kind": e.kind,
                "model": e.model,
                "reason": e.reason,
                "seconds": e.seconds,
                "job_id": str(e.job_id),
            }
            for e in rows
        ]
    wanted = [("load", WAN_A), ("evict", WAN_A), ("load", WAN_B), ("evict", WAN_B), ("load", WAN_A)]
    return {
        "jobs": [
            {
                k: j[k]
                for k in ("group", "cold_start", "load_ms", "generate_ms", "card_used_mb", "card_health")
                if k in j
            }
            | {"model": m}
            for m, j in zip(RESIDENCY, jobs, strict=True)
        ],
        "events": events,
        "as_expected": [j["cold_start"] for j in jobs] == [True, False, True, True]
        and [(e["kind"], e["model"]) for e in events] == wanted
        and all(j["group"] == GROUP_RESIDENCY for j in jobs),
        "expected": "load a; keep a; evict a, load b; evict b, load a",
    }


def nightly(stack: BenchStack, rounds: int, repeats: int, *, until: float) -> dict[str, Any]:
    """``rounds`` unchanged batches of one case: the within-run noise and the rounds' spread. No
    round starts that would likely end after ``until`` (a ``time.monotonic()``)."""
    spec = {
        "name": f"device-check-{uuid.uuid4().hex[:6]}",
        "baseline": "auto",
        "repeat": repeats,
        "metrics": ["generate_ms"],
        "cases": [NIGHTLY_CASE],
    }
    medians, sigmas, verdicts, walls = [], [], [], []
    for _ in range(rounds):
        if walls and time.monotonic() + max(walls) > until:
            break  # the check's time is up: fewer rounds (``rounds`` says how many ran)
        started = time.perf_counter()
        created = requests.post(f"{stack.base}/batches", json={"spec": spec}, timeout=60)
        created.raise_for_status()
        batch_id = created.json()["id"]
        deadline = time.monotonic() + 300
        while True:
            batch = requests.get(f"{stack.base}/batches/{batch_id}", timeout=10).json()
            if batch["status"] in ("finished", "canceled"):
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"nightly round {batch_id} did not finish")
            time.sleep(0.2)
        assert batch["status"] == "finished", batch
        report = requests.get(
            f"{stack.base}/batches/{batch_id}/report", params={"format": "json"}, timeout=30
        )
        report.raise_for_status()
        case = next(c for c in report.json()["cases"] if c["case"] == NIGHTLY_CASE["name"])
        generate = case["metrics"]["generate_ms"]
        medians.append(generate["median"])
        if generate.get("sigma") is not None and generate["median"]:
            sigmas.append(generate["sigma"] / generate["median"])
        verdicts.append(case.get("verdict"))
        walls.append(round(time.perf_counter() - started, 2))
    if not medians:
        return {"case": NIGHTLY_CASE, "rounds": 0, "rounds_asked": rounds, "repeats": repeats}
    center = statistics.median(medians)
    sigma_rel = statistics.median(sigmas) if sigmas else None
    between = robust_sigma(medians)
    between_rel = None if between is None or not center else between / center
    tau = None
    if between_rel is not None and sigma_rel is not None:
        tau = math.sqrt(max(0.0, between_rel**2 - (MEDIAN_SE * sigma_rel) ** 2 / repeats))
    return {
        "case": NIGHTLY_CASE,
        "rounds": len(medians),
        "rounds_asked": rounds,
        "repeats": repeats,
        "generate_ms_medians": medians,
        "sigma_rel": None if sigma_rel is None else round(sigma_rel, 5),
        "between_rel": None if between_rel is None else round(between_rel, 5),
        "tau_lower_bound_rel": None if tau is None else round(tau, 5),
        "verdicts": {v: verdicts.count(v) for v in sorted(set(map(str, verdicts)))},
        "round_wall_s": walls,
    }


def versions(device: str) -> dict[str, Any]:
    """Python, torch and, on cuda, the card's name and CUDA version (asked in a child process);
    the driver as the service records it."""
    from jobservice.reports.buildinfo import driver_versions

    code = (
        "import json, torch; d = {'torch': torch.__version__}\n"
        "if torch.cuda.is_available():\n"
        "    d.update(cuda=torch.version.cuda, card=torch.cuda.get_device_name(0))\n"
        "print(json.dumps(d))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    found = json.loads(done.stdout) if done.returncode == 0 else {"torch": None}
    return {"python": platform.python_version(), **found, "drivers": driver_versions()}


def main() -> None:
    args = parse()
    started = time.perf_counter()
    until = time.monotonic() + args.deadline_s - (args.install_s or 0.0) - 15  # 15 s to stop the stack
    phases: dict[str, float] = {}
    cards_before = read_cards(args.device)
    total_gb = CPU_CARD_GB
    if cards_before and cards_before[0]["memory_total_mb"]:
        total_gb = cards_before[0]["memory_total_mb"] / 1024
    half = round(total_gb / 2, 1)
    wan_gb = round(total_gb * 0.3, 1)
    group_options = ["--memory-gb", str(half)]
    stack = BenchStack(
        devices=args.device,
        preload=False,
        keep=args.keep,
        env={"HF_HUB_OFFLINE": "1"},
        worker_args=["--name", GROUP_FIGURES, "--models", ",".join(JOBS), *group_options],
        more_workers=[(args.device, [WAN_A, WAN_B], ["--name", GROUP_RESIDENCY, *group_options])],
    )
    t = time.perf_counter()
    stack.deployment = build_site(stack.tmp, wan_gb=wan_gb)
    audio = speech(stack.tmp)
    phases["site_s"] = round(time.perf_counter() - t, 1)
    result: dict[str, Any] = {"device": args.device, **versions(args.device), "cards_before": cards_before}
    result["groups"] = {
        GROUP_FIGURES: {"models": list(JOBS), "memory_gb": half},
        GROUP_RESIDENCY: {"models": [WAN_A, WAN_B], "memory_gb": half, "model_memory_gb": wan_gb},
    }
    save(args.out, result)
    try:
        t = time.perf_counter()
        stack.start()
        phases["start_s"] = round(time.perf_counter() - t, 1)
        t = time.perf_counter()
        result["figures"] = figures(stack, audio, args.runs)
        save(args.out, result)
        phases["figures_s"] = round(time.perf_counter() - t, 1)
        t = time.perf_counter()
        result["residency"] = residency(stack, audio)
        print("residency", json.dumps(result["residency"]), flush=True)
        save(args.out, result)
        phases["residency_s"] = round(time.perf_counter() - t, 1)
        result["cards_loaded"] = read_cards(args.device)  # both groups hold their models now
        t = time.perf_counter()
        result["nightly"] = nightly(stack, args.rounds, args.repeats, until=until)
        phases["nightly_s"] = round(time.perf_counter() - t, 1)
    finally:
        stack.close()
    result["cards_after"] = read_cards(args.device)
    if args.install_s is not None:
        phases = {"install_s": args.install_s, **phases}
    result["phases"] = phases
    result["wall_s"] = round(time.perf_counter() - started, 1)
    result["complete"] = True
    save(args.out, result)
    print(json.dumps(result))


def save(out: Path | None, result: dict[str, Any]) -> None:
    """The document as it stands (written after each part: a check stopped by its timeout still
    leaves what it measured; ``complete`` is only in a finished one)."""
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "device-check.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()

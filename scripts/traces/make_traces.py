#!/usr/bin/env python3
"""Writes the shipped fleet traces (scripts/traces/*.jsonl) from the seed figures, deterministically.

The figures (shared/reference/seed-systems.md, the seed benchmark documents):
  SoulX-FlashTalk-14B  4 cards, resident; cold load 88.4 s; warm: 937 frames (37.5 s) in 37.4 s
  SoulX-FlashHead-1.3B 2 cards, per run (generate_video.py under torchrun): ~83 s for a 10 s clip,
                       every run cold (its load is inside the run)
  Wan2.1-T2V-1.3B      vLLM-Omni on 2 cards (CFG parallel): 3 min for 81 frames at 16 fps
                       (5.06 s); first request 3-4 min (model load and compile)
Memory (64 GB per 910B card): FlashTalk 56 GB on each of its 4 cards, FlashHead and Wan2.1 24 GB
on each of their 2, so FlashHead and Wan2.1 fit side by side, and nothing fits beside FlashTalk.

The 8-card 910B host is two 4-card groups, each able to hold any model; the static baseline pins
npu:0-3 to the models today's file gives its cards (Wan2.1 and FlashHead) and npu:4-7 to FlashTalk.

Usage: scripts/traces/make_traces.py   (rewrites every trace in this folder)
       scripts/traces/make_traces.py --variants DIR | --two-group DIR   (unseen variants, for checks)
       scripts/traces/make_traces.py --random DIR [FIRST LAST]   (random unseen nights, seeds 1-100)
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
HOUR = 3600.0

FLASHTALK = "soulx-flashtalk-14b"
FLASHHEAD = "soulx-flashhead-1.3b"
WAN = "wan2.1-t2v-1.3b"

NPU_MODELS = {
    FLASHTALK: {
        "cards": 4,
        "memory_gb": 224,
        "load_s": 88.4,
        "seconds_per_output_second": 0.997,
        "per_run": False,
    },
    FLASHHEAD: {
        "cards": 2,
        "memory_gb": 48,
        "load_s": 0,
        "overhead_s": 70.0,
        "seconds_per_output_second": 1.3,
        "per_run": True,
    },
    WAN: {"cards": 2, "memory_gb": 48, "load_s": 210, "seconds_per_output_second": 35.6, "per_run": False},
}
NPU_FLEET = [
    {
        "group": "npu:0,1,2,3",
        "cards": 4,
        "memory_gb_per_card": 64,
        "models": [FLASHTALK, FLASHHEAD, WAN],
        "pinned": [WAN, FLASHHEAD],
    },
    {
        "group": "npu:4,5,6,7",
        "cards": 4,
        "memory_gb_per_card": 64,
        "models": [FLASHTALK, FLASHHEAD, WAN],
        "pinned": [FLASHTALK],
    },
]
# FlashHead per run on one CUDA card (generate_video.py; 24 GB).
FLASHHEAD_ONE_CARD = {
    "cards": 1,
    "memory_gb": 24,
    "overhead_s": 40.0,
    "seconds_per_output_second": 1.0,
    "per_run": True,
}
WAN_CLIP = 81 / 16  # seconds of video of one Wan2.1 job at the seed's settings
FULL_TALK = 937 / 25  # the seed's full FlashTalk clip


def poisson(rng: random.Random, rate_per_hour: float, start: float, end: float) -> list[float]:
    """Arrival times of a Poisson process between ``start`` and ``end``."""
    times: list[float] = []
    t = start
    while True:
        t += rng.expovariate(rate_per_hour / HOUR)
        if t >= end:
            return times
        times.append(round(t, 1))


def job(t: float, model: str, tenant: str, priority: str, seconds: float) -> dict[str, Any]:
    return {
        "t": round(t, 1),
        "model": model,
        "tenant": tenant,
        "priority": priority,
        "output_seconds": round(seconds, 2),
    }


def day_jobs(rng: random.Random, start: float, hours: float) -> list[dict[str, Any]]:
    """Interactive talking heads by day (and a little text-to-video)."""
    end = start + hours * HOUR
    jobs = [
        job(t, FLASHTALK, rng.choice(["studio", "support"]), "interactive", rng.uniform(8, 40))
        for t in poisson(rng, 30, start, end)
    ]
    jobs += [
        job(t, FLASHHEAD, rng.choice(["studio", "marketing"]), "interactive", rng.uniform(5, 15))
        for t in poisson(rng, 14, start, end)
    ]
    jobs += [job(t, WAN, "research", "interactive", WAN_CLIP) for t in poisson(rng, 3, start, end)]
    return jobs


def night_jobs(start: float) -> list[dict[str, Any]]:
    """The nightly regression batch: 500 full FlashTalk clips queued at once."""
    return [job(start, FLASHTALK, "nightly", "batch", FULL_TALK) for _ in range(500)]


def write(name: str, header: dict[str, Any], jobs: list[dict[str, Any]], *, folder: Path = HERE) -> None:
    jobs = sorted(jobs, key=lambda j: j["t"])
    with (folder / name).open("w", encoding="utf-8") as out:
        out.write(json.dumps(header) + "\n")
        for line in jobs:
            out.write(json.dumps(line) + "\n")
    print(f"{name}: {len(jobs)} jobs")


def npu_header(tenants: dict[str, Any] | None = None) -> dict[str, Any]:
    header: dict[str, Any] = {"fleet": NPU_FLEET, "models": NPU_MODELS}
    if tenants:
        header["tenants"] = tenants
    return header


def main() -> None:
    write("910b-day.jsonl", npu_header(), day_jobs(random.Random(7), 0.0, 15))
    write("910b-night.jsonl", npu_header(), night_jobs(0.0))
    rng = random.Random(11)
    write("910b-day-night.jsonl", npu_header(), day_jobs(rng, 0.0, 15) + night_jobs(15 * HOUR))

    # A 2-GPU CUDA box (deploy/cuda-2gpu.toml): FlashHead per run on one card, Wan2.1 from diffusers
    # resident, FlashHead Lite through OmniRT's CLI; a text-to-video batch lands mid-morning.
    cuda_models = {
        FLASHHEAD: FLASHHEAD_ONE_CARD,
        WAN: {"cards": 1, "memory_gb": 20, "load_s": 45, "seconds_per_output_second": 47.0, "per_run": False},
        "omnirt": {
            "cards": 1,
            "memory_gb": 16,
            "overhead_s": 30.0,
            "seconds_per_output_second": 0.5,
            "per_run": True,
        },
    }
    cuda_fleet = [
        {
            "group": "cuda:0",
            "cards": 1,
            "memory_gb_per_card": 80,
            "kind": "cuda",
            "models": [FLASHHEAD, WAN, "omnirt"],
            "pinned": [FLASHHEAD],
        },
        {
            "group": "cuda:1",
            "cards": 1,
            "memory_gb_per_card": 80,
            "kind": "cuda",
            "models": [FLASHHEAD, WAN, "omnirt"],
            "pinned": [WAN, "omnirt"],
        },
    ]
    rng = random.Random(23)
    jobs = [
        job(t, FLASHHEAD, "studio", "interactive", rng.uniform(5, 15)) for t in poisson(rng, 10, 0, 8 * HOUR)
    ]
    jobs += [job(t, WAN, "research", "interactive", WAN_CLIP) for t in poisson(rng, 4, 0, 8 * HOUR)]
    jobs += [
        job(t, "omnirt", "studio", "interactive", rng.uniform(5, 15)) for t in poisson(rng, 8, 0, 8 * HOUR)
    ]
    jobs += [job(3 * HOUR, WAN, "research", "batch", WAN_CLIP) for _ in range(40)]
    write("cuda-2gpu.jsonl", {"fleet": cuda_fleet, "models": cuda_models}, jobs)

    # A burst: two quiet hours on the 910B host, then 120 text-to-video requests from four teams
    # within five minutes, while talking heads keep coming.
    rng = random.Random(31)
    jobs = day_jobs(rng, 0.0, 3)
    jobs += [
        job(
            1800 + rng.uniform(0, 300),
            WAN,
            rng.choice(["ads", "games", "news", "edu"]),
            "interactive",
            WAN_CLIP,
        )
        for _ in range(120)
    ]
    write("burst.jsonl", npu_header(), jobs)

    # Fair share. Two tenants, weights 3:1, both backlogged throughout (their batches are longer
    # than the trace can drain at the other's pace).
    jobs = [job(0.0, FLASHTALK, "alpha", "batch", FULL_TALK) for _ in range(900)]
    jobs += [job(60.0, FLASHTALK, "beta", "batch", FULL_TALK) for _ in range(300)]
    write("tenants-2-weighted.jsonl", npu_header({"alpha": {"weight": 3}, "beta": {"weight": 1}}), jobs)

    # Five tenants with equal weights, batches of every model arriving through a night, plus a
    # starving newcomer: one job from a sixth team after the others queued thousands.
    rng = random.Random(41)
    jobs = []
    for k, tenant in enumerate(["t1", "t2", "t3", "t4", "t5"]):
        start = k * 600.0
        jobs += [job(start, FLASHTALK, tenant, "batch", FULL_TALK) for _ in range(120)]
        jobs += [job(start + 300, FLASHHEAD, tenant, "batch", rng.uniform(5, 15)) for _ in range(40)]
        jobs += [job(start + 450, WAN, tenant, "batch", WAN_CLIP) for _ in range(6)]
    jobs.append(job(5400.0, FLASHTALK, "newcomer", "batch", FULL_TALK))
    write("tenants-5.jsonl", npu_header(), jobs)

    # Interactive first: a night batch saturating 16 cards while talking heads trickle in (FlashHead,
    # per run, one every ~6 minutes), and 8 H100s with a Wan2.1-14B batch and a busier trickle.
    write("trickle-16card.jsonl", *trickle(3, period_s=360, batch=1500, hours=5))
    write("trickle-h100.jsonl", *trickle(4, period_s=150, batch=900, hours=5, fleet="h100"))
    # Demand that shifts between two models every three hours, all interactive.
    write("shifting-day.jsonl", npu_header(), shifting_day(5))
    # Fair share: four teams with equal weights join a backlogged fleet one by one.
    write("catch-up.jsonl", npu_header(), catch_up(6))
    # Fair share and ETAs: three backlogged tenants with weights 2:1:1 and a trickle.
    weights = {"gold": {"weight": 2}, "silver": {"weight": 1}, "bronze": {"weight": 1}}
    write("tenants-3-weighted.jsonl", npu_header(weights), weighted_backlog(8))
    # ETAs: two nights; on the second an unseen tenant's batch arrives (play it with --nights 1).
    first, second = unseen_night_two(9)
    write("unseen-tenant.jsonl", npu_header(), first + second)

    # Starvation: one tenant queues 1,000 batch jobs, then another submits one.
    jobs = [job(0.0, FLASHTALK, "bulk", "batch", FULL_TALK) for _ in range(1000)]
    jobs.append(job(1200.0, FLASHTALK, "single", "batch", FULL_TALK))
    write("starvation.jsonl", npu_header(), jobs)


def npu_hosts(hosts: int) -> list[dict[str, Any]]:
    """``hosts`` 8-card 910B hosts, each two 4-card groups pinned as ``NPU_FLEET`` pins them."""
    return [{**group, "group": f"host{h}/{group['group']}"} for h in range(hosts) for group in NPU_FLEET]


# A 4 x 2-card H100 host (80 GB cards): Wan2.1-14B across two cards for batches (64 GB on each),
# FlashHead per run on one card (24 GB): it does not fit beside Wan2.1-14B.
WAN14 = "wan2.1-t2v-14b"
H100_MODELS = {
    WAN14: {"cards": 2, "memory_gb": 128, "load_s": 120, "seconds_per_output_second": 24.0, "per_run": False},
    FLASHHEAD: FLASHHEAD_ONE_CARD,
}


def h100_fleet(groups: int) -> list[dict[str, Any]]:
    """``groups`` 2-card groups; the static layout pins one to FlashHead, the rest to Wan2.1-14B."""
    return [
        {
            "group": f"cuda:{2 * k},{2 * k + 1}",
            "cards": 2,
            "memory_gb_per_card": 80,
            "kind": "cuda",
            "models": [WAN14, FLASHHEAD],
            "pinned": [FLASHHEAD] if k == 0 else [WAN14],
        }
        for k in range(groups)
    ]


def trickle(
    seed: int, *, period_s: float, batch: int, hours: float, fleet: str = "npu", model: str = FLASHHEAD
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A night batch that saturates every group while interactive jobs of ``model`` trickle in,
    one every ``period_s`` on average (Poisson), for ``hours``. ``fleet``: ``npu`` (two 8-card 910B
    hosts, 16 cards: FlashTalk batch) or ``h100`` (8 H100s as four 2-card groups: Wan2.1-14B batch)."""
    rng = random.Random(seed)
    if fleet == "npu":
        header = {"fleet": npu_hosts(2), "models": NPU_MODELS}
        jobs = [job(0.0, FLASHTALK, "nightly", "batch", FULL_TALK) for _ in range(batch)]
    else:
        header = {"fleet": h100_fleet(4), "models": H100_MODELS}
        jobs = [job(0.0, WAN14, "nightly", "batch", WAN_CLIP) for _ in range(batch)]
    seconds = WAN_CLIP if model == WAN else None
    jobs += [
        job(t, model, rng.choice(["studio", "support"]), "interactive", seconds or rng.uniform(5, 15))
        for t in poisson(rng, HOUR / period_s, 60.0, hours * HOUR)
    ]
    return header, jobs


def shifting_day(seed: int, *, hours: float = 15, every_h: float = 3) -> list[dict[str, Any]]:
    """Interactive demand that shifts between two models every ``every_h`` hours: talking heads
    (FlashTalk), then text-to-video (Wan2.1, with FlashHead beside it), and so on."""
    rng = random.Random(seed)
    jobs: list[dict[str, Any]] = []
    start = 0.0
    for k in range(int(hours / every_h)):
        end = start + every_h * HOUR
        if k % 2 == 0:
            jobs += [
                job(t, FLASHTALK, rng.choice(["studio", "support"]), "interactive", rng.uniform(8, 40))
                for t in poisson(rng, 60, start, end)
            ]
            jobs += [job(t, WAN, "research", "interactive", WAN_CLIP) for t in poisson(rng, 1, start, end)]
        else:
            jobs += [
                job(t, WAN, rng.choice(["research", "ads"]), "interactive", WAN_CLIP)
                for t in poisson(rng, 14, start, end)
            ]
            jobs += [
                job(t, FLASHHEAD, "marketing", "interactive", rng.uniform(5, 15))
                for t in poisson(rng, 12, start, end)
            ]
            jobs += [
                job(t, FLASHTALK, "support", "interactive", rng.uniform(8, 40))
                for t in poisson(rng, 4, start, end)
            ]
        start = end
    return jobs


def catch_up(
    seed: int, *, tenants: int = 4, every_s: float = 1800.0, jobs_each: int = 400
) -> list[dict[str, Any]]:
    """Fair share's catch-up: tenants with equal weights join a backlogged fleet one by one, every
    ``every_s``, each with a batch longer than the fleet drains while they all wait."""
    rng = random.Random(seed)
    jobs: list[dict[str, Any]] = []
    for k in range(tenants):
        start = k * every_s + rng.uniform(0, 60)
        jobs += [job(start, FLASHTALK, f"team-{k + 1}", "batch", FULL_TALK) for _ in range(jobs_each)]
    return jobs


def weighted_backlog(seed: int) -> list[dict[str, Any]]:
    """Three tenants backlogged with weights 2:1:1 (the header names them), batches of every model
    queued within the first ten minutes, and an interactive trickle of talking heads."""
    rng = random.Random(seed)
    jobs: list[dict[str, Any]] = []
    for tenant, count in (("gold", 500), ("silver", 260), ("bronze", 260)):
        start = rng.uniform(0, 600)
        jobs += [job(start, FLASHTALK, tenant, "batch", FULL_TALK) for _ in range(count)]
        jobs += [job(start + 30, WAN, tenant, "batch", WAN_CLIP) for _ in range(count // 20)]
    jobs += [
        job(t, FLASHHEAD, "studio", "interactive", rng.uniform(5, 15)) for t in poisson(rng, 4, 0, 6 * HOUR)
    ]
    return jobs


def unseen_night_two(seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Two nights of two incumbent tenants' batches; on the second an unseen tenant's batch comes
    an hour in. Returns (night one, night two) with night two's times a day later."""
    rng = random.Random(seed)
    first = [job(0.0, FLASHTALK, "regress", "batch", FULL_TALK) for _ in range(300)]
    first += [job(120.0, FLASHTALK, "evals", "batch", FULL_TALK) for _ in range(200)]
    first += [
        job(t, FLASHHEAD, "studio", "interactive", rng.uniform(5, 15)) for t in poisson(rng, 3, 0, 4 * HOUR)
    ]
    second = [
        {**j, "t": round(j["t"] + 86400.0 + rng.uniform(-120, 120) * (j["priority"] == "batch"), 1)}
        for j in first
    ]
    second += [job(86400.0 + HOUR, FLASHTALK, "newteam", "batch", FULL_TALK) for _ in range(150)]
    return first, second


def two_group_night(seed: int, *, period_min: float, hours: float = 6.0) -> list[dict[str, Any]]:
    """One 8-card 910B host (two groups) at night: 250-450 FlashTalk regression jobs of two teams in
    the first two minutes, and talking heads (FlashHead, interactive) one every ``period_min`` minutes
    on average (Poisson) for ``hours``: where a trickle's room is half the fleet."""
    rng = random.Random(seed * 100 + int(period_min))
    jobs = [
        job(rng.uniform(0, 120), FLASHTALK, rng.choice(["team-a", "team-b"]), "batch", rng.uniform(20, 45))
        for _ in range(rng.randint(250, 450))
    ]
    jobs += [
        job(t, FLASHHEAD, "studio", "interactive", rng.uniform(5, 14))
        for t in poisson(rng, 60 / period_min, 0.0, hours * HOUR)
    ]
    return jobs


def write_two_group_nights(folder: Path, seeds: range) -> None:
    """Nights of one 8-card host with a talking head every 5, 10, 20 or 40 minutes on average:
    scripts/traces/make_traces.py --two-group DIR (seeds 21-23)."""
    folder.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        for period_min in (5, 10, 20, 40):
            write(
                f"two-group-p{period_min}-s{seed}.jsonl",
                npu_header(),
                two_group_night(seed, period_min=period_min),
                folder=folder,
            )


def write_trickles(folder: Path, seeds: range) -> None:
    """Unseen variants of the trickle traces (fleet, trickle period, batch size and seed varied),
    for checking the policy beyond the shipped traces: scripts/traces/make_traces.py --variants DIR."""
    folder.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        for fleet, batch, hours in (("npu", 1500, 5.0), ("npu", 800, 3.0), ("h100", 900, 5.0)):
            for period_min in (3, 7, 15, 40):
                header, jobs = trickle(seed, period_s=period_min * 60, batch=batch, hours=hours, fleet=fleet)
                name = f"trickle-{fleet}-b{batch}-p{period_min}-s{seed}.jsonl"
                write(name, header, jobs, folder=folder)
        header, jobs = trickle(seed, period_s=1200, batch=1500, hours=5, model=WAN)
        write(f"trickle-npu-wan-p20-s{seed}.jsonl", header, jobs, folder=folder)
        write(
            f"shifting-day-s{seed}.jsonl",
            npu_header(),
            shifting_day(seed, every_h=2 + seed % 3),
            folder=folder,
        )
        write(f"catch-up-s{seed}.jsonl", npu_header(), catch_up(seed, tenants=3 + seed % 3), folder=folder)


# What one job of each model's kind takes (output seconds), drawn as the shipped traces draw them.
CLIPS = {
    FLASHTALK: (15.0, 40.0),
    FLASHHEAD: (5.0, 15.0),
    WAN: (WAN_CLIP, WAN_CLIP),
    WAN14: (WAN_CLIP, WAN_CLIP),
}
RUN_S = {FLASHTALK: 40.0, FLASHHEAD: 85.0, WAN: 180.0, WAN14: 121.0}  # about one job's run, for sizing


def random_night(seed: int) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    """An unseen night drawn at random, for checking the policy beyond the traces it was tuned on:
    a fleet (one to three 8-card 910B hosts as shipped, two to six 2-card H100 groups, or a 910B host
    as two 4-card groups beside one as four 2-card groups, where FlashTalk does not fit), a batch of
    any of its models from one to three tenants (weights drawn) sized to keep the fleet busy two to six
    hours, arriving at once or over minutes or an hour, an interactive trickle of another model (a
    job every 2 to 90 minutes on average, one to three tenants), and, on some nights, a second
    interactive model and a second batch mid-night. Static pins today's layout (``npu_hosts``,
    ``h100_fleet``). Returns (header, jobs, a short name)."""
    rng = random.Random(seed)
    kind = rng.choice(["npu", "npu", "h100", "mixed"])
    if kind == "npu":
        fleet, models = npu_hosts(rng.choice([1, 1, 2, 3])), NPU_MODELS
    elif kind == "h100":
        fleet, models = h100_fleet(rng.choice([2, 3, 4, 6])), H100_MODELS
    else:
        small = [
            {
                "group": f"b/npu:{2 * k},{2 * k + 1}",
                "cards": 2,
                "memory_gb_per_card": 64,
                "models": [FLASHHEAD, WAN],
                "pinned": [FLASHHEAD] if k == 0 else [WAN],
            }
            for k in range(4)
        ]
        fleet, models = [{**g, "group": f"a/{g['group']}"} for g in NPU_FLEET] + small, NPU_MODELS
    names = sorted(models)

    def clip(model: str) -> float:
        low, high = CLIPS[model]
        return rng.uniform(low, high)

    batch_model = rng.choice(names)
    trickle_model = rng.choice([m for m in names if m != batch_model])
    jobs: list[dict[str, Any]] = []
    tenants: dict[str, Any] = {}
    teams = rng.choice([1, 1, 2, 3])
    hosts = sum(1 for g in fleet if batch_model in g["models"])
    total = max(20, min(2500, int(rng.uniform(2, 6) * HOUR * hosts / RUN_S[batch_model])))
    for k in range(teams):
        if teams > 1 and rng.random() < 0.5:
            tenants[f"team-{k}"] = {"weight": rng.choice([1, 2, 3])}
        start, spread = rng.choice([0.0, rng.uniform(0, 1800)]), rng.choice([0.0, 120.0, HOUR])
        jobs += [
            job(start + rng.uniform(0, spread), batch_model, f"team-{k}", "batch", clip(batch_model))
            for _ in range(total // teams)
        ]
    period_min = rng.choice([2, 3, 5, 8, 12, 20, 40, 90])
    hours = rng.uniform(2, 7)
    users = ["studio", "support", "ads"][: rng.choice([1, 2, 3])]
    jobs += [
        job(t, trickle_model, rng.choice(users), "interactive", clip(trickle_model))
        for t in poisson(rng, 60 / period_min, 0.0, hours * HOUR)
    ]
    others = [m for m in names if m not in (batch_model, trickle_model)]
    if others and rng.random() < 0.3:
        jobs += [
            job(t, others[0], "studio", "interactive", clip(others[0]))
            for t in poisson(rng, rng.choice([1, 3, 6]), 0.0, hours * HOUR)
        ]
    if rng.random() < 0.3:
        second = rng.choice([m for m in names if m != batch_model])
        at = rng.uniform(600, 3 * HOUR)
        jobs += [job(at, second, "late-team", "batch", clip(second)) for _ in range(rng.randint(10, 150))]
    header: dict[str, Any] = {"fleet": fleet, "models": models}
    if tenants:
        header["tenants"] = tenants
    name = f"{kind}-g{len(fleet)}-b{batch_model.split('-')[1]}-i{trickle_model.split('-')[1]}-p{period_min}"
    return header, jobs, name


def write_random_nights(folder: Path, seeds: range) -> None:
    """``random_night`` for each seed: scripts/traces/make_traces.py --random DIR [FIRST LAST]
    (seeds 1-100 unless given)."""
    folder.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        header, jobs, name = random_night(seed)
        write(f"random-{seed:03d}-{name}.jsonl", header, jobs, folder=folder)


if __name__ == "__main__":
    import sys

    if len(sys.argv) == 3 and sys.argv[1] == "--variants":
        write_trickles(Path(sys.argv[2]), range(1, 6))
    elif len(sys.argv) == 3 and sys.argv[1] == "--two-group":
        write_two_group_nights(Path(sys.argv[2]), range(21, 24))
    elif len(sys.argv) in (3, 5) and sys.argv[1] == "--random":
        first, last = (int(sys.argv[3]), int(sys.argv[4])) if len(sys.argv) == 5 else (1, 100)
        write_random_nights(Path(sys.argv[2]), range(first, last + 1))
    else:
        main()

#!/usr/bin/env python3
"""Where one ``POST /jobs`` spends its time, in process: the real app (no HTTP server, no network)
on a fresh PostgreSQL database migrated by our migrations, a text2video JSON job at a time.

Prints cProfile's top functions by cumulative time and, LAST, one JSON line: the tree, the
submissions timed and their p50 / p90 / p99 / mean in ms. The calls per submission and the
statements per submission come from the profile, so two trees can be compared on work done, not
only on a noisy clock:

    scripts/profile_submit.py --tree .            # this checkout
    scripts/profile_submit.py --tree ../before    # a worktree of an earlier commit (git worktree add)

Alternate the trees in one sitting, as every before-and-after on the benchmarks page is.

Usage: scripts/profile_submit.py [--tree DIR] [--jobs 400] [--pg postgresql://postgres@127.0.0.1:5432]
       [--database jobservice_profile_submit] [--redis redis://127.0.0.1:6379/12] [--top 40]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

# This checkout's benchmark helpers, before --tree puts the measured code first on the path.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from scripts.bench_lib import QUOTAS_OFF  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", default=str(Path(__file__).resolve().parent.parent))
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432")
    parser.add_argument("--database", default="jobservice_profile_submit")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/12")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    tree = str(Path(args.tree).resolve())
    sys.path.insert(0, tree)

    with psycopg.connect(args.pg + "/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{args.database}"')
        conn.execute(f'CREATE DATABASE "{args.database}"')
    url = args.pg.replace("postgresql://", "postgresql+psycopg://", 1) + "/" + args.database
    os.environ.update(
        {
            "JOBSERVICE_VAR_DIR": tempfile.mkdtemp(prefix="profile-submit-"),
            "JOBSERVICE_DATABASE_URL": url,
            "JOBSERVICE_BROKER_URL": args.redis,
            "JOBSERVICE_LOG_LEVEL": "WARNING",
            **QUOTAS_OFF,
        }
    )
    subprocess.run(
        [sys.executable, "-m", "jobservice.cli.main", "db", "upgrade"],
        check=True,
        capture_output=True,
        env={**os.environ, "PYTHONPATH": tree},
    )

    import jobservice
    from jobservice.http.app import create_app

    code = str(Path(jobservice.__file__).resolve().parent.parent)
    if code != tree:
        raise SystemExit(f"jobservice was imported from {code}, not from --tree {tree}")

    client = create_app().test_client()

    def submit(i: int) -> float:
        started = time.perf_counter()
        body = {"task": "text2video", "model": "reference-t2v", "prompt": f"profile {i}"}
        answer = client.post("/jobs", json=body, headers={"Host": "localhost"})
        if answer.status_code not in (200, 201, 202):
            raise SystemExit(
                f"POST /jobs answered {answer.status_code}: {answer.get_data(as_text=True)[:300]}"
            )
        return (time.perf_counter() - started) * 1000

    for i in range(30):  # warm: the first requests build caches and connections
        submit(i)
    timed = [submit(i) for i in range(30, 30 + args.jobs)]
    profile = cProfile.Profile()
    profile.enable()
    for i in range(args.jobs):
        submit(100_000 + i)
    profile.disable()
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.sort_stats("cumulative").print_stats(args.top)
    print(out.getvalue())
    executes = sum(
        calls
        for (path, _, name), (calls, *_rest) in stats.stats.items()  # type: ignore[attr-defined]
        if name == "execute" and path.endswith("psycopg/cursor.py")
    )
    cuts = statistics.quantiles(timed, n=100)
    figures = {
        "tree": tree,
        "jobs": args.jobs,
        "p50_ms": round(statistics.median(timed), 2),
        "p90_ms": round(cuts[89], 2),
        "p99_ms": round(cuts[98], 2),
        "mean_ms": round(statistics.mean(timed), 2),
        "calls_per_submit": round(stats.total_calls / args.jobs, 1),  # type: ignore[attr-defined]
        "statements_per_submit": round(executes / args.jobs, 2),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

"""Job groups end to end: the real app over HTTP, a real Celery worker process running the CPU
reference text2video model, a manifest submitted through the Python client and through the
``jobservice submit --manifest`` command; the results CSV and the zip of videos checked (each
video an MP4 that ffprobe reads, of the size the row asked for)."""

from __future__ import annotations

import csv
import io
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobservice.client import Client, GroupView
from jobservice.media.probe import probe_media
from tests.browser.server import serve
from tests.integration.conftest import Stack, build_stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SMALL = {"width": 64, "height": 64, "num_frames": 8, "num_inference_steps": 2, "fps": 8}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, str]]:
    """A stack with one CPU worker serving the reference text2video model, served over HTTP."""
    stack = build_stack(tmp_path_factory.mktemp("groups"), stream_max_seconds=5.0, watch_interval_seconds=0.1)
    stack.start_worker("groups", extra_env={"JOBSERVICE_WORKER_MODELS": json.dumps(["reference-t2v"])})
    try:
        with serve(stack.services) as base:
            yield stack, base
    finally:
        stack.close()


def check_outputs(
    zip_path: Path, results: list[dict[str, str]], tmp_path: Path, *, heights: list[int]
) -> None:
    """Every row succeeded with a passed gate, and its video in the zip is a real MP4 of its size."""
    assert [r["row"] for r in results] == [str(n) for n in range(1, len(heights) + 1)]
    assert {(r["status"], r["verdict"]) for r in results} == {("succeeded", "passed")}, results
    assert all(r["video_url"].endswith(f"/jobs/{r['job_id']}/video") for r in results)
    assert all(float(r["card_seconds"]) > 0 for r in results)
    with zipfile.ZipFile(zip_path) as archive:
        assert archive.testzip() is None
        names = archive.namelist()
        assert names == [f"row-{int(r['row']):05d}-{r['job_id']}.mp4" for r in results] + ["results.csv"]
        in_zip = list(csv.DictReader(io.StringIO(archive.read("results.csv").decode())))
        assert [r["job_id"] for r in in_zip] == [r["job_id"] for r in results]
        for name, height in zip(names, heights, strict=False):
            video = tmp_path / name
            video.write_bytes(archive.read(name))
            facts = probe_media(video)
            assert facts.video is not None and (facts.video.width, facts.video.height) == (64, height)


def test_a_group_through_the_python_client(served: tuple[Stack, str], tmp_path: Path) -> None:
    stack, base = served
    heights = [64, 80, 64]
    manifest = tmp_path / "rows.csv"
    header = ["model", "prompt", *SMALL, "seed"]
    lines = [",".join(header)]
    for row, height in enumerate(heights, start=1):
        values = {**SMALL, "height": height}
        lines.append(",".join(["reference-t2v", f"kite {row}", *(str(values[k]) for k in SMALL), str(row)]))
    manifest.write_text("\n".join(lines) + "\n")
    with Client(base, timeout=60) as api:
        group = api.submit_group(manifest, name="client e2e")
        assert isinstance(group, GroupView) and group.progress.total == 3 and group.name == "client e2e"
        seen: list[GroupView] = []
        final = api.wait_group(group.id, timeout=240, on_update=seen.append)
        assert final.status == "finished" and final.progress.succeeded == 3, final
        assert final.progress.fraction == 1.0 and final.finished_at is not None
        assert seen and seen[-1].status == "finished"
        jobs = api.group_jobs(group.id, page_size=2)
        assert [j.group_row for j in jobs] == [1, 2, 3] and {j.status for j in jobs} == {"succeeded"}
        results = api.group_results(group.id)
        zip_path = api.download_group_outputs(group.id, tmp_path / "outputs.zip")
    check_outputs(zip_path, results, tmp_path, heights=heights)
    assert [r["job_id"] for r in results] == [j.id for j in jobs]


def test_a_group_through_the_command_line(served: tuple[Stack, str], tmp_path: Path) -> None:
    stack, base = served
    manifest = tmp_path / "rows.jsonl"
    rows = [{"model": "reference-t2v", "prompt": f"cli {n}", **SMALL, "seed": n} for n in (1, 2)]
    manifest.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    results, outputs = tmp_path / "results.csv", tmp_path / "outputs.zip"
    done = stack.cli(
        "submit",
        "--manifest",
        str(manifest),
        "--wait",
        "--url",
        base,
        "--results",
        str(results),
        "-o",
        str(outputs),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "finished, 2 jobs" in done.stdout and "0 failed" in done.stdout
    check_outputs(outputs, list(csv.DictReader(io.StringIO(results.read_text()))), tmp_path, heights=[64, 64])

    bad = tmp_path / "bad.csv"
    bad.write_text("model,prompt,width\nreference-t2v,ok,64\nreference-t2v,,65\n")
    refused = stack.cli("submit", "--manifest", str(bad), "--url", base)
    assert refused.returncode == 1
    assert "invalid_manifest" in refused.stderr and "row 2 (line 3), column prompt" in refused.stderr, (
        refused.stderr
    )
    listed = stack.cli("group", "list", "--url", base)
    assert listed.returncode == 0 and "finished" in listed.stdout

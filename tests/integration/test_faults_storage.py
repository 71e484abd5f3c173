"""A full object store during an upload: the job fails with ``storage_full``, nothing is left
half-stored, and once there is room again the next job succeeds. The store is a real 1 MiB
tmpfs (skipped where this process may not mount one)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.integration.conftest import RedisServer
from tests.integration.faultkit import fault_stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs, unmounted afterwards."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path, leave: int) -> Path:
    """Fill ``disk`` until about ``leave`` bytes are free."""
    filler = disk / "filler.bin"
    free = shutil.disk_usage(disk).free
    with filler.open("wb") as out:
        out.write(b"\0" * max(0, free - leave))
    return filler


def test_a_full_store_fails_the_job_cleanly_and_the_next_one_succeeds(
    tmp_path: Path, small_disk: Path
) -> None:
    stack = fault_stack(
        tmp_path, RedisServer(tmp_path / "redis"), storage_root=small_disk / "objects", min_free_mb=0
    )
    try:
        stack.start_worker("disk")
        filler = fill(small_disk, leave=8 * 1024)  # the video (about 40 KB) cannot fit
        job_id = stack.submit({"model": "fake-good", "num_frames": 24, "size": 128})
        job = stack.wait(job_id, timeout=90)
        assert job.status == "failed" and job.error_code == "storage_full", (
            job.error_code,
            job.error_message,
        )
        assert "nothing was stored" in (job.error_message or "")
        assert job.output_key is None
        # No temp file and no video left; only whole objects: the failure's small RunReport fitted.
        left = sorted(str(p.relative_to(small_disk)) for p in small_disk.rglob("*") if p.is_file())
        whole = {"filler.bin", f"objects/{job.report_key}", f"objects/jobs/{job_id}/log.txt"}
        assert set(left) <= whole and "filler.bin" in left, f"half-stored or stray files: {left}"
        if job.report_key:
            report = json.loads(stack.services.store.get_bytes(job.report_key))
            assert report["error"]["code"] == "storage_full"
        moves = [(e.from_status, e.to_status) for e in stack.events(job_id)]
        assert moves[-1] == ("running", "failed") and moves.count(("running", "failed")) == 1

        with contextlib.suppress(FileNotFoundError):
            filler.unlink()
        again = stack.wait(stack.submit({"model": "fake-good", "num_frames": 24, "size": 128}), timeout=90)
        assert again.status == "succeeded" and again.output_key is not None
        assert stack.services.store.exists(again.output_key)
    finally:
        stack.close()


def test_an_s3_upload_waits_for_a_store_that_comes_back(tmp_path: Path) -> None:
    """The store is down when the upload starts and up a moment later: the upload is retried."""
    from moto.server import ThreadedMotoServer

    from jobservice.storage import S3Store

    port = free_port()
    store = S3Store(
        "faults", endpoint_url=f"http://127.0.0.1:{port}", access_key_id="k", secret_access_key="s"
    )
    video = tmp_path / "video.mp4"
    video.write_bytes(b"frames" * 50_000)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    starter = threading.Timer(0.6, server.start)
    starter.start()
    try:
        info = store.put_file("jobs/a/output.mp4", video)
        assert info.size == video.stat().st_size
        assert store.get_bytes("jobs/a/output.mp4") == video.read_bytes()
    finally:
        starter.join()
        server.stop()

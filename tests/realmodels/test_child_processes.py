"""Children of the worker (workers/adapters/processes/child.py) and the resident client's protocol."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from tests.standins.deploy import ROOT, STANDINS
from workers.adapters.processes.child import ChildStartError
from workers.adapters.processes.resident_client import ResidentWorker


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its new parent to reap it counts as gone)."""
    try:
        os.kill(pid, 0)
        return "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]
    except (ProcessLookupError, OSError):
        return False


def _gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux only")
def test_a_child_does_not_outlive_its_sigkilled_worker(tmp_path: Path) -> None:
    # The throwaway parent plays a Celery pool child killed by the hard time limit.
    parent_code = textwrap.dedent(
        f"""
        import os, sys, time
        from pathlib import Path
        from workers.adapters.processes.child import ChildProcess

        child = ChildProcess(
            [sys.executable, "-c", "import time; time.sleep(120)"],
            log_path=Path({str(tmp_path / "child.log")!r}),
            env=dict(os.environ),
        )
        print(child.pid, flush=True)
        time.sleep(120)
        """
    )
    with subprocess.Popen(
        [sys.executable, "-c", parent_code],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    ) as parent:
        assert parent.stdout is not None
        child_pid = int(parent.stdout.readline())
        try:
            assert _alive(child_pid)
            parent.kill()
            parent.wait(10)
            assert _gone(child_pid), "the model process must not keep running (and keep the cards)"
        finally:
            parent.kill()
            with contextlib.suppress(ProcessLookupError):
                os.kill(child_pid, signal.SIGKILL)


def _fake_resident(tmp_path: Path) -> ResidentWorker:
    def argv_for(socket_path: str) -> list[str]:
        script = str(STANDINS / "fake_flashtalk_resident.py")
        return [sys.executable, script, "--connect", socket_path, "--repo", str(tmp_path)] + [
            "--ckpt_dir",
            "ckpt",
            "--wav2vec_dir",
            "w2v",
        ]

    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "STANDIN_MODE_FILE": str(tmp_path / "mode.txt"),
        "FLASHTALK_HEIGHT": "64",
        "FLASHTALK_WIDTH": "64",
        "FLASHTALK_FRAME_NUM": "29",
        "FLASHTALK_MOTION_FRAMES_NUM": "1",
        "FLASHTALK_SAMPLE_STEPS": "2",
        "FLASHTALK_COLOR_CORRECTION_STRENGTH": "0.0",
    }
    return ResidentWorker(argv_for, env=env, cwd=tmp_path, log_path=tmp_path / "resident.log", name="fake")


def test_a_stale_answer_is_skipped_by_its_request_id(tmp_path: Path) -> None:
    resident = _fake_resident(tmp_path)
    try:
        resident.wait_ready(timeout=30, check_cancel=lambda: None)
        start = {
            "op": "start",
            "job_id": "abandoned",
            "image": str(ROOT / "samples" / "portrait.png"),
            "audio": str(ROOT / "samples" / "speech.wav"),
            "prompt": "p",
            "seed": 1,
            "out_dir": str(tmp_path),
        }
        resident.send(start)  # its answer is never collected, as after a cancel
        answer = resident.request({"op": "end"}, timeout=30, check_cancel=lambda: None)
        assert answer["event"] == "ended"
    finally:
        resident.shutdown(grace=2)


def test_a_resident_that_cannot_start_leaves_no_temp_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    short = Path(tempfile.mkdtemp(prefix="jst-"))  # Unix socket paths must stay short
    monkeypatch.setattr(tempfile, "tempdir", str(short))
    try:
        with pytest.raises(ChildStartError):
            ResidentWorker(
                lambda socket_path: [str(tmp_path / "no-such-python")],
                env=dict(os.environ),
                cwd=tmp_path,
                log_path=tmp_path / "resident.log",
                name="missing",
            )
        assert list(short.iterdir()) == []
    finally:
        shutil.rmtree(short, ignore_errors=True)

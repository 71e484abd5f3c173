"""Reaping the gate's children: ``wait_exit`` and ``wait_with_rusage`` wake on the exit itself
(a pidfd) and keep ``Popen.wait``'s contract: the exit status, or TimeoutExpired."""

from __future__ import annotations

import subprocess
import sys

import pytest

from workers.video.procs import kill_and_reap, wait_exit, wait_with_rusage


def _child(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code])


def test_wait_exit_returns_the_status_and_marks_the_child_reaped() -> None:
    child = _child("import sys, time; time.sleep(0.2); sys.exit(3)")
    assert wait_exit(child, 30.0) == 3
    assert child.returncode == 3 and child.poll() == 3
    assert wait_exit(child, 0.0) == 3, "an already reaped child answers at once"


def test_wait_exit_raises_timeout_for_a_running_child() -> None:
    child = _child("import time; time.sleep(60)")
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            wait_exit(child, 0.1)
        assert child.poll() is None, "still running: the timeout did not reap or kill it"
    finally:
        kill_and_reap(child)
    assert child.returncode is not None


def test_wait_with_rusage_reports_status_and_cpu_time() -> None:
    child = _child("import sys; sum(range(2_000_000)); sys.exit(5)")
    code, cpu_ms = wait_with_rusage(child, 30.0)
    assert code == 5 and child.returncode == 5
    assert cpu_ms is not None and cpu_ms > 0


def test_wait_with_rusage_raises_timeout_for_a_running_child() -> None:
    child = _child("import time; time.sleep(60)")
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            wait_with_rusage(child, 0.1)
    finally:
        kill_and_reap(child)

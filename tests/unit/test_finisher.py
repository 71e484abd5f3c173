"""The worker's finisher (workers/finisher.py): hand-overs run one at a time, in order, off the
caller's thread; a hand-over waits for the previous one; drain waits for the last."""

from __future__ import annotations

import threading
import time

from workers.finisher import Finisher


def test_a_hand_over_runs_on_another_thread_and_drain_waits_for_it() -> None:
    finisher = Finisher()
    release = threading.Event()
    ran: list[str] = []

    def work() -> None:
        release.wait(5)
        ran.append(threading.current_thread().name)

    finisher.hand_over(work)  # returns at once: the work waits on the event
    assert ran == [] and not finisher.idle
    assert finisher.drain(timeout=0.05) is False
    release.set()
    assert finisher.drain(timeout=5) is True
    assert ran == ["jobservice-finisher"] and finisher.idle


def test_a_second_hand_over_waits_until_the_first_is_done_and_order_is_kept() -> None:
    finisher = Finisher()
    release = threading.Event()
    order: list[str] = []
    finisher.hand_over(lambda: slowly(order, "first", 0, release))
    handed: list[float] = []

    def second() -> None:
        finisher.hand_over(lambda: order.append("second"))
        handed.append(time.monotonic())

    caller = threading.Thread(target=second)
    caller.start()
    time.sleep(0.2)
    assert handed == []  # still waiting: the first job is finishing
    released_at = time.monotonic()
    release.set()
    caller.join(5)
    assert handed and handed[0] >= released_at
    assert finisher.drain(timeout=5) and order == ["first", "second"]


def test_work_that_raises_does_not_stop_the_finisher() -> None:
    finisher = Finisher()
    done: list[int] = []

    def broken() -> None:
        raise RuntimeError("a bug in finishing")

    finisher.hand_over(broken)
    finisher.hand_over(lambda: done.append(1))
    assert finisher.drain(timeout=5) and done == [1]


def test_a_stopping_worker_process_finishes_the_handed_over_job_before_unloading() -> None:
    import os
    from types import SimpleNamespace

    from workers.bootstrap import WorkerProcess

    order: list[str] = []
    finisher = Finisher()
    runtime = SimpleNamespace(
        finisher=finisher, resident=SimpleNamespace(unload_all=lambda: order.append("unloaded"))
    )
    process = WorkerProcess(services=SimpleNamespace())  # type: ignore[arg-type]
    process._runtime, process._runtime_pid = runtime, os.getpid()  # type: ignore[assignment]
    finisher.hand_over(lambda: slowly(order, "finished", 0.3))
    process.on_child_stop()
    assert order == ["finished", "unloaded"]
    finisher.hand_over(lambda: slowly(order, "finished again", 0.2))
    process.on_shutdown()  # the solo pool's process: drained there too
    assert order[-1] == "finished again"


def slowly(out: list[str], what: str, seconds: float, after: threading.Event | None = None) -> None:
    """Append ``what`` to ``out`` after ``seconds`` (and ``after``, when given, is set)."""
    if after is not None:
        after.wait(5)
    time.sleep(seconds)
    out.append(what)


def test_the_finisher_says_how_much_finishing_overlapped_a_window() -> None:
    finisher = Finisher()
    release = threading.Event()
    before = time.perf_counter()
    finisher.hand_over(lambda: release.wait(5))
    time.sleep(0.05)
    jobs, seconds = finisher.busy_between(before, time.perf_counter())
    assert jobs == 1 and 0.0 < seconds <= time.perf_counter() - before, "a running hand-over counts so far"
    release.set()
    assert finisher.drain(timeout=5)
    after = time.perf_counter()
    time.sleep(0.01)
    assert finisher.busy_between(after, time.perf_counter()) == (0, 0.0), "nothing finished in this window"
    jobs, seconds = finisher.busy_between(before - 10, after)
    assert jobs == 1 and 0.04 < seconds < after - before + 1e-6


def test_a_host_window_reads_cpu_and_the_finishing_beside_it() -> None:
    """The window's figures: own CPU from a busy loop here, and the finisher's overlap."""
    from workers.host_activity import HostWindow, host_cpu_seconds

    assert host_cpu_seconds() is not None, "Linux: /proc/stat is readable"
    finisher = Finisher()
    release = threading.Event()
    window = HostWindow(finisher, undisturbed=False)
    finisher.hand_over(lambda: release.wait(5))
    spin_until = time.perf_counter() + 0.3
    while time.perf_counter() < spin_until:  # this thread keeps one core busy
        pass
    release.set()
    finisher.drain(timeout=5)
    activity = window.close()
    assert activity.window_ms >= 300 and activity.cpu_count >= 1
    assert activity.own_cores > 0.5, activity
    assert activity.busy_cores is not None and activity.busy_cores >= activity.own_cores - 0.2, activity
    assert activity.finishing_jobs == 1 and activity.finishing_ms > 0 and activity.disturbed
    quiet = HostWindow(finisher, undisturbed=True, waited_ms=12.5).close()
    assert quiet.finishing_jobs == 0 and quiet.undisturbed and quiet.waited_ms == 12.5

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
    finisher.hand_over(lambda: (release.wait(5), order.append("first")))
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

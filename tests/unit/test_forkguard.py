"""A fork waits for the parent's database work, and the child starts with a free guard."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from jobservice.db.engine import Database
from workers import forkguard


def test_a_fork_waits_for_a_guarded_block_and_the_child_can_use_the_guard(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'db.sqlite'}")
    forkguard.install(db)
    inside = threading.Event()
    marks: list[str] = []

    def parent_work() -> None:
        with forkguard.guarded():
            inside.set()
            time.sleep(0.3)
            marks.append("work done")

    worker = threading.Thread(target=parent_work)
    worker.start()
    inside.wait(5)
    pid = os.fork()
    if pid == 0:  # the child: its guard must be free (the forking thread's copy would deadlock)
        try:
            with forkguard.guarded():
                os._exit(0)
        finally:
            os._exit(1)
    marks.append("forked")
    _, status = os.waitpid(pid, 0)
    worker.join()
    assert marks == ["work done", "forked"], "the fork did not wait for the guarded block"
    assert os.waitstatus_to_exitcode(status) == 0
    db.dispose()

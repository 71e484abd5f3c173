"""Child-process plumbing shared by the streaming encoder and the file gate.

Every pipe of an ffmpeg child that we do not feed is drained by a thread, so a chatty child can
never fill a pipe and stall (the classic deadlock of reading one pipe while the child blocks on
the other). Children are reaped with ``os.wait4`` so the decode pass's CPU time is known exactly,
even when several children run at once (RUSAGE_CHILDREN could not tell them apart).
"""

from __future__ import annotations

import os
import select
import subprocess
import threading
import time
from collections import deque
from typing import IO


class PipeReader:
    """Drains a child's pipe on a daemon thread; keeps everything, or only the last ``tail_bytes``."""

    def __init__(self, pipe: IO[bytes], *, tail_bytes: int | None = None, name: str = "pipe-reader") -> None:
        self._pipe = pipe
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self._tail = tail_bytes
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            # read1 returns whatever is there, so the text is current while the child runs.
            read = getattr(self._pipe, "read1", self._pipe.read)
            while chunk := read(65536):
                with self._lock:
                    self._chunks.append(chunk)
                    self._size += len(chunk)
                    while self._tail is not None and self._size - len(self._chunks[0]) >= self._tail:
                        self._size -= len(self._chunks.popleft())
        except (OSError, ValueError):
            pass  # the pipe was closed under us by abort(); what we have is all there is
        finally:
            try:
                self._pipe.close()
            except OSError:
                pass

    def join(self, timeout: float | None = None) -> bool:
        """Wait for end of file; True when the child closed its end."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def text(self) -> str:
        """What was read so far, decoded leniently (ffmpeg prints file names in any encoding)."""
        with self._lock:
            data = b"".join(self._chunks)
        if self._tail is not None and len(data) > self._tail:
            data = data[-self._tail :]
        return data.decode("utf-8", "replace")


def _pidfd(proc: subprocess.Popen[bytes]) -> int | None:
    """A descriptor that becomes readable when ``proc`` exits (Linux 5.3+), or None."""
    try:
        return os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # no pidfd here, or the child is already reaped
        return None


def wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> int:
    """``proc.wait(timeout)`` that returns the moment the child exits.

    ``Popen.wait`` with a timeout polls with sleeps growing to 50 ms, so on the job's tail an
    encoder that exited after 35 ms was noticed at 63 ms; a pidfd wakes us at the exit itself.
    Raises subprocess.TimeoutExpired when it is still running at the deadline.
    """
    if proc.returncode is not None:
        return proc.returncode
    deadline = time.monotonic() + timeout
    fd = _pidfd(proc)
    if fd is not None:
        try:
            select.select([fd], [], [], max(0.0, timeout))
        finally:
            os.close(fd)
    return proc.wait(max(0.0, deadline - time.monotonic()))


def wait_with_rusage(proc: subprocess.Popen[bytes], timeout: float) -> tuple[int, float | None]:
    """Reap ``proc`` within ``timeout`` s; returns (exit code, user+sys CPU ms or None).

    Raises subprocess.TimeoutExpired when it is still running at the deadline.
    """
    if proc.returncode is not None or not hasattr(os, "wait4"):
        return proc.wait(timeout), None
    deadline = time.monotonic() + timeout
    delay = 0.0002
    fd = _pidfd(proc)
    try:
        return _reap_with_rusage(proc, timeout, deadline, delay, fd)
    finally:
        if fd is not None:
            os.close(fd)


def _reap_with_rusage(
    proc: subprocess.Popen[bytes], timeout: float, deadline: float, delay: float, fd: int | None
) -> tuple[int, float | None]:
    while True:
        try:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere (Popen's own bookkeeping)
            return proc.wait(timeout), None
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, (usage.ru_utime + usage.ru_stime) * 1000.0
        if time.monotonic() >= deadline:
            raise subprocess.TimeoutExpired(proc.args, timeout)
        if fd is not None:  # wakes at the exit itself
            select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            continue
        # Short sleeps at first: the callers are on the job's critical tail and the child is
        # usually already exiting when we get here.
        time.sleep(delay)
        delay = min(delay * 2, 0.005)


def kill_and_reap(proc: subprocess.Popen[bytes] | None, timeout: float = 5.0) -> None:
    """SIGKILL a child if it still runs, reap it and close our end of its stdin (no zombie, no leak)."""
    if proc is None:
        return
    if proc.returncode is None:
        try:
            proc.kill()
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        pass  # unkillable (D state); nothing more we can do without blocking the worker
    if proc.stdin is not None:
        try:
            proc.stdin.close()
        except OSError:
            pass  # a broken pipe on the final flush: the child is gone anyway

"""Child processes of external model systems (generate_video.py, omnirt, a resident worker).

A child is untrusted (reference/seed-systems.md 6.2): it runs in its own session, so it and
everything it starts (torchrun's ranks, ffmpeg) form one process group that we can stop as a
whole; its stdout and stderr go straight to a log file (never a pipe we might fail to drain);
while it runs we poll the job's cancel/timeout flag; on cancel, timeout or any error we send
SIGTERM to the group, wait a grace period, then SIGKILL it, and reap.

Its own session also means no signal of ours reaches it when the worker process itself is
SIGKILLed (Celery's hard time limit, a crash). So on Linux the kernel is asked to SIGTERM the
child when the thread that started it dies (PR_SET_PDEATHSIG); torchrun passes that on to its
ranks. The request is not inherited: what the child starts on its own (OmniRT's ``bash -lc``
around a script) is not reached. Adapters start children on the task's own thread, which lives
as long as the worker process.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

T = TypeVar("T")
ENV_SCRIPT_FAILED = 97  # our exit status when sourcing the environment script fails
_PR_SET_PDEATHSIG = 1


def _load_prctl() -> Any:
    """libc's prctl on Linux, else None (resolved here, not in the forked child)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl  # the process's own symbols include libc's
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()


def _die_with_parent(parent_pid: int) -> Callable[[], None] | None:
    """A preexec_fn asking the kernel to SIGTERM the child when its parent dies (Linux; else None)."""
    prctl = _PRCTL
    if prctl is None:
        return None

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before the request was in place
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def append_line(log_path: Path, text: str) -> None:
    """Append one line of ours (not the child's) to a job's log."""
    with log_path.open("a", encoding="utf-8") as out:
        out.write(text + "\n")


def with_env_script(argv: Sequence[str], env_script: Path | None) -> list[str]:
    """``argv`` run after ``source <env_script>`` in bash (Ascend's set_env.sh), or as is.

    ``set +u`` because the CANN scripts read unset variables; ``exec`` so the model process
    replaces bash (signals reach it directly, and the exit status is the model's own).
    """
    if env_script is None:
        return list(argv)
    script = f'set +u; source "$0" || exit {ENV_SCRIPT_FAILED}; exec "$@"'
    return ["bash", "-c", script, str(env_script), *argv]


def wait_for_exit(process: subprocess.Popen[Any], seconds: float) -> None:
    """Block until ``process`` exits or ``seconds`` pass, waking the moment it exits.

    ``Popen.wait(timeout)`` polls with sleeps that grow to 50 ms, so a finished job's child was
    noticed 25 ms late on average; a pidfd (Linux 5.3+) becomes readable at the exit itself.
    """
    try:
        fd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):  # no pidfd here, or the child is already reaped
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(seconds)
        return
    try:
        select.select([fd], [], [], seconds)
    finally:
        os.close(fd)


class ChildProcess:
    """One external child in its own process group, logging to ``log_path``."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        log_path: Path,
        env: dict[str, str],
        cwd: Path | None = None,
        name: str = "child",
        stdin: int | IO[Any] | None = subprocess.DEVNULL,
        stdout_path: Path | None = None,
    ) -> None:
        """Start it; stdout goes to ``stdout_path`` when given (a machine-read answer), else to the log."""
        self.argv = list(argv)
        self.name = name
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as out, (stdout_path or log_path).open("ab") as answer:
            out.write(f"$ {' '.join(self.argv)}\n".encode())
            out.flush()
            try:
                self.process = subprocess.Popen(
                    self.argv,
                    cwd=cwd,
                    env=env,
                    stdin=stdin,
                    stdout=answer if stdout_path is not None else out,
                    stderr=out if stdout_path is not None else subprocess.STDOUT,
                    start_new_session=True,  # its own group: we stop torchrun's ranks with it
                    # Only prctl and getppid run between fork and exec (safe with our other threads).
                    preexec_fn=_die_with_parent(os.getpid()),
                )
            except OSError as exc:
                raise ChildStartError(f"cannot start {name}: {exc}") from exc

    @property
    def pid(self) -> int:
        """The child's pid (also its process group id)."""
        return self.process.pid

    def poll(self) -> int | None:
        """The exit status, or None while it runs."""
        return self.process.poll()

    def wait(
        self,
        *,
        check_cancel: Callable[[], None],
        poll_seconds: float = 0.2,
        on_poll: Callable[[], None] | None = None,
    ) -> int:
        """Wait for the child to exit, calling ``check_cancel`` (and ``on_poll``) between polls.

        Whatever ``check_cancel`` raises (cancel, timeout, lost lease) stops the group first.
        """
        try:
            while True:
                code = self.process.poll()
                if code is not None:
                    return code
                check_cancel()
                if on_poll is not None:
                    on_poll()
                # Wake as soon as the child exits (not at the next poll): the run's timings would
                # otherwise be rounded up to ``poll_seconds``, which hides a 5 % change of a short run.
                wait_for_exit(self.process, poll_seconds)
        except BaseException:
            self.stop()
            raise

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM the whole group, then SIGKILL it after ``grace`` seconds; reap the child."""
        if self.process.poll() is None:
            _signal_group(self.pid, signal.SIGTERM)
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                pass
        # Ranks or grandchildren may outlive the leader: the group goes in any case.
        _signal_group(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(5.0)

    def log_tail(self, max_bytes: int = 6000) -> str:
        """The end of the child's log (for error messages)."""
        return tail_text(self.log_path, max_bytes)


class ChildStartError(RuntimeError):
    """The child could not be started at all (missing executable, bad cwd)."""


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def tail_text(path: Path, max_bytes: int = 6000) -> str:
    """The last ``max_bytes`` of a text file, decoded leniently ("" when it does not exist)."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def last_lines(text: str, count: int = 12) -> str:
    """The last ``count`` non-empty lines of ``text``, joined by " | " for one-line messages."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(lines[-count:])


def run_abandonable(
    fn: Callable[[], T],
    *,
    check_cancel: Callable[[], None],
    poll_seconds: float = 0.2,
    on_abandon: Callable[[threading.Thread], None] | None = None,
) -> T:
    """Run a blocking call (an HTTP request that cannot be interrupted) on a thread and wait for it,
    polling ``check_cancel``. If that raises, the call is abandoned (it finishes on its own) and
    ``on_abandon`` gets the thread, e.g. to keep an instance lease until the call really ends."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="abandonable-call", daemon=True)
    thread.start()
    while thread.is_alive():
        try:
            check_cancel()
        except BaseException:
            if on_abandon is not None:
                on_abandon(thread)
            raise
        thread.join(poll_seconds)
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value

"""The client side of a resident model worker: a long-lived child that keeps a model loaded and
answers one request at a time over a small line-delimited JSON protocol on a Unix socket.

Why a socket and not stdin/stdout: under torchrun every rank shares stdout, so a protocol there
would be corrupted by the other ranks' prints. The worker (rank 0 only) connects back to a socket
we listen on; everything any rank prints goes to the resident's log file.

Protocol (``docs`` in workers/adapters/flashtalk_resident.py, which implements it for FlashTalk):
each message is one JSON object per line. The resident first sends ``{"event": "ready", ...}``
(or ``{"event": "error", ...}`` and exits). Then each request ``{"op": ...}`` gets exactly one
answer: the op's event, or ``{"event": "error", "code": ..., "message": ...}``.
"""

from __future__ import annotations

import contextlib
import json
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workers.adapters.base import AdapterError
from workers.adapters.child import ChildProcess, last_lines
from workers.adapters.memory import is_out_of_memory


class ResidentGone(AdapterError):
    """The resident exited, hung or broke the protocol; it must be discarded."""


class ResidentWorker:
    """One resident child and its connection."""

    def __init__(
        self,
        argv_for: Callable[[str], list[str]],
        *,
        env: dict[str, str],
        cwd: Path,
        log_path: Path,
        name: str,
    ) -> None:
        """Start the child; ``argv_for(socket_path)`` builds its command line."""
        self.name = name
        self.log_path = log_path
        # Unix socket paths are limited to ~100 bytes: keep it in a short private temp folder.
        self._dir = Path(tempfile.mkdtemp(prefix="jsres-"))
        self.socket_path = str(self._dir / "s")
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.socket_path)
        self._server.listen(1)
        self._server.settimeout(0.25)
        self._conn: socket.socket | None = None
        self._buffer = b""
        self.child = ChildProcess(argv_for(self.socket_path), log_path=log_path, env=env, cwd=cwd, name=name)
        self.ready: dict[str, Any] = {}
        self.started_at = time.time()
        self.jobs_served = 0

    # --- lifecycle -------------------------------------------------------------------------
    def wait_ready(self, *, timeout: float, check_cancel: Callable[[], None]) -> dict[str, Any]:
        """Wait for the connection and the ``ready`` event (the model loading)."""
        deadline = time.monotonic() + timeout
        while self._conn is None:
            self._alive_or_raise("loading")
            if time.monotonic() > deadline:
                raise ResidentGone("model_load_failed", f"{self.name} did not connect within {timeout:g} s.")
            check_cancel()
            with contextlib.suppress(TimeoutError):
                conn, _ = self._server.accept()
                conn.settimeout(0.25)
                self._conn = conn
        message = self._read(deadline=deadline, check_cancel=check_cancel, during="loading")
        if message.get("event") != "ready":
            raise self.error_of(message, default_code="model_load_failed")
        self.ready = message
        return message

    def request(
        self, message: dict[str, Any], *, timeout: float, check_cancel: Callable[[], None]
    ) -> dict[str, Any]:
        """Send one request and return its answer; an ``error`` answer raises AdapterError."""
        self.send(message)
        answer = self._read(
            deadline=time.monotonic() + timeout, check_cancel=check_cancel, during=message["op"]
        )
        if answer.get("event") == "error":
            raise self.error_of(answer, default_code="model_error")
        return answer

    def send(self, message: dict[str, Any]) -> None:
        """Send one request without waiting."""
        if self._conn is None:
            raise ResidentGone("model_crashed", f"{self.name} is not connected.")
        try:
            self._conn.sendall(json.dumps(message).encode() + b"\n")
        except OSError as exc:
            self._alive_or_raise(str(message.get("op")))
            raise ResidentGone("model_crashed", f"{self.name} closed its connection: {exc}") from exc

    def read(self, *, timeout: float, check_cancel: Callable[[], None], during: str) -> dict[str, Any]:
        """The next message (used to collect an answer after a cancel)."""
        return self._read(deadline=time.monotonic() + timeout, check_cancel=check_cancel, during=during)

    def alive(self) -> bool:
        """Whether the child still runs and is connected."""
        return self.child.poll() is None

    def shutdown(self, grace: float = 10.0) -> None:
        """Ask the resident to exit, then stop its process group whatever happened."""
        if self._conn is not None and self.alive():
            with contextlib.suppress(OSError):
                self._conn.sendall(b'{"op": "shutdown"}\n')
            deadline = time.monotonic() + grace
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.05)
        self.child.stop()
        for sock in (self._conn, self._server):
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.close()
        with contextlib.suppress(OSError):
            Path(self.socket_path).unlink()
            self._dir.rmdir()

    # --- internals ---------------------------------------------------------------------------
    def _read(self, *, deadline: float, check_cancel: Callable[[], None], during: str) -> dict[str, Any]:
        assert self._conn is not None
        while b"\n" not in self._buffer:
            self._alive_or_raise(during)
            if time.monotonic() > deadline:
                raise ResidentGone(
                    "model_hung", f"{self.name} gave no answer ({during}) within its time limit."
                )
            check_cancel()
            try:
                data = self._conn.recv(65536)
            except TimeoutError:
                continue
            except OSError as exc:
                raise ResidentGone(
                    "model_crashed", f"{self.name} connection failed ({during}): {exc}"
                ) from exc
            if not data:
                # Give the child (torchrun stops the other ranks first) a moment to exit, so the
                # message carries its status and its log's last lines.
                gone_by = time.monotonic() + 3.0
                while self.child.poll() is None and time.monotonic() < gone_by:
                    time.sleep(0.05)
                self._alive_or_raise(during)
                raise ResidentGone("model_crashed", f"{self.name} closed its connection ({during}).")
            self._buffer += data
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            message = json.loads(line)
        except ValueError as exc:
            raise ResidentGone(
                "model_crashed", f"{self.name} sent something that is not JSON: {line[:200]!r}"
            ) from exc
        if not isinstance(message, dict):
            raise ResidentGone("model_crashed", f"{self.name} sent {type(message).__name__}, not an object.")
        return message

    def _alive_or_raise(self, during: str) -> None:
        code = self.child.poll()
        if code is None:
            return
        tail = self.child.log_tail()
        if is_out_of_memory(tail):
            raise ResidentGone(
                "out_of_memory", f"{self.name} ran out of device memory ({during}): {last_lines(tail)}"
            )
        raise ResidentGone(
            "model_crashed", f"{self.name} exited with status {code} ({during}): {last_lines(tail)}"
        )

    def error_of(self, message: dict[str, Any], *, default_code: str) -> AdapterError:
        """The job error an ``error`` message (or an unexpected one) stands for."""
        code = str(message.get("code") or default_code)
        text = str(message.get("message") or message)
        if message.get("event") != "error":
            return ResidentGone(
                "model_crashed", f"{self.name} answered {message.get('event')!r} unexpectedly."
            )
        if code != "out_of_memory" and is_out_of_memory(text):
            code = "out_of_memory"
        return AdapterError(code, f"{self.name}: {text}")

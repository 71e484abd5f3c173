"""The client side of a resident model worker: a long-lived child that keeps a model loaded and
answers one request at a time over a small line-delimited JSON protocol on a Unix socket.

Why a socket and not stdin/stdout: under torchrun every rank shares stdout, so a protocol there
would be corrupted by the other ranks' prints. The worker (rank 0 only) connects back to a socket
we listen on; everything any rank prints goes to the resident's log file.

Protocol (``docs`` in workers/adapters/soulx/flashtalk_resident.py, which implements it for FlashTalk):
each message is one JSON object per line. The resident first sends ``{"event": "ready", ...}``
(or ``{"event": "error", ...}`` and exits). Then each request ``{"op": ..., "id": n}`` gets exactly
one answer carrying the same ``id``: the op's event, or ``{"event": "error", "code": ...,
"message": ...}``. Ids increase, so an answer with a smaller id than the one awaited belongs to a
request whose caller gave up (a cancel with the request in flight) and is skipped.

A caller that gives up on a request must still bring the resident back in step before reusing
it: ``drain`` collects the abandoned answer within a grace period; if that fails the resident
must be shut down.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workers.adapters.base import AdapterError
from workers.adapters.processes.child import ChildProcess, last_lines
from workers.adapters.processes.memory import is_out_of_memory

log = logging.getLogger(__name__)


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
        self.jobs_served = 0
        self._conn: socket.socket | None = None
        self._buffer = b""
        self._last_id = 0
        self._awaiting: int | None = None  # a request sent whose answer was not read yet
        # Unix socket paths are limited to ~100 bytes: keep it in a short private temp folder.
        self._dir = Path(tempfile.mkdtemp(prefix="jsres-"))
        self.socket_path = str(self._dir / "s")
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._server.bind(self.socket_path)
            self._server.listen(1)
            self._server.settimeout(0.25)
            self.child = ChildProcess(
                argv_for(self.socket_path), log_path=log_path, env=env, cwd=cwd, name=name
            )
        except BaseException:
            self._close()
            raise

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
        return message

    def request(
        self,
        message: dict[str, Any],
        *,
        timeout: float,
        check_cancel: Callable[[], None],
        during: str | None = None,
    ) -> dict[str, Any]:
        """Send one request and return its answer; an ``error`` answer raises AdapterError.

        If this raises before the answer arrived (cancel, timeout), the request stays in flight:
        ``drain`` it, or shut the resident down, before sending it anything else that matters.
        """
        request_id = self.send(message)
        answer = self.receive(
            request_id, timeout=timeout, check_cancel=check_cancel, during=during or str(message["op"])
        )
        if answer.get("event") == "error":
            raise self.error_of(answer, default_code="model_error")
        return answer

    def send(self, message: dict[str, Any]) -> int:
        """Send one request without waiting; returns the id its answer will carry."""
        if self._conn is None:
            raise ResidentGone("model_crashed", f"{self.name} is not connected.")
        self._last_id += 1
        request_id = self._last_id
        try:
            self._conn.sendall(json.dumps({**message, "id": request_id}).encode() + b"\n")
        except OSError as exc:
            self._alive_or_raise(str(message.get("op")))
            raise ResidentGone("model_crashed", f"{self.name} closed its connection: {exc}") from exc
        self._awaiting = request_id
        return request_id

    def receive(
        self, request_id: int, *, timeout: float, check_cancel: Callable[[], None], during: str
    ) -> dict[str, Any]:
        """The answer to request ``request_id``, skipping older requests' answers."""
        deadline = time.monotonic() + timeout
        while True:
            answer = self._read(deadline=deadline, check_cancel=check_cancel, during=during)
            answer_id = answer.get("id")
            if answer_id == request_id:
                if self._awaiting == request_id:
                    self._awaiting = None
                return answer
            if isinstance(answer_id, int) and not isinstance(answer_id, bool) and answer_id < request_id:
                log.warning(
                    "%s: skipping the stale answer %.200r (awaiting %d)", self.name, answer, request_id
                )
                continue
            raise ResidentGone(
                "model_crashed",
                f"{self.name} answered {answer!r:.200} while request {request_id} was awaited.",
            )

    def drain(self, *, timeout: float) -> None:
        """Collect the answer of an abandoned request (raises ResidentGone when it does not come)."""
        if self._awaiting is not None:
            self.receive(
                self._awaiting, timeout=timeout, check_cancel=lambda: None, during="a drained request"
            )

    def alive(self) -> bool:
        """Whether the child still runs and is connected."""
        return self.child.poll() is None

    def shutdown(self, grace: float = 10.0) -> None:
        """Ask the resident to exit, then stop its process group whatever happened."""
        if self._conn is not None and self.alive():
            with contextlib.suppress(OSError):
                self._conn.sendall(b'{"op": "shutdown"}\n')  # no answer, so no id to pair
            deadline = time.monotonic() + grace
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.05)
        self.child.stop()
        self._close()

    def _close(self) -> None:
        """Close both sockets and remove the private folder (also after a failed start)."""
        for sock in (self._conn, self._server):
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.close()
        shutil.rmtree(self._dir, ignore_errors=True)

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

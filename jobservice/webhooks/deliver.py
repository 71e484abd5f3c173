"""One webhook POST: to the address that was checked, no redirects, short timeouts, bounded reads.

The connection goes to the resolved address (``targets.resolve_target``) while the Host header,
TLS SNI and certificate check use the URL's host name, so DNS rebinding cannot move the request
to another address after the check. A 2xx is delivered; timeouts, connection errors, 5xx and 429
are retried; any other status (3xx included: redirects are not followed) is final.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from jobservice.webhooks.targets import TargetRefused, WebhookTarget, parse_target, resolve_target

CONNECT_TIMEOUT = 5.0
MAX_RESPONSE_BYTES = 4096
USER_AGENT = "jobservice-webhooks/1"


@dataclass(frozen=True)
class Outcome:
    """What one attempt gave: delivered, worth retrying, or final."""

    delivered: bool
    retry: bool
    status_code: int | None = None
    error: str | None = None


def retryable_status(code: int) -> bool:
    """Whether a failed attempt answered with ``code`` is tried again (5xx, 408 and 429)."""
    return code >= 500 or code in (408, 429)


class _PinnedHTTP(http.client.HTTPConnection):
    """Plain HTTP to a fixed address, the Host header naming the URL's host."""

    def __init__(self, target: WebhookTarget, address: str, *, read_timeout: float) -> None:
        super().__init__(target.host, target.port, timeout=min(CONNECT_TIMEOUT, read_timeout))
        self._address = address
        self._read_timeout = read_timeout

    def _open(self) -> socket.socket:
        sock = socket.create_connection((self._address, self.port), timeout=self.timeout)
        sock.settimeout(self._read_timeout)
        return sock

    def connect(self) -> None:
        """Connect to the checked address, not to whatever the name resolves to now."""
        self.sock = self._open()


class _PinnedHTTPS(_PinnedHTTP):
    """HTTPS to a fixed address; SNI and certificate checks use the URL's host name."""

    context = ssl.create_default_context()

    def connect(self) -> None:
        """Connect to the checked address, then TLS with the host name."""
        self.sock = self.context.wrap_socket(self._open(), server_hostname=self.host)


def _send(conn: _PinnedHTTP, target: WebhookTarget, body: bytes, headers: dict[str, str]) -> int:
    conn.putrequest("POST", target.path, skip_host=True, skip_accept_encoding=True)
    for name, value in {
        "Host": target.host_header,
        "User-Agent": USER_AGENT,
        "Content-Length": str(len(body)),
        **headers,
    }.items():
        conn.putheader(name, value)
    conn.endheaders(body)
    response = conn.getresponse()
    response.read(MAX_RESPONSE_BYTES)
    return int(response.status)


def _abort(conn: _PinnedHTTP, fired: threading.Event) -> None:
    """Cut a request that outlived its whole budget (a receiver that drips its answer)."""
    fired.set()
    sock = conn.sock
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def post(
    url: str,
    *,
    body: bytes,
    headers: dict[str, str],
    allowed: Iterable[str],
    read_timeout: float = 10.0,
) -> Outcome:
    """POST ``body`` to ``url`` once and say how it went (never raises for network trouble).

    Each socket operation waits at most ``read_timeout`` (connecting: ``CONNECT_TIMEOUT``), and the
    whole request at most their sum plus as much again.
    """
    allowed = list(allowed)
    try:
        target = parse_target(url, allowed)
        address = resolve_target(target, allowed)
    except TargetRefused as exc:
        return Outcome(delivered=False, retry=False, error=f"{exc.code}: {exc.message}")
    except UnicodeError as exc:  # a name IDNA cannot encode: it will never resolve
        return Outcome(delivered=False, retry=False, error=f"invalid_webhook: {exc}")
    except OSError as exc:  # the name does not resolve (now): DNS may come back
        return Outcome(delivered=False, retry=True, error=f"resolve: {exc}")
    kind = _PinnedHTTPS if target.scheme == "https" else _PinnedHTTP
    conn = kind(target, address, read_timeout=read_timeout)
    budget = 2 * (CONNECT_TIMEOUT + read_timeout)
    fired = threading.Event()
    watchdog = threading.Timer(budget, _abort, args=(conn, fired))
    watchdog.daemon = True
    watchdog.start()
    try:
        code = _send(conn, target, body, headers)
    except (OSError, http.client.HTTPException) as exc:  # timeouts, refusals, resets, TLS, bad replies
        return Outcome(delivered=False, retry=True, error=f"{type(exc).__name__}: {exc}"[:500])
    finally:
        watchdog.cancel()
        conn.close()
    if fired.is_set():  # whatever was read is cut short: not an answer
        return Outcome(delivered=False, retry=True, error=f"no complete answer within {budget:g} s")
    if 200 <= code < 300:
        return Outcome(delivered=True, retry=False, status_code=code)
    return Outcome(delivered=False, retry=retryable_status(code), status_code=code, error=f"HTTP {code}")

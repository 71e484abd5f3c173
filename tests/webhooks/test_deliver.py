"""One POST against a real local receiver: what counts as delivered, retried, or final."""

from __future__ import annotations

import pytest

from jobservice.webhooks.deliver import MAX_RESPONSE_BYTES, post
from tests.conftest import free_port
from tests.webhooks.receiver import Receiver

ALLOWED = ["127.0.0.1"]
HEADERS = {"webhook-id": "msg_t", "content-type": "application/json"}


@pytest.mark.parametrize(
    ("status", "delivered", "retry"),
    [
        (200, True, False),
        (204, True, False),
        (503, False, True),
        (500, False, True),
        (429, False, True),
        (404, False, False),
        (400, False, False),
        (410, False, False),
        (302, False, False),
    ],
)
def test_status_codes(receiver: Receiver, status: int, delivered: bool, retry: bool) -> None:
    receiver.status = status
    receiver.extra_headers = {"Location": "http://127.0.0.1:1/elsewhere"} if status == 302 else {}
    outcome = post(receiver.url, body=b'{"a":1}', headers=HEADERS, allowed=ALLOWED)
    assert (outcome.delivered, outcome.retry, outcome.status_code) == (delivered, retry, status)
    assert receiver.attempts == 1  # one request: a redirect is not followed


def test_the_request_carries_the_body_host_and_headers(receiver: Receiver) -> None:
    outcome = post(receiver.url + "?k=v", body=b'{"a":1}', headers=HEADERS, allowed=ALLOWED)
    assert outcome.delivered
    got = receiver.received[0]
    assert got.path == "/hook?k=v" and got.body == '{"a":1}'
    assert got.headers["host"] == f"127.0.0.1:{receiver.port}" and got.headers["webhook-id"] == "msg_t"


def test_a_huge_answer_is_read_only_in_part(receiver: Receiver) -> None:
    receiver.reply = b"x" * (50 * MAX_RESPONSE_BYTES)
    assert post(receiver.url, body=b"{}", headers=HEADERS, allowed=ALLOWED).delivered


def test_refused_connections_and_timeouts_are_retried(receiver: Receiver) -> None:
    down = post(f"http://127.0.0.1:{free_port()}/h", body=b"{}", headers=HEADERS, allowed=ALLOWED)
    assert (down.delivered, down.retry) == (False, True) and "Refused" in (down.error or "")
    receiver.hang = 2.0
    slow = post(receiver.url, body=b"{}", headers=HEADERS, allowed=ALLOWED, read_timeout=0.5)
    assert (slow.delivered, slow.retry) == (False, True) and "timed out" in (slow.error or "")


def test_a_forbidden_target_is_final_and_never_contacted(receiver: Receiver) -> None:
    outcome = post(receiver.url.replace("127.0.0.1", "localhost"), body=b"{}", headers=HEADERS, allowed=[])
    assert (outcome.delivered, outcome.retry) == (False, False)
    assert "webhook_not_https" in (outcome.error or "") and receiver.attempts == 0


def test_a_receiver_that_drips_its_answer_is_cut_off(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket
    import threading
    import time

    from jobservice.webhooks import deliver

    monkeypatch.setattr(deliver, "CONNECT_TIMEOUT", 0.2)  # whole budget: 2 * (0.2 + 0.5) s
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def drip() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\n")
            for _ in range(100):  # a byte every 0.2 s: no single read ever times out
                try:
                    conn.sendall(b"X")
                except OSError:
                    return
                time.sleep(0.2)

    threading.Thread(target=drip, daemon=True).start()
    started = time.monotonic()
    outcome = post(
        f"http://127.0.0.1:{port}/h", body=b"{}", headers=HEADERS, allowed=ALLOWED, read_timeout=0.5
    )
    assert (outcome.delivered, outcome.retry) == (False, True)
    assert time.monotonic() - started < 5
    server.close()

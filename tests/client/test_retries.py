"""Retries against a real local HTTP server: 503/429 with Retry-After, dropped connections, and the
Idempotency-Key that makes a repeated submission safe. Sleeps are recorded, not slept."""

from __future__ import annotations

import io
import random
import time
import uuid
from email.utils import formatdate
from pathlib import Path

import pytest
import requests

from jobservice.client import ApiError, Backoff, Client
from jobservice.client.http import retry_after_seconds
from tests.client.fake_api import DROP, Reply, Seen, error_reply, fake_api, job, json_reply
from tests.conftest import free_port


def client(url: str, sleeps: list[float], retries: int = 4) -> Client:
    return Client(url, "k-test", retries=retries, sleep=sleeps.append, backoff=Backoff(rng=random.Random(1)))


def test_503_then_202_waits_retry_after_and_reuses_the_idempotency_key() -> None:
    def respond(seen: Seen, index: int) -> Reply:
        if index == 0:
            return error_reply(503, "storage_unavailable", "try again", headers={"Retry-After": "2"})
        return json_reply(job(), 202)

    sleeps: list[float] = []
    with fake_api(respond) as api:
        view = client(api.url, sleeps).submit_text2video(prompt="green hills", width=64)
    assert view.id == "j1" and view.status == "queued"
    assert api.paths() == ["POST /jobs", "POST /jobs"]
    keys = {s.headers["Idempotency-Key"] for s in api.seen}
    assert len(keys) == 1 and uuid.UUID(keys.pop()).version == 4
    assert all(s.headers["Authorization"] == "Bearer k-test" for s in api.seen)
    assert len(sleeps) == 1 and 2.0 <= sleeps[0] <= 2.1


def test_429_with_a_date_then_without_retry_after_backs_off() -> None:
    soon = formatdate(timeval=time.time() + 3, usegmt=True)

    def respond(seen: Seen, index: int) -> Reply:
        if index == 0:
            return error_reply(429, "rate_limited", headers={"Retry-After": soon})
        if index == 1:
            return error_reply(429, "rate_limited")
        return json_reply(job(status="running"))

    sleeps: list[float] = []
    with fake_api(respond) as api:
        assert client(api.url, sleeps).get("j1").status == "running"
    assert len(api.seen) == 3
    assert 1.0 < sleeps[0] <= 3.2  # the date, a second or two away
    assert 0.5 * 0.5 <= sleeps[1] <= 1.0  # backoff: base 0.5 s * 2**1, times 0.5..1


def test_gives_up_with_the_last_error() -> None:
    sleeps: list[float] = []
    with fake_api(lambda seen, index: error_reply(503, "broker_unavailable", "queue down")) as api:
        with pytest.raises(ApiError) as caught:
            client(api.url, sleeps, retries=2).get("j1")
    assert (caught.value.status, caught.value.code, caught.value.message) == (
        503,
        "broker_unavailable",
        "queue down",
    )
    assert len(api.seen) == 3 and len(sleeps) == 2


def test_refused_connections_are_retried_then_raised() -> None:
    sleeps: list[float] = []
    closed = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(requests.ConnectionError):
        client(closed, sleeps, retries=3).get("j1")
    assert len(sleeps) == 3 and sleeps == sorted(sleeps)  # backing off further each time
    refused_post: list[float] = []
    with pytest.raises(requests.ConnectionError):
        client(closed, refused_post, retries=2).cancel("j1")  # never sent: safe to repeat
    assert len(refused_post) == 2


def test_a_dropped_submission_is_repeated_with_its_key_but_a_dropped_cancel_is_not() -> None:
    def respond(seen: Seen, index: int) -> Reply:
        if index in (0, 2):
            return Reply(DROP)
        return json_reply(job(), 202)

    sleeps: list[float] = []
    with fake_api(respond) as api:
        api_client = client(api.url, sleeps)
        assert api_client.submit_text2video(prompt="x", idempotency_key="mine-1").id == "j1"
        with pytest.raises(requests.ConnectionError):
            api_client.cancel("j1")
    assert api.paths() == ["POST /jobs", "POST /jobs", "POST /jobs/j1/cancel"]
    assert [s.headers.get("Idempotency-Key") for s in api.seen] == ["mine-1", "mine-1", None]


def test_errors_are_read_from_the_json_body_and_from_anything_else() -> None:
    def respond(seen: Seen, index: int) -> Reply:
        if index == 0:
            return error_reply(404, "job_not_found", "There is no job 'nope'.")
        return Reply(502, b"<html>bad gateway</html>", {"Content-Type": "text/html"})

    with fake_api(respond) as api:
        api_client = client(api.url, [])
        with pytest.raises(ApiError) as first:
            api_client.get("nope")
        with pytest.raises(ApiError) as second:
            api_client.get("nope")
    assert str(first.value) == "404 job_not_found: There is no job 'nope'."
    assert (second.value.status, second.value.code) == (502, "http_502")


def test_api_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBSERVICE_API_KEY", " from-env ")
    with fake_api(lambda seen, index: json_reply(job())) as api:
        Client(api.url).get("j1")
        monkeypatch.delenv("JOBSERVICE_API_KEY")
        Client(api.url).get("j1")
    assert api.seen[0].headers["Authorization"] == "Bearer from-env"
    assert "Authorization" not in api.seen[1].headers


def test_backoff_grows_to_its_cap_with_jitter() -> None:
    backoff = Backoff(base=0.5, cap=4.0, rng=random.Random(7))
    delays = [backoff.delay(n) for n in range(8)]
    assert all(0.5 * min(4.0, 0.5 * 2**n) <= d <= min(4.0, 0.5 * 2**n) for n, d in enumerate(delays))
    assert max(delays) <= 4.0 and len(set(delays)) == len(delays)
    assert backoff.delay(0, retry_after=600) <= 120.1  # a huge Retry-After is clipped


@pytest.mark.parametrize(
    ("header", "seconds"),
    [("7", 7.0), (None, None), ("soon", None), ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0)],
)
def test_retry_after_forms(header: str | None, seconds: float | None) -> None:
    assert retry_after_seconds(header) == seconds


def test_a_retried_upload_sends_its_files_whole_again(tmp_path: Path) -> None:
    audio = tmp_path / "speech.wav"
    audio.write_bytes(b"RIFF-audio-bytes")

    def respond(seen: Seen, index: int) -> Reply:
        if index == 0:
            return error_reply(503, "storage_unavailable", headers={"Retry-After": "0"})
        return json_reply(job(), 202)

    with fake_api(respond) as api:
        client(api.url, []).submit_audio2video(
            image=io.BytesIO(b"PNG-image-bytes"), audio=audio, max_size=128
        )
    assert len(api.seen) == 2 and len(api.seen[0].body) == len(api.seen[1].body)  # boundaries differ
    body = api.seen[1].body
    assert b"PNG-image-bytes" in body and b"RIFF-audio-bytes" in body and b'filename="speech.wav"' in body
    assert b'name="task"\r\n\r\naudio2video' in body and b'name="max_size"\r\n\r\n128' in body
    assert api.seen[0].headers["Idempotency-Key"] == api.seen[1].headers["Idempotency-Key"]

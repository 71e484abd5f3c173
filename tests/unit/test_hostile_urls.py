"""Hostile addresses: crafted pagination cursors, NUL characters and odd values in queries, and Host
headers a DNS-rebinding page would send. Each is a 4xx with a code, leaves nothing, and the service
stays healthy (``tests/unit/hostile.py``)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from jobservice.http.api.policy.cross_site import allowed_hosts, host_allowed, host_name
from jobservice.settings import Settings
from tests.unit.hostile import Case, assert_refused


def b64(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


UUID = "00000000-0000-0000-0000-000000000000"
BAD_CURSORS = {
    "garbage": "!!!not-base64!!!",
    "NUL": "abc\x00def",
    "wrong padding": "a",
    "base64 of text": b64("hello"),
    "base64 of an object": b64('{"a": 1, "b": 2}'),
    "a uuid that is an object": b64(f'["2026-01-01T00:00:00", {{"id": "{UUID}"}}]'),
    "a uuid that is a number": b64('["2026-01-01T00:00:00", 7]'),
    "a time that is a list": b64(f'[[2026, 1, 1], "{UUID}"]'),
    "an impossible time": b64(f'["2026-02-30T00:00:00", "{UUID}"]'),
    # Year 1 at +14:00 is before the calendar's first instant in UTC: it cannot be converted.
    "a time before the calendar in UTC": b64(f'["0001-01-01T00:00:00+14:00", "{UUID}"]'),
    "a time after the calendar in UTC": b64(f'["9999-12-31T23:59:59-14:00", "{UUID}"]'),
    "nested 5000 deep": b64("[" * 5000 + "]" * 5000),
    "a 5000-digit number": b64("9" * 5000),
    "2 MB": "A" * 2_000_000,
    "not ASCII": "é" * 40,
}


def _get(path: str, **query: str) -> Any:
    return lambda client: client.get(path, query_string=query)


CASES: dict[str, Case] = {
    **{
        f"cursor: {name}": (_get("/jobs", cursor=value), 400, "invalid_cursor")
        for name, value in BAD_CURSORS.items()
    },
    "cursor on the jobs page": (
        _get("/ui/jobs", cursor=BAD_CURSORS["a uuid that is an object"]),
        400,
        "invalid_cursor",
    ),
    "cursor nested deep on the jobs page": (
        _get("/ui/jobs", cursor=BAD_CURSORS["nested 5000 deep"]),
        400,
        "invalid_cursor",
    ),
    # NUL in a query value reaches database filters (PostgreSQL refuses it even in a comparison)
    "NUL in ?model": (_get("/jobs", model="a\x00b"), 400, "invalid_text"),
    "NUL in a batch ?name": (_get("/batches", name="n\x00"), 400, "invalid_text"),
    "NUL in a batch ?status": (_get("/batches", status="\x00"), 400, "invalid_text"),
    "NUL in the jobs page ?model": (_get("/ui/jobs", model="\x00"), 400, "invalid_text"),
    "NUL in a query name": (lambda c: c.get("/jobs?a%00b=1"), 400, "invalid_text"),
    # limits and filters
    "limit of 10**9": (_get("/jobs", limit="1000000000"), 422, "invalid_limit"),
    "a negative limit": (_get("/batches", limit="-1"), 422, "invalid_limit"),
    "a superscript limit": (_get("/jobs", limit="²"), 422, "invalid_limit"),
    "an unknown status": (_get("/jobs", status="running,exploded"), 422, "invalid_status"),
    # DNS rebinding: a page on another name pointed at 127.0.0.1 (auth is off here)
    "Host of another site": (
        lambda c: c.get("/jobs", headers={"Host": "evil.example"}),
        421,
        "host_not_allowed",
    ),
    "Host of another site, with a port": (
        lambda c: c.get("/jobs", headers={"Host": "evil.example:8000"}),
        421,
        "host_not_allowed",
    ),
    "Host ending like localhost": (
        lambda c: c.get("/models", headers={"Host": "localhost.evil.example"}),
        421,
        "host_not_allowed",
    ),
    "Host of a LAN address": (
        lambda c: c.get("/jobs", headers={"Host": "[fe80::1]:8000"}),
        421,
        "host_not_allowed",
    ),
    "Host on a health check": (
        lambda c: c.get("/readyz", headers={"Host": "rebind.example"}),
        421,
        "host_not_allowed",
    ),
    "Host on a page": (
        lambda c: c.get("/ui/jobs", headers={"Host": "rebind.example"}),
        421,
        "host_not_allowed",
    ),
    "Host on a post": (
        lambda c: c.post(
            "/jobs", json={"task": "text2video", "prompt": "x"}, headers={"Host": "evil.example"}
        ),
        421,
        "host_not_allowed",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_hostile_address_is_refused_and_leaves_nothing(hostile: Any, name: str) -> None:
    client, services = hostile
    assert_refused(client, services, CASES[name])


def test_a_cursor_this_api_made_still_pages(hostile: Any) -> None:
    client, _ = hostile
    for prompt in ("a", "b", "c"):
        assert (
            client.post("/jobs", json={"task": "text2video", "prompt": prompt, "num_frames": 9}).status_code
            == 202
        )
    first = client.get("/jobs", query_string={"limit": "2"}).get_json()
    second = client.get("/jobs", query_string={"limit": "2", "cursor": first["next_cursor"]}).get_json()
    assert [j["params"]["prompt"] for j in first["jobs"] + second["jobs"]] == ["c", "b", "a"]


def test_loopback_names_are_answered_when_auth_is_off(hostile: Any) -> None:
    client, _ = hostile
    for host in ("localhost", "127.0.0.1:8000", "[::1]:8000", "app.localhost", "LOCALHOST."):
        assert client.get("/healthz", headers={"Host": host}).status_code == 200, host


@pytest.mark.parametrize(
    ("raw", "name"),
    [
        ("Example.COM:80", "example.com"),
        ("[::1]:8000", "::1"),
        ("[::1]", "::1"),
        ("host.", "host"),
        ("::1", "::1"),
    ],
)
def test_the_name_part_of_a_host_header(raw: str, name: str) -> None:
    assert host_name(raw) == name


def test_which_hosts_each_setting_allows() -> None:
    def rules(**values: Any) -> frozenset[str] | None:
        return allowed_hosts(Settings(_env_file=None, **values))  # type: ignore[call-arg]

    assert rules(auth="keys") is None, "with keys, a rebinding page holds no key: any host"
    assert rules(auth="keys", allowed_hosts=["*"]) is None
    off = rules(auth="off")
    assert off is not None and host_allowed("a.localhost", off) and not host_allowed("evil.example", off)
    listed = rules(auth="keys", allowed_hosts=["api.example.com:443", "*.corp.example"])
    assert (
        listed is not None
        and host_allowed("api.example.com", listed)
        and host_allowed("x.corp.example", listed)
    )
    assert not host_allowed("localhost", listed) and not host_allowed("corp.example.evil", listed)

"""SSRF safety: which webhook URLs are refused at submission and which addresses at delivery."""

from __future__ import annotations

import pytest

from jobservice.errors import Invalid
from jobservice.webhooks.targets import TargetRefused, check_webhook, parse_target, resolve_target


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("ftp://example.com/x", "invalid_webhook"),
        ("https:///nohost", "invalid_webhook"),
        ("https://user:pw@example.com/", "invalid_webhook"),
        ("https://a..b/", "invalid_webhook"),
        ("https://exa mple.com/", "invalid_webhook"),
        ("https://example.com:99999/", "invalid_webhook"),
        ("http://example.com/hook", "webhook_not_https"),
        ("https://127.0.0.1/hook", "webhook_forbidden_address"),
        ("https://10.1.2.3/hook", "webhook_forbidden_address"),
        ("https://192.168.0.1/hook", "webhook_forbidden_address"),
        ("https://169.254.169.254/latest/meta-data", "webhook_forbidden_address"),
        ("https://[fd00:ec2::254]/", "webhook_forbidden_address"),
        ("https://[::1]/", "webhook_forbidden_address"),
        ("https://[::ffff:127.0.0.1]/", "webhook_forbidden_address"),
        ("https://224.0.0.1/", "webhook_forbidden_address"),
        ("https://0.0.0.0/", "webhook_forbidden_address"),
        ("https://100.64.0.1/", "webhook_forbidden_address"),
    ],
)
def test_refused_urls(url: str, code: str) -> None:
    with pytest.raises(TargetRefused) as refused:
        parse_target(url, [])
    assert refused.value.code == code


def test_public_https_and_allowed_hosts_pass() -> None:
    target = parse_target("https://hooks.example.com:8443/in?x=1", [])
    assert (target.host, target.port, target.path, target.host_header) == (
        "hooks.example.com",
        8443,
        "/in?x=1",
        "hooks.example.com:8443",
    )
    assert parse_target("http://127.0.0.1:9000/h", ["127.0.0.1"]).scheme == "http"
    assert parse_target("https://10.0.0.7/h", ["10.0.0.7"]).host == "10.0.0.7"


def test_a_name_that_resolves_to_loopback_is_refused_unless_allowed() -> None:
    target = parse_target("https://localhost:9/hook", [])  # a name: its shape is fine
    with pytest.raises(TargetRefused) as refused:
        resolve_target(target, [])
    assert refused.value.code == "webhook_forbidden_address" and "127.0.0.1" in refused.value.message
    assert resolve_target(target, ["localhost"]) in ("127.0.0.1", "::1")
    assert resolve_target(target, ["127.0.0.1", "::1"]) in ("127.0.0.1", "::1")  # allowed by address


def test_check_webhook_fields() -> None:
    assert check_webhook(None, None, []) == (None, None)
    assert check_webhook("https://example.com/h", None, []) == ("https://example.com/h", "start,completed")
    assert check_webhook("https://example.com/h", "completed", []) == ("https://example.com/h", "completed")
    assert check_webhook("https://example.com/h", ["completed", "start"], [])[1] == "start,completed"
    for events in ("done", ["start", 3], 7):
        with pytest.raises(Invalid) as bad:
            check_webhook("https://example.com/h", events, [])
        assert bad.value.code == "invalid_webhook_events_filter"
    with pytest.raises(Invalid) as bad:
        check_webhook(42, None, [])
    assert bad.value.code == "invalid_webhook"
    with pytest.raises(Invalid) as bad:
        check_webhook(None, "start", [])
    assert bad.value.code == "invalid_webhook_events_filter"

"""Where a webhook may point (SSRF safety).

At submission the URL's shape is checked (``check_webhook``): https, or http for an allowed host;
a host, no credentials, and no literal address that is private, loopback, link-local, multicast,
reserved or a cloud metadata endpoint. At delivery the host is resolved (``resolve_target``) and
every address is checked the same way; the POST then connects to the address that was checked,
so a DNS answer that changes in between (rebinding) cannot redirect it. An operator allows
internal receivers with ``JOBSERVICE_WEBHOOK_ALLOWED_HOSTS`` (host names or addresses).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from jobservice.errors import Invalid

MAX_URL_LENGTH = 2048
EVENTS = ("start", "completed")
METADATA = {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class TargetRefused(Exception):
    """A webhook URL that may not be called; ``code`` for machines, the message for people."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class WebhookTarget:
    """A parsed webhook URL."""

    url: str
    scheme: str
    host: str  # lower case, without IPv6 brackets
    port: int
    path: str  # path and query, as sent in the request line

    @property
    def host_header(self) -> str:
        """The Host header value (the port only when it is not the scheme's default)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def forbidden_address(address: IPAddress) -> bool:
    """Whether ``address`` is not a public unicast address (or is a metadata endpoint)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address in METADATA or address.is_multicast or not address.is_global


def _allowed(value: str, allowed: Iterable[str]) -> bool:
    return value.lower() in {a.lower().strip("[]") for a in allowed}


def parse_target(url: str, allowed: Iterable[str]) -> WebhookTarget:
    """Check the shape of ``url``; TargetRefused says what is wrong."""
    if len(url) > MAX_URL_LENGTH or any(ord(c) < 33 or ord(c) == 127 for c in url):
        raise TargetRefused("invalid_webhook", "The webhook URL is too long or contains spaces or controls.")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise TargetRefused("invalid_webhook", "The webhook URL cannot be parsed.") from None
    host = (parts.hostname or "").lower()
    try:  # an internationalised name in its ASCII form; over-long or empty labels are refused
        host = host.encode("idna").decode("ascii") if host and not _literal(host) else host
    except UnicodeError:
        raise TargetRefused("invalid_webhook", "The webhook URL's host name is not a valid name.") from None
    if parts.scheme not in ("https", "http") or not host:
        raise TargetRefused("invalid_webhook", "The webhook must be an absolute https:// URL.")
    if parts.username is not None or parts.password is not None:
        raise TargetRefused("invalid_webhook", "The webhook URL may not carry a user name or password.")
    if parts.scheme == "http" and not _allowed(host, allowed):
        raise TargetRefused(
            "webhook_not_https",
            f"The webhook must use https; plain http is allowed only for hosts the "
            f"operator lists in JOBSERVICE_WEBHOOK_ALLOWED_HOSTS, and '{host}' is not one.",
        )
    literal = _literal(host)
    if literal is not None and forbidden_address(literal) and not _allowed(host, allowed):
        raise TargetRefused(
            "webhook_forbidden_address",
            f"The webhook address {host} is private, loopback, link-local or "
            "reserved; an operator may allow it in JOBSERVICE_WEBHOOK_ALLOWED_HOSTS.",
        )
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return WebhookTarget(
        url=url,
        scheme=parts.scheme,
        host=host,
        port=port or (443 if parts.scheme == "https" else 80),
        path=path,
    )


def resolve_target(target: WebhookTarget, allowed: Iterable[str]) -> str:
    """The address to connect to: every address the host resolves to must be public, or allowed.

    Raises TargetRefused (``webhook_forbidden_address``) or OSError when the name does not resolve.
    """
    allowed = list(allowed)
    infos = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    addresses = [str(info[4][0]).split("%", 1)[0] for info in infos]
    if not addresses:
        raise OSError(f"{target.host} has no address")
    if _allowed(target.host, allowed):
        return addresses[0]
    for address in addresses:
        if forbidden_address(ipaddress.ip_address(address)) and not _allowed(address, allowed):
            raise TargetRefused(
                "webhook_forbidden_address",
                f"{target.host} resolves to {address}, which is private, loopback, link-local or reserved.",
            )
    return addresses[0]


def event_filter(raw: Any) -> str:
    """The canonical comma list of a ``webhook_events_filter`` (a list or comma string)."""
    if isinstance(raw, str):
        items = [p.strip() for p in raw.split(",") if p.strip()]
    elif isinstance(raw, list) and all(isinstance(p, str) for p in raw):
        items = [p.strip() for p in raw]
    else:
        raise Invalid(
            "invalid_webhook_events_filter",
            "'webhook_events_filter' must be a list (or comma-separated string) of: start, completed.",
            field="webhook_events_filter",
        )
    unknown = sorted({p for p in items if p not in EVENTS})
    if unknown or not items:
        raise Invalid(
            "invalid_webhook_events_filter",
            f"Unknown webhook event(s) {', '.join(unknown) or '(none)'}; choose from: start, completed.",
            field="webhook_events_filter",
        )
    return ",".join(e for e in EVENTS if e in items)


def check_webhook(url: Any, events: Any, allowed: Iterable[str]) -> tuple[str | None, str | None]:
    """The (url, comma list of events) a submission asks for; Invalid when either is unusable."""
    if url is None or url == "":
        if events not in (None, "", []):
            raise Invalid(
                "invalid_webhook_events_filter", "'webhook_events_filter' needs a 'webhook'.", field="webhook"
            )
        return None, None
    if not isinstance(url, str):
        raise Invalid("invalid_webhook", "'webhook' must be a URL string.", field="webhook")
    try:
        parse_target(url, allowed)
    except TargetRefused as exc:
        raise Invalid(exc.code, exc.message, field="webhook") from None
    return url, event_filter(events) if events not in (None, "", []) else ",".join(EVENTS)

"""Refuse requests that a browser sends on behalf of another site, and hosts we do not answer for.

Cross-site posts: the web pages carry CSRF tokens, but the JSON API takes plain form posts too, and
a browser lets any site send those ("simple" requests). Browsers say where a request comes from
(``Origin``, ``Sec-Fetch-Site``); other clients (curl, SDKs, the CLI) send neither and are not affected.

DNS rebinding: a page on ``evil.example`` whose name is re-pointed at 127.0.0.1 is "same-origin"
with this service as far as the browser knows, so it could read every answer; but its requests
still carry ``Host: evil.example``. Only host names on an allow-list are answered (421
``host_not_allowed`` otherwise), health checks included: what they say is the attacker's to read too.

Both are steps of the request policy (``jobservice.http.api.policy.steps``), which runs them on every request.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from werkzeug.datastructures import Headers

from jobservice.errors import Forbidden, Misdirected
from jobservice.settings import Settings

UNSAFE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def _origin_host(origin: str) -> str | None:
    parts = urlsplit(origin)
    return parts.netloc.lower() or None


def host_name(host: str) -> str:
    """The name part of a ``Host`` header, lowercased: no port, no IPv6 brackets, no final dot."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host[1:]
    if host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host.rstrip(".")


def host_allowed(name: str, allowed: frozenset[str] | None) -> bool:
    """Whether ``name`` (from ``host_name``) is answered; ``allowed`` None means any host."""
    if allowed is None:
        return True
    if name in allowed:
        return True
    # "*.example.com" (or the loopback default's "*.localhost") covers every name below it.
    return any(rule.startswith("*.") and name.endswith(rule[1:]) for rule in allowed)


def allowed_hosts(settings: Settings) -> frozenset[str] | None:
    """The host names answered under ``settings`` (None: any), as the settings' docs say."""
    if settings.allowed_hosts:
        rules = {rule.lower() if rule.startswith("*") else host_name(rule) for rule in settings.allowed_hosts}
        return None if "*" in rules else frozenset(rules)
    if settings.auth == "keys":
        return None  # a rebinding page holds no key: every answer it could read is a 401
    return LOOPBACK_NAMES | {"*.localhost"}


def trusted_origins(settings: Settings) -> frozenset[str]:
    """The hosts of ``allowed_origins``: other sites whose browsers' posts are taken."""
    return frozenset(host for host in (_origin_host(o) for o in settings.allowed_origins) if host)


def refuse_unknown_host(host: str, allowed: frozenset[str] | None) -> None:
    """421 ``host_not_allowed`` unless the ``Host`` header's name is answered (``allowed_hosts``)."""
    name = host_name(host)
    if not host_allowed(name, allowed):
        raise Misdirected(
            "host_not_allowed",
            f"This service does not answer for the host '{name[:100]}'; list it in "
            "JOBSERVICE_ALLOWED_HOSTS (a JSON list of host names) to allow it.",
        )


def refuse_cross_site(method: str, host: str, headers: Headers, trusted: frozenset[str]) -> None:
    """403 ``cross_site_request`` for an unsafe method a browser sent on behalf of another site
    (``host``: the ``Host`` header; ``headers``: the request's, for ``Origin`` and ``Sec-Fetch-Site``)."""
    if method not in UNSAFE_METHODS:
        return
    origin, fetch_site = headers.get("Origin"), headers.get("Sec-Fetch-Site")
    if origin is None and fetch_site in (None, "same-origin", "none"):
        return  # not a browser, or a browser saying it is this site
    origin_host = _origin_host(origin) if origin and origin != "null" else None
    # Compare hosts only: behind a TLS proxy the scheme we see differs from the browser's.
    if origin_host is not None and (origin_host == host.lower() or origin_host in trusted):
        return
    raise Forbidden(
        "cross_site_request",
        "This request came from another site; send it from this service's own pages or a non-browser "
        "client (set JOBSERVICE_ALLOWED_ORIGINS to trust another site).",
    )

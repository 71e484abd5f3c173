"""Every request's caller: an API key (``Authorization: Bearer``), a signed-in browser, or nobody.

With ``JOBSERVICE_AUTH=keys`` a request without a valid key is refused (401 ``unauthorized``, or
for a web page a redirect to the sign-in page); with ``off`` the caller is the admin of the
default tenant. The verified caller is ``g.principal`` (``current_principal()``).

Verified keys are cached per process for ``CACHE_SECONDS``, so a revoked key stops working within
that time everywhere (at once in the process that revoked it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from flask import Flask, g, redirect, request, session, url_for
from werkzeug.wrappers import Response as WerkzeugResponse

from jobservice.auth.keys import hash_secret, principal_of, verify
from jobservice.auth.principal import Principal, anonymous
from jobservice.db.tables import ApiKey
from jobservice.errors import Unauthorized
from jobservice.quotas.limits import Limits, recent_limits
from jobservice.quotas.rate import check_rate
from jobservice.settings import Settings
from jobservice.wiring import Services

CACHE_SECONDS = 5.0
CACHE_SIZE = 4096
SESSION_KEY_ID = "key_id"
# Endpoints anyone may call: liveness, readiness (details for admins only), the API document,
# static files and the sign-in page itself.
PUBLIC = {"system.healthz", "system.readyz", "openapi.openapi", "web.sign_in", "web.sign_in_submit"}
WEB_BLUEPRINTS = {"web", "batches_web"}

_cache: dict[str, tuple[float, Principal | None]] = {}
_cache_lock = threading.Lock()


def current_principal() -> Principal:
    """The caller of the current request (set by the hook before any view runs)."""
    principal: Principal | None = g.get("principal")
    if principal is None:  # a view outside the hook (tests calling a view directly)
        raise Unauthorized("unauthorized", "This request carries no credentials.")
    return principal


def forget_cached() -> None:
    """Drop every cached verification (after a revocation in this process)."""
    with _cache_lock:
        _cache.clear()


def _cached(token: str, load: Callable[[], Principal | None]) -> Principal | None:
    now = time.monotonic()
    with _cache_lock:
        hit = _cache.get(token)
    if hit is not None and hit[0] > now:
        return hit[1]
    principal = load()
    with _cache_lock:
        if len(_cache) >= CACHE_SIZE:
            _cache.clear()
        _cache[token] = (now + CACHE_SECONDS, principal)
    return principal


def principal_for_secret(services: Services, secret: str) -> Principal | None:
    """The caller a presented secret stands for, or None."""

    def load() -> Principal | None:
        with services.db.session() as db:
            key = verify(db, secret)
            return principal_of(key) if key is not None else None

    return _cached("s:" + hash_secret(secret), load)


def principal_for_key_id(services: Services, key_id: str) -> Principal | None:
    """The caller a signed-in browser session stands for (its key still live), or None."""

    def load() -> Principal | None:
        with services.db.session() as db:
            key = db.get(ApiKey, key_id)
            return principal_of(key) if key is not None and key.revoked_at is None else None

    return _cached("k:" + key_id, load)


def limits_for(services: Services, principal: Principal) -> Limits:
    """``principal``'s limits, the tenant's overrides read at most every few seconds."""
    return recent_limits(services.db, services.settings, principal)


def _bearer() -> str | None:
    header = request.headers.get("Authorization")
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("unauthorized", "Send the API key as 'Authorization: Bearer <key>'.")
    return token.strip()


def _identify(services: Services) -> Principal | None:
    token = _bearer()
    if token is not None:
        principal = principal_for_secret(services, token)
        if principal is None and services.settings.auth == "keys":
            raise Unauthorized("unauthorized", "The API key is not valid (unknown or revoked).")
        return principal
    key_id = session.get(SESSION_KEY_ID) if request.cookies else None
    if isinstance(key_id, str):
        principal = principal_for_key_id(services, key_id)
        if principal is None:
            session.pop(SESSION_KEY_ID, None)  # revoked since sign-in
        return principal
    return None


def init_app(app: Flask, services: Services) -> None:
    """Install the hook that identifies every request's caller."""
    settings: Settings = services.settings

    @app.before_request
    def identify() -> WerkzeugResponse | None:
        principal = _identify(services)
        if principal is None and settings.auth == "off":
            principal = anonymous(settings.default_tenant)
        g.principal = principal
        public = (
            request.endpoint is None or request.endpoint in PUBLIC or request.endpoint.endswith(".static")
        )
        if principal is not None:
            if not public and principal.key_id is not None:  # request rates are counted per key
                check_rate(settings, principal, limits_for(services, principal))  # 429 rate_limited
            return None
        if public:
            return None
        if request.blueprint in WEB_BLUEPRINTS and request.method == "GET":
            return redirect(url_for("web.sign_in", next=request.full_path.rstrip("?")))
        raise Unauthorized(
            "unauthorized", "This service needs an API key: send 'Authorization: Bearer <key>'."
        )

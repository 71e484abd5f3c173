"""Every request's caller: an API key (``Authorization: Bearer``), a signed-in browser, or nobody.

With ``JOBSERVICE_AUTH=keys`` a request without a valid key is refused (401 ``unauthorized``, or
for a web page a redirect to the sign-in page); with ``off`` the caller is the admin of the
default tenant. The verified caller is ``g.principal`` (``current_principal()``). These checks are
steps of the request policy (``jobservice.http.api.policy.steps``), which runs them on every request.

Verified keys are kept in the process's ``Services.caches`` for ``caches.PRINCIPAL_SECONDS``, so a
revoked key stops working within that time everywhere.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from flask import g

from jobservice.auth.keys import hash_secret, principal_of, verify
from jobservice.auth.principal import Principal, anonymous
from jobservice.db.tables import ApiKey
from jobservice.errors import Unauthorized
from jobservice.quotas.limits import Limits, recent_limits
from jobservice.wiring import Services

SESSION_KEY_ID = "key_id"
# Endpoints anyone may call: liveness, readiness (details for admins only), the API document,
# static files and the sign-in page itself.
PUBLIC = {"system.healthz", "system.readyz", "openapi.openapi", "web.sign_in", "web.sign_in_submit"}
WEB_BLUEPRINTS = {"web", "batches_web"}


def current_principal() -> Principal:
    """The caller of the current request (set by the hook before any view runs)."""
    principal: Principal | None = g.get("principal")
    if principal is None:  # a view outside the hook (tests calling a view directly)
        raise Unauthorized("unauthorized", "This request carries no credentials.")
    return principal


def session_token(key_id: str) -> str:
    """Where a browser session's key is kept in ``caches.principals``."""
    return "k:" + key_id


def principal_for_secret(services: Services, secret: str) -> Principal | None:
    """The caller a presented secret stands for, or None."""

    def load() -> Principal | None:
        with services.db.session() as db:
            key = verify(db, secret)
            return principal_of(key) if key is not None else None

    return services.caches.principals.get("s:" + hash_secret(secret), lambda _old: load())


def principal_for_key_id(services: Services, key_id: str) -> Principal | None:
    """The caller a signed-in browser session stands for (its key still live), or None."""

    def load() -> Principal | None:
        with services.db.session() as db:
            key = db.get(ApiKey, key_id)
            return principal_of(key) if key is not None and key.revoked_at is None else None

    return services.caches.principals.get(session_token(key_id), lambda _old: load())


def limits_for(services: Services, principal: Principal) -> Limits:
    """``principal``'s limits, the tenant's overrides read at most every few seconds."""
    return recent_limits(services, principal)


def is_public(endpoint: str | None) -> bool:
    """Whether anyone may call ``endpoint`` (None: no route matched; its 404 or 405 is anyone's too)."""
    return endpoint is None or endpoint in PUBLIC or endpoint.endswith(".static")


def bearer_token(header: str | None) -> str | None:
    """The key in an ``Authorization`` header (None: no header); any other scheme, or none, is a 401."""
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("unauthorized", "Send the API key as 'Authorization: Bearer <key>'.")
    return token.strip()


def caller(
    services: Services, authorization: str | None, session: MutableMapping[str, Any] | None
) -> Principal | None:
    """Who sends a request: the key in its ``Authorization`` header, else the signed-in browser of
    its ``session`` (None: the request carries no cookie), else nobody (None), except that with auth
    off everybody is the default tenant's admin. A bad header or, with keys on, a key that is not
    valid is a 401; a revoked key's session forgets it."""
    principal = _identified(services, authorization, session)
    if principal is None and services.settings.auth == "off":
        principal = anonymous(services.settings.default_tenant)
    return principal


def _identified(
    services: Services, authorization: str | None, session: MutableMapping[str, Any] | None
) -> Principal | None:
    token = bearer_token(authorization)
    if token is not None:
        principal = principal_for_secret(services, token)
        if principal is None and services.settings.auth == "keys":
            raise Unauthorized("unauthorized", "The API key is not valid (unknown or revoked).")
        return principal
    key_id = session.get(SESSION_KEY_ID) if session is not None else None
    if session is None or not isinstance(key_id, str):
        return None
    principal = principal_for_key_id(services, key_id)
    if principal is None:
        session.pop(SESSION_KEY_ID, None)  # revoked since sign-in
    return principal


class SignInFirst(Unauthorized):
    """Nobody asked for a web page: the browser goes to the sign-in page (a 401 where not caught)."""


def refuse_nobody(
    principal: Principal | None, endpoint: str | None, blueprint: str | None, method: str
) -> None:
    """401 for a request that nobody sent (``caller`` None) to an endpoint that is not public;
    ``SignInFirst`` for a page a browser GETs."""
    if principal is not None or is_public(endpoint):
        return
    if blueprint in WEB_BLUEPRINTS and method == "GET":
        raise SignInFirst("unauthorized", "Sign in first.")
    raise Unauthorized("unauthorized", "This service needs an API key: send 'Authorization: Bearer <key>'.")


def count_rate(services: Services, principal: Principal | None, endpoint: str | None) -> None:
    """Count one request of a key's caller (not of a public endpoint); 429 ``rate_limited`` over
    its rate (``jobservice.quotas.rate``)."""
    if principal is not None and principal.key_id is not None and not is_public(endpoint):
        services.rate_counter.check(principal, limits_for(services, principal))

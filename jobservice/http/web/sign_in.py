"""Signing in to the web pages with an API key (a session cookie), and signing out.

The cookie holds only the key's id, signed with the app's secret; every request checks that the
key is still live (``jobservice.http.api.policy.auth``), so revoking a key signs its browsers out. The
cookie is ``HttpOnly``, ``SameSite=Lax``, and ``Secure`` whenever the request came over https.
"""

from __future__ import annotations

from typing import Any

from flask import Flask, Request, flash, g, redirect, render_template, request, session, url_for
from flask.sessions import SecureCookieSession, SecureCookieSessionInterface

from jobservice.http.api.native.jobs import services
from jobservice.http.api.policy.auth import SESSION_KEY_ID, principal_for_secret, session_token
from jobservice.http.web.blueprint import bp
from jobservice.http.web.security import check_csrf


class SessionInterface(SecureCookieSessionInterface):
    """Flask's signed-cookie sessions, marked ``Secure`` on every https request."""

    def get_cookie_secure(self, app: Flask) -> bool:
        """Secure when configured so, or when the request came over https."""
        return bool(app.config.get("SESSION_COOKIE_SECURE")) or _is_https(request)

    def open_session(self, app: Flask, request: Request) -> SecureCookieSession | None:
        """The request's session (an empty one, cheaply, when it carries no cookie)."""
        # API calls carry no cookie: an empty session without building the signing serializer
        # (7% of a GET /jobs/<id>; scripts/bench_poll.py). The same answer Flask gives them.
        if app.secret_key and self.get_cookie_name(app) not in request.cookies:
            return self.session_class()
        return super().open_session(app, request)


def _is_https(req: Request) -> bool:
    # Behind a TLS-terminating proxy, X-Forwarded-Proto says what the browser used.
    return req.is_secure or req.headers.get("X-Forwarded-Proto", "").split(",")[0].strip() == "https"


def _safe_next(raw: str | None) -> str:
    """Where to go after signing in: a path on this site only (never //other.host or a URL)."""
    if raw and raw.startswith("/") and not raw.startswith("//") and "\\" not in raw:
        return raw
    return url_for("web.jobs")


@bp.get("/ui/sign-in")
def sign_in() -> Any:
    """The sign-in form (paste an API key)."""
    if services().settings.auth == "off":
        return redirect(url_for("web.jobs"))
    return render_template("web/sign_in.html", next=_safe_next(request.args.get("next")), nav="sign-in")


@bp.post("/ui/sign-in")
def sign_in_submit() -> Any:
    """Check the key; on success remember its id in the session cookie."""
    check_csrf()
    secret = (request.form.get("key") or "").strip()
    principal = principal_for_secret(services(), secret) if secret else None
    target = _safe_next(request.form.get("next"))
    if principal is None or principal.key_id is None:
        page = render_template(
            "web/sign_in.html",
            next=target,
            nav="sign-in",
            problem="That key is not valid (unknown or revoked).",
        )
        return page, 401
    csrf = session.get("csrf")
    session.clear()  # a fresh session for the new identity
    if csrf:
        session["csrf"] = csrf
    session[SESSION_KEY_ID] = principal.key_id
    flash(f"Signed in as {principal.key_name} (tenant {principal.tenant}).", "success")
    return redirect(target, code=303)


@bp.post("/ui/sign-out")
def sign_out() -> Any:
    """Forget the key in this browser."""
    check_csrf()
    key_id = session.pop(SESSION_KEY_ID, None)
    g.principal = None
    if isinstance(key_id, str):
        services().caches.principals.drop(session_token(key_id))
    flash("Signed out.", "success")
    return redirect(url_for("web.sign_in"), code=303)

"""The web UI: server-rendered pages at ``/`` and under ``/ui/``, next to the JSON API.

``init_app`` gives the app a stable session key (for CSRF tokens) and registers the ``web``
blueprint. Templates live in ``templates/`` beside this file (``base.html`` is the layout other pages
extend) and static files in ``static/``, served at ``/ui/static/``; both ship in the wheel.
A surface: nothing in the domain imports it.
"""

from __future__ import annotations

from flask import Flask

from jobservice.http.web import fleet, new_job, pages, sign_in  # noqa: F401 - importing them attaches their routes
from jobservice.http.web.blueprint import bp
from jobservice.http.web.security import session_secret
from jobservice.wiring import Services


def init_app(app: Flask) -> None:
    """Register the web pages on ``app`` (which must already carry its Services)."""
    services: Services = app.extensions["jobservice"]
    app.secret_key = session_secret(services.settings)
    app.session_interface = sign_in.SessionInterface()
    # Flask's defaults hold these keys (SameSite None), so setdefault would change nothing.
    app.config["SESSION_COOKIE_SAMESITE"] = "Lax"
    app.config["SESSION_COOKIE_HTTPONLY"] = True
    if (services.settings.public_base_url or "").startswith("https://"):
        app.config["SESSION_COOKIE_SECURE"] = True
    app.register_blueprint(bp)

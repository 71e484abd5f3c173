"""``GET /metrics`` (Prometheus text format); every request is counted and timed by the request
policy (``jobservice.http.api.policy.steps``, the ``observe`` step).

With ``JOBSERVICE_AUTH=keys`` only an admin key may read it (Prometheus sends it with
``authorization: {credentials: ...}``); with auth off it is open, like everything else.
"""

from __future__ import annotations

from flask import Blueprint, Flask, Response, current_app

from jobservice.errors import Forbidden
from jobservice.http.api.doc import RouteTable, refused
from jobservice.http.api.policy.auth import current_principal
from jobservice.metrics.collector import JobsCollector
from jobservice.metrics.process import exposition
from jobservice.wiring import Services

bp = Blueprint("metrics", __name__)
api = RouteTable(bp)


@api.route(
    "get",
    "/metrics",
    "Prometheus metrics: jobs, queues, stage times, QC failures, workers, HTTP (admin only)",
    responses={
        "200": {
            "description": "The Prometheus text exposition format 0.0.4.",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        },
        "401": refused("No valid API key."),
        "403": refused("The key is not an admin key (admin_only)."),
        "429": refused("Over the request rate."),
    },
)
def get_metrics() -> Response:
    """Every metric: this server's processes' HTTP figures, and the database-derived job figures."""
    if not current_principal().is_admin:
        raise Forbidden("admin_only", "Only an admin key may read /metrics.")
    collector: JobsCollector = current_app.extensions["jobservice_metrics"]
    body, content_type = exposition(collector)
    return Response(body, content_type=content_type)


def init_app(app: Flask, services: Services) -> None:
    """Serve /metrics (every request is counted and timed by the request policy, ``policy.py``)."""
    app.extensions["jobservice_metrics"] = JobsCollector(services)
    app.register_blueprint(bp)

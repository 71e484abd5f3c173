"""``GET /metrics`` (Prometheus text format) and the hooks that time every request.

With ``JOBSERVICE_AUTH=keys`` only an admin key may read it (Prometheus sends it with
``authorization: {credentials: ...}``); with auth off it is open, like everything else.
"""

from __future__ import annotations

import time

from flask import Blueprint, Flask, Response, current_app, g, request

from jobservice.errors import Forbidden
from jobservice.http.api.auth import current_principal
from jobservice.http.api.doc import RouteTable, refused
from jobservice.metrics.collector import JobsCollector
from jobservice.metrics.process import exposition, http_metrics
from jobservice.wiring import Services

bp = Blueprint("metrics", __name__)
api = RouteTable(bp)
UNMATCHED = "<unmatched>"  # no URL rule (a 404 or 405): one label value, not one per raw path


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


def _started() -> None:
    g.metrics_started = time.perf_counter()


def _observe(response: Response) -> Response:
    started = g.get("metrics_started")
    route = request.url_rule.rule if request.url_rule is not None else UNMATCHED
    requests, latency = http_metrics()
    requests.labels(request.method, route, str(response.status_code)).inc()
    if started is not None:
        latency.labels(request.method, route).observe(time.perf_counter() - started)
    return response


def init_app(app: Flask, services: Services) -> None:
    """Time every request (call first, so refusals by later hooks are timed too) and serve /metrics."""
    app.extensions["jobservice_metrics"] = JobsCollector(services)
    app.before_request(_started)
    app.after_request(_observe)
    app.register_blueprint(bp)

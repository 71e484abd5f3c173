"""The Flask app factory."""

from __future__ import annotations

from flask import Flask

from jobservice import tracing
from jobservice.catalog import Catalog
from jobservice.http import web
from jobservice.http.api import errors, openapi
from jobservice.http.api.native import batches as batches_api
from jobservice.http.api.native import fast_poll, fleet, jobs, metrics, quota, system
from jobservice.http.api.native import groups as groups_api
from jobservice.http.api.native import streams as streams_api
from jobservice.http.api.native import uploads as uploads_api
from jobservice.http.api.native import webhooks as webhooks_api
from jobservice.http.api.openai import videos as openai_videos
from jobservice.http.api.policy import steps as policy
from jobservice.http.web import batches as batches_web
from jobservice.http.web import groups as groups_web
from jobservice.logs import configure_logging
from jobservice.media.uploads import UploadRequest
from jobservice.settings import Settings
from jobservice.storage import ObjectStore
from jobservice.wiring import Services, build_services

MAX_FORM_PARTS = 64


def create_app(
    settings: Settings | None = None,
    *,
    services: Services | None = None,
    store: ObjectStore | None = None,
    catalog: Catalog | None = None,
) -> Flask:
    """Build the API (and, when present, the web pages) from ``settings``."""
    if settings is not None:  # gunicorn calls this in each worker, after its fork
        tracing.init_process(settings, service="jobservice-api")
    services = services or build_services(settings, store=store, catalog=catalog)
    settings = services.settings
    tracing.init_process(settings, service="jobservice-api")
    configure_logging(settings.log_level, settings.log_format)

    app = Flask(__name__, template_folder="web/templates")
    app.config.update(
        MAX_CONTENT_LENGTH=settings.max_request_mb * 2**20,
        MAX_FORM_MEMORY_SIZE=1 * 2**20,
        MAX_FORM_PARTS=MAX_FORM_PARTS,  # a job is two files and a few fields, not a thousand parts
        JSON_SORT_KEYS=False,
    )
    app.request_class = _request_class(settings)
    app.extensions["jobservice"] = services

    # First: the request policy (Host, Origin, caller, rate, metrics, nosniff) is the app's request
    # hooks, its clock wrapping everything else; the fast path below runs the same steps.
    policy.install(app, services)
    metrics.init_app(app, services)
    errors.init_app(app)
    app.register_blueprint(jobs.bp)
    app.register_blueprint(system.bp)
    app.register_blueprint(openapi.bp)  # GET /openapi.json
    app.register_blueprint(batches_api.bp)
    app.register_blueprint(groups_api.bp)
    streams_api.init_app(app, services)  # live events and Prefer: wait share one watcher
    app.register_blueprint(quota.bp)
    app.register_blueprint(fleet.bp)
    app.register_blueprint(openai_videos.bp)
    app.register_blueprint(webhooks_api.bp)  # GET /jobs/<id>/webhooks
    app.register_blueprint(uploads_api.bp)  # direct uploads
    app.register_blueprint(batches_web.bp)
    app.register_blueprint(groups_web.bp)
    web.init_app(app)
    fast_poll.install(app, services)  # plain GET /jobs/<id> polls, answered beneath Flask
    tracing.instrument_app(app)  # a span per request when tracing is on (polls on the fast path: none)
    return app


def _request_class(settings: Settings) -> type[UploadRequest]:
    spool = settings.resolved_spool_dir()
    spool.mkdir(parents=True, exist_ok=True)
    ceiling = max(settings.max_image_mb, settings.max_audio_mb) * 2**20
    return type("AppUploadRequest", (UploadRequest,), {"spool_dir": spool, "max_file_bytes": ceiling})

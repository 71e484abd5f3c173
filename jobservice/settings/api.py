"""Settings of the API processes: the server, live streams, browsers and hosts (jobservice.http,
jobservice.metrics)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, SecretStr


class ApiSettings(BaseModel):
    """API.

    Read by `jobservice api` (gunicorn), `jobservice.http` (request checks, live streams, the web
    pages) and `jobservice.metrics` (what `GET /metrics` counts).
    """

    api_host: str = Field(default="127.0.0.1", description="Address `jobservice api` binds (`--host`).")
    api_port: int = Field(default=8000, description="Port `jobservice api` listens on (`--port`).")
    api_workers: int = Field(
        default=2, ge=1, description="gunicorn processes of `jobservice api` (`--workers`)."
    )
    # scripts/bench_streams.py measured 192 streams held by one process with 256 threads.
    api_threads: int = Field(
        default=64,
        ge=1,
        description="gthread threads per API process (`--threads`); a live stream or a `Prefer: wait` "
        "holds one (see stream_limit).",
    )
    api_access_log: Literal["all", "changes", "off"] = Field(
        default="changes",
        description="gunicorn's access log: every request, every request but successful reads "
        "(GET/HEAD/OPTIONS under 400: polls, pages, downloads), or none; unhandled errors are "
        "logged by the app either way.",
    )
    stream_heartbeat_seconds: float = Field(
        default=15.0, gt=0, description="Live event streams send a keep-alive comment this often."
    )
    stream_max_seconds: float = Field(
        default=45.0, gt=0, description="A live event stream is closed after this; clients resume it."
    )
    watch_interval_seconds: float = Field(
        default=0.25, gt=0, description="How often an API process polls the jobs its streams watch."
    )
    stream_limit: int = Field(
        default=0,
        ge=0,
        description="Streams and Prefer waits one API process holds at once; 0: 3/4 of api_threads.",
    )
    public_base_url: str | None = Field(
        default=None,
        description="The URL clients reach the service at; `https://...` marks the web pages' session "
        "cookie Secure.",
    )
    allowed_origins: list[str] = Field(
        default_factory=list,
        description="Other sites whose pages may POST to this service, a JSON list (e.g. "
        '`["https://portal.example.com"]`); a browser posting from any other site gets 403 '
        "`cross_site_request`.",
    )
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description='Host names this service answers for (DNS rebinding), a JSON list; ["*"]: any. '
        "Empty: loopback names (localhost, 127.0.0.1, ::1, *.localhost) when auth is off, any host when "
        "auth is keys.",
    )
    secret_key: SecretStr | None = Field(
        default=None,
        description="Signs web-session cookies (CSRF); set the same value on every API host. Unset: "
        "generated once into var_dir/secret_key.",
    )
    metrics_settle_seconds: float = Field(
        default=60.0,
        ge=0,
        description="GET /metrics counts a job this long after it was created or finished, so a row whose "
        "transaction commits late (SQLite waits up to 30 s for its lock) is never skipped.",
    )

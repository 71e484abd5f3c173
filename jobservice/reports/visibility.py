"""What a RunReport shows to whom: deployment details (endpoints, paths, processes, cards) are
for admins; a tenant sees its run's figures, checks and warnings."""

from __future__ import annotations

from typing import Any

# Adapter telemetry a tenant may see; every other ``extra`` key is deployment detail.
TENANT_EXTRA = frozenset(
    {
        "chunk_frames",
        "settings_requested",
        "settings_in_force",
        "settings_not_honoured",
        "warnings",
        "request_id",
        "omnirt_job_id",
        "omnirt_run_id",
        "pipeline_reused",
    }
)
ADMIN_FIELDS = ("device_placement", "worker_id")


def tenant_view(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` without deployment details; ``redacted`` lists what was left out."""
    shown = dict(report)
    hidden: list[str] = []
    extra = dict(shown.get("extra") or {})
    for key in sorted(extra):
        if key not in TENANT_EXTRA:
            extra.pop(key)
            hidden.append(f"extra.{key}")
    shown["extra"] = extra
    for name in ADMIN_FIELDS:
        if shown.get(name):
            shown[name] = {} if isinstance(shown[name], dict) else "(admin only)"
            hidden.append(name)
    if hidden:
        shown["redacted"] = hidden
    return shown

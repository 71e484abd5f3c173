"""With API keys on, only an admin key reads /metrics; with auth off it is open."""

from __future__ import annotations

from typing import Any

from tests.auth.conftest import Keys, bearer, kclient, keyed_app, keyed_services, keys

__all__ = ["keyed_app", "keyed_services", "keys", "kclient"]  # fixtures used below


def test_metrics_needs_an_admin_key(kclient: Any, keys: Keys) -> None:
    anonymous = kclient.get("/metrics")
    assert anonymous.status_code == 401 and anonymous.get_json()["error"]["code"] == "unauthorized"
    user = kclient.get("/metrics", headers=bearer(keys.alice))
    assert user.status_code == 403 and user.get_json()["error"]["code"] == "admin_only"
    admin = kclient.get("/metrics", headers=bearer(keys.admin))
    assert admin.status_code == 200 and admin.mimetype == "text/plain"
    body = admin.get_data(as_text=True)
    # The refusals above were counted, by rule and status.
    assert 'jobservice_http_requests_total{method="GET",route="/metrics",status="401"}' in body
    assert 'jobservice_http_requests_total{method="GET",route="/metrics",status="403"}' in body
    assert "jobservice_jobs_finished_total" in body and "jobservice_queue_depth" in body


def test_metrics_is_open_with_auth_off(client: Any) -> None:
    response = client.get("/metrics")
    assert response.status_code == 200 and "jobservice_queue_depth" in response.get_data(as_text=True)

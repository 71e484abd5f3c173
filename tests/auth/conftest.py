"""An app with API keys on, and keys of two tenants and an admin."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from flask import Flask

from jobservice.auth.keys import create_key
from jobservice.http.app import create_app
from jobservice.settings import Settings
from jobservice.wiring import Services, build_services


@dataclass
class Keys:
    alice: str  # tenant acme, user
    bob: str  # tenant beta, user
    admin: str  # tenant ops, admin
    ids: dict[str, str]


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def keyed_services(settings: Settings) -> Iterator[Services]:
    svc = build_services(settings.model_copy(update={"auth": "keys"}))
    yield svc
    svc.db.dispose()


@pytest.fixture
def keys(keyed_services: Services) -> Keys:
    ids: dict[str, str] = {}
    secrets: dict[str, str] = {}
    with keyed_services.db.session() as session:
        for who, tenant, role in (
            ("alice", "acme", "user"),
            ("bob", "beta", "user"),
            ("admin", "ops", "admin"),
        ):
            key, secret = create_key(session, name=who, tenant=tenant, role=role)  # type: ignore[arg-type]
            ids[who], secrets[who] = key.id, secret
    return Keys(alice=secrets["alice"], bob=secrets["bob"], admin=secrets["admin"], ids=ids)


@pytest.fixture
def keyed_app(keyed_services: Services) -> Flask:
    app = create_app(services=keyed_services)
    app.config["TESTING"] = True
    return app


@pytest.fixture
def kclient(keyed_app: Flask) -> Any:
    return keyed_app.test_client()


def t2v(client: Any, secret: str, **headers: str) -> Any:
    return client.post(
        "/jobs",
        json={"task": "text2video", "prompt": "a red kite over the sea", "num_frames": 17},
        headers={**bearer(secret), **headers},
    )

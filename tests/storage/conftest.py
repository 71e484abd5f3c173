"""Fixtures for object store tests: a real moto S3 server over HTTP, and stores on both back ends.

Reusable elsewhere: ``moto_server`` (session; the endpoint URL), ``s3_settings`` (Settings for a
fresh bucket on it), ``s3_store``, ``local_store``, and ``store`` (parametrized over both).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import boto3
import pytest
from botocore.config import Config
from pydantic import SecretStr

from jobservice.settings import Settings
from jobservice.storage import LocalStore, ObjectStore, S3Store, make_store
from tests.conftest import MOTO_CREDENTIALS


@pytest.fixture
def s3_client(moto_server: str) -> object:
    """A raw boto3 client on the moto server, for assertions behind the store's back."""
    return boto3.session.Session().client(
        "s3",
        endpoint_url=moto_server,
        region_name="us-east-1",
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
        **MOTO_CREDENTIALS,
    )


@pytest.fixture
def s3_settings(moto_server: str) -> Settings:
    """Settings for an S3 store on a fresh, uniquely named bucket (created on first use)."""
    return Settings(  # type: ignore[call-arg]  # _env_file: pydantic-settings' init argument, not a field
        _env_file=None,
        storage_backend="s3",
        s3_bucket=f"test-{uuid.uuid4().hex[:24]}",
        s3_endpoint_url=moto_server,
        s3_region="us-east-1",
        s3_access_key_id=MOTO_CREDENTIALS["aws_access_key_id"],
        s3_secret_access_key=SecretStr(MOTO_CREDENTIALS["aws_secret_access_key"]),
        s3_multipart_threshold_mb=5,  # moto's minimum part size, so ~12 MB files go multipart
        s3_create_bucket=True,
    )


@pytest.fixture
def s3_store(s3_settings: Settings) -> S3Store:
    """An S3Store on its own bucket in the session's moto server."""
    store = make_store(s3_settings)
    assert isinstance(store, S3Store)
    return store


@pytest.fixture
def local_store(tmp_path: Path) -> LocalStore:
    """A LocalStore rooted in this test's tmp_path."""
    return LocalStore(tmp_path / "objects")


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest) -> ObjectStore:
    """The contract subject: each test using it runs once per back end."""
    name = "local_store" if request.param == "local" else "s3_store"
    result: ObjectStore = request.getfixturevalue(name)
    return result

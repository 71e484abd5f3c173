"""Typed settings for every jobservice process.

Each group of settings is a class in this package, named after the package that reads it
(``storage.StorageSettings`` for ``jobservice.storage``, ``queue.QueueSettings`` for the broker and
``jobservice.jobs``, ...); ``Settings`` is all of them in one pydantic-settings class, read from
``JOBSERVICE_<FIELD>`` environment variables, ``JOBSERVICE_<FIELD>_FILE`` files (mounted secrets,
``files.py``) and an optional ``.env``, built by the app factory,
the worker bootstrap or the CLI, never at import time. Tests build ``Settings(...)`` directly
instead of editing the environment. Code reads ``settings.<field>`` whatever its group.

The groups live here rather than in the packages that read them: those packages import
``jobservice.settings`` (for ``Settings``), so a group class inside them would make an import cycle
(``lint-imports``), and ``jobservice`` may not import ``workers`` at all. A new setting is a field,
with its default and a ``description``, of the group it belongs to; the configuration reference
(docs/hooks/settings_reference.py) is generated from ``GROUPS``.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from jobservice.settings.api import ApiSettings
from jobservice.settings.auth import AuthSettings
from jobservice.settings.batches import BatchSettings
from jobservice.settings.core import CoreSettings
from jobservice.settings.deployment import DeploymentSettings
from jobservice.settings.files import FileVariables
from jobservice.settings.fleet import FleetSettings
from jobservice.settings.groups import GroupSettings
from jobservice.settings.media import MediaSettings
from jobservice.settings.queue import QueueSettings
from jobservice.settings.quotas import QuotaSettings
from jobservice.settings.retention import RetentionSettings
from jobservice.settings.storage import StorageSettings
from jobservice.settings.tracing import TracingSettings
from jobservice.settings.uploads import UploadSettings
from jobservice.settings.webhooks import WebhookSettings
from jobservice.settings.workers import WorkerSettings

ENV_PREFIX = "JOBSERVICE_"


class Settings(
    BaseSettings,
    CoreSettings,
    DeploymentSettings,
    StorageSettings,
    QueueSettings,
    MediaSettings,
    UploadSettings,
    ApiSettings,
    AuthSettings,
    QuotaSettings,
    RetentionSettings,
    FleetSettings,
    BatchSettings,
    GroupSettings,
    WebhookSettings,
    WorkerSettings,
    TracingSettings,
):
    """Configuration shared by the API, the workers and the CLI: every group's fields."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        validate_by_name=True,  # Settings(queue_batch_priority=...) besides a field's aliases
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments, then ``JOBSERVICE_<NAME>``, then ``JOBSERVICE_<NAME>_FILE`` (a mounted secret,
        ``jobservice.settings.files``), then ``.env``."""
        files = FileVariables(settings_cls, prefix=ENV_PREFIX)
        return init_settings, env_settings, files, dotenv_settings, file_secret_settings

    # --- derived paths ---------------------------------------------------------------------
    def resolved_database_url(self) -> str:
        """The database URL, defaulting to SQLite under ``var_dir``."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.var_dir / 'jobservice.db').resolve()}"

    def resolved_storage_root(self) -> Path:
        """The local object store folder."""
        return (self.storage_root or self.var_dir / "objects").resolve()

    def resolved_spool_dir(self) -> Path:
        """Where uploads are streamed before they go to the object store."""
        return (self.spool_dir or self.var_dir / "spool").resolve()

    def resolved_scratch_dir(self) -> Path:
        """Where a worker keeps a job's inputs and outputs while it runs."""
        return (self.scratch_dir or self.var_dir / "scratch").resolve()


# The groups in the order the configuration reference shows them: the bases of Settings.
GROUPS: tuple[type[BaseModel], ...] = tuple(base for base in Settings.__bases__ if base is not BaseSettings)

__all__ = ["ENV_PREFIX", "GROUPS", "Settings"]

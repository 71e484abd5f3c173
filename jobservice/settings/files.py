"""Settings read from files: ``JOBSERVICE_<NAME>_FILE=/path`` gives ``<name>`` the file's content.

Secrets mounted as files (a Kubernetes Secret volume, Docker and compose secrets, systemd's
``LoadCredential=``) stay out of the environment, where ``kubectl describe``, ``/proc/<pid>/environ``
and every child process would see them. Any setting may be given so, the way the PostgreSQL and
MinIO images read theirs: the file's content, less its final line break, is the value, parsed as the
variable's would be (a JSON list for a list). Setting both ``JOBSERVICE_<NAME>`` and
``JOBSERVICE_<NAME>_FILE`` is refused (which one wins would be a guess), and so is a file that cannot
be read.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

FILE_SUFFIX = "_FILE"


def _environ() -> dict[str, str]:
    """The environment with upper-case names (pydantic-settings reads names case-insensitively)."""
    return {name.upper(): value for name, value in os.environ.items()}


class FileVariables(PydanticBaseSettingsSource):
    """The settings source of ``JOBSERVICE_<NAME>_FILE`` variables (after the environment's own)."""

    def __init__(self, settings_cls: type[BaseSettings], *, prefix: str) -> None:
        super().__init__(settings_cls)
        self.prefix = prefix.upper()
        self.environ = _environ()

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        """The content of the file ``JOBSERVICE_<FIELD>_FILE`` names (None when unset)."""
        variable = f"{self.prefix}{field_name.upper()}"
        path = self.environ.get(variable + FILE_SUFFIX)
        if not path or f"{field_name}{FILE_SUFFIX.lower()}" in self.settings_cls.model_fields:
            # (a setting that is itself a file's path, deployment_file, is read as itself)
            return None, field_name, False
        if variable in self.environ:
            raise ValueError(f"both {variable} and {variable}{FILE_SUFFIX} are set: keep one")
        try:
            with open(path, encoding="utf-8") as handle:
                content = handle.read()
        except OSError as exc:
            raise ValueError(f"{variable}{FILE_SUFFIX}: cannot read {path}: {exc.strerror}") from None
        return content.removesuffix("\n").removesuffix("\r"), field_name, False

    def __call__(self) -> dict[str, Any]:
        """Every field given by a file, prepared as an environment variable's value would be."""
        found: dict[str, Any] = {}
        for name, field in self.settings_cls.model_fields.items():
            value, key, complex_ = self.get_field_value(field, name)
            if value is not None:
                found[key] = self.prepare_field_value(name, field, value, complex_)
        return found

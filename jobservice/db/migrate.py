"""Bring a database to the newest schema with Alembic (``jobservice db upgrade``)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"  # inside the package: a wheel carries it


def alembic_config(database_url: str) -> Config:
    """An Alembic config pointed at this project's migrations and ``database_url``."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("path_separator", "os")
    config.set_main_option("file_template", "%%(year)d_%%(month).2d_%%(day).2d_%%(rev)s_%%(slug)s")
    config.attributes["database_url"] = database_url
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    """Apply every migration up to ``revision``."""
    command.upgrade(alembic_config(database_url), revision)


def heads(database_url: str = "sqlite://") -> list[str]:
    """The head revisions of the migration graph (a healthy graph has exactly one)."""
    return list(ScriptDirectory.from_config(alembic_config(database_url)).get_heads())

"""Settings that existing installations depend on stay where they were."""

from __future__ import annotations

from pathlib import Path

from jobservice.settings import Settings


def test_the_default_sqlite_file_is_var_jobservice_db(tmp_path: Path) -> None:
    # An install upgraded in place must find its jobs table where earlier versions put it.
    settings = Settings(_env_file=None, var_dir=tmp_path)  # type: ignore[call-arg]
    assert settings.resolved_database_url() == f"sqlite:///{(tmp_path / 'jobservice.db').resolve()}"

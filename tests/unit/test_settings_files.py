"""Settings from mounted files: ``JOBSERVICE_<NAME>_FILE`` (a Kubernetes Secret volume, a compose
secret) gives the setting the file's content, parsed as the variable would be."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobservice.settings import Settings


def read(**values: object) -> Settings:
    """Settings from the environment alone (no .env of the machine running the tests)."""
    return Settings(_env_file=None, **values)  # type: ignore[call-arg, arg-type]


def _secret(tmp_path: Path, name: str, content: str) -> str:
    path = tmp_path / name
    path.write_text(content)
    return str(path)


def test_a_file_variable_gives_the_setting_its_content_without_the_final_line_break(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url = "postgresql+psycopg://jobservice:s3cret@db:5432/jobservice"
    monkeypatch.setenv("JOBSERVICE_DATABASE_URL_FILE", _secret(tmp_path, "db", url + "\n"))
    monkeypatch.setenv("JOBSERVICE_S3_SECRET_ACCESS_KEY_FILE", _secret(tmp_path, "s3", "abc def\n"))
    monkeypatch.setenv("JOBSERVICE_ALLOWED_HOSTS_FILE", _secret(tmp_path, "hosts", '["jobs.example.com"]'))
    settings = read()
    assert settings.database_url == url
    assert settings.s3_secret_access_key is not None
    assert settings.s3_secret_access_key.get_secret_value() == "abc def"  # inner spaces kept
    assert settings.allowed_hosts == ["jobs.example.com"]  # a list setting's file holds its JSON


def test_an_argument_still_wins_over_a_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JOBSERVICE_BROKER_URL_FILE", _secret(tmp_path, "b", "redis://from-file:6379/0"))
    assert read().broker_url == "redis://from-file:6379/0"
    assert read(broker_url="redis://arg:6379/1").broker_url == "redis://arg:6379/1"


def test_a_variable_and_its_file_together_are_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("JOBSERVICE_SECRET_KEY", "one")
    monkeypatch.setenv("JOBSERVICE_SECRET_KEY_FILE", _secret(tmp_path, "k", "two"))
    with pytest.raises(ValueError, match="both JOBSERVICE_SECRET_KEY and JOBSERVICE_SECRET_KEY_FILE"):
        read()


def test_an_unreadable_file_is_refused_by_name(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JOBSERVICE_SECRET_KEY_FILE", str(tmp_path / "absent"))
    with pytest.raises(ValueError, match="JOBSERVICE_SECRET_KEY_FILE: cannot read"):
        read()


def test_a_setting_that_is_a_path_itself_is_not_read_as_a_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    deploy = tmp_path / "deploy.yaml"
    deploy.write_text("models: {}\n")
    monkeypatch.setenv("JOBSERVICE_DEPLOYMENT_FILE", str(deploy))
    assert read().deployment_file == deploy

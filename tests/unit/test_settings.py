"""Settings that existing installations depend on stay where they were, and every setting belongs
to exactly one described group (the configuration reference is generated from the groups)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, SecretStr

from jobservice.cli.embedded import exported
from jobservice.settings import ENV_PREFIX, GROUPS, Settings


def test_the_default_sqlite_file_is_var_jobservice_db(tmp_path: Path) -> None:
    # An install upgraded in place must find its jobs table where earlier versions put it.
    settings = Settings(_env_file=None, var_dir=tmp_path)  # type: ignore[call-arg]
    assert settings.resolved_database_url() == f"sqlite:///{(tmp_path / 'jobservice.db').resolve()}"


def test_every_setting_is_a_field_of_exactly_one_group() -> None:
    owners: dict[str, list[str]] = {}
    for group in GROUPS:
        for name in group.model_fields:
            owners.setdefault(name, []).append(group.__name__)
    twice = {name: groups for name, groups in owners.items() if len(groups) > 1}
    assert not twice, f"settings defined by more than one group: {twice}"
    loose = set(Settings.model_fields) - set(owners)
    assert not loose, f"fields of Settings that no group defines (put them in a group): {sorted(loose)}"


def test_the_groups_are_the_bases_of_settings() -> None:
    bases = [base for base in Settings.__bases__ if issubclass(base, BaseModel) and base in GROUPS]
    assert set(GROUPS) == set(bases), "GROUPS and Settings' bases name different groups"
    assert all(group.__doc__ for group in GROUPS), "each group's docstring heads its reference section"


@pytest.mark.parametrize("name", sorted(Settings.model_fields))
def test_every_setting_has_a_description(name: str) -> None:
    description = Settings.model_fields[name].description
    assert description and description.strip(), f"{ENV_PREFIX}{name.upper()} has no description"


def test_exported_settings_read_back_the_same(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # What the CLI (and the integration tests) hand a child process must give it the same settings.
    given = Settings(
        _env_file=None,  # type: ignore[call-arg]
        var_dir=tmp_path,
        storage_root=tmp_path / "objects",
        auth="off",
        lease_seconds=45.0,
        worker_preload=True,
        worker_models=["a", "b"],
        worker_skipped={"c": "needs a GPU"},
        webhook_allowed_hosts=["hooks.internal", "10.0.0.7"],
        batch_schedules=[{"spec": "batches/nightly.yaml", "cron": "0 2 * * *"}],
        secret_key=SecretStr("s3cret"),
        worker_memory_gb=16.5,
    )
    for name in list(Settings.model_fields):
        monkeypatch.delenv(f"{ENV_PREFIX}{name.upper()}", raising=False)
    for name, value in exported(given).items():
        monkeypatch.setenv(f"{ENV_PREFIX}{name.upper()}", value)
    child = Settings(_env_file=None)  # type: ignore[call-arg]
    assert child.model_dump() == given.model_dump()
    assert child.secret_key is not None and child.secret_key.get_secret_value() == "s3cret"


def test_the_batch_priority_is_a_queue_setting_and_its_old_variable_still_works(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from jobservice.settings.queue import QueueSettings

    assert "queue_batch_priority" in QueueSettings.model_fields
    monkeypatch.delenv("JOBSERVICE_QUEUE_BATCH_PRIORITY", raising=False)
    monkeypatch.setenv("JOBSERVICE_BATCH_PRIORITY", "4")
    old = Settings(_env_file=None)  # type: ignore[call-arg]
    assert old.queue_batch_priority == 4 and old.batch_priority == 4
    monkeypatch.setenv("JOBSERVICE_QUEUE_BATCH_PRIORITY", "5")  # the new name wins
    assert Settings(_env_file=None).queue_batch_priority == 5  # type: ignore[call-arg]
    assert Settings(_env_file=None, queue_batch_priority=3).queue_batch_priority == 3  # type: ignore[call-arg]
    monkeypatch.setenv("JOBSERVICE_QUEUE_BATCH_PRIORITY", "12")
    with pytest.raises(ValueError, match="QUEUE_BATCH_PRIORITY"):
        Settings(_env_file=None)  # type: ignore[call-arg]

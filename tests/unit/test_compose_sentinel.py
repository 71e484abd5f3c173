"""docker/compose.sentinel.yaml (no Docker engine runs here): every jobservice service reaches the
broker through the three sentinels, and the sentinels monitor the name the services ask for."""

from __future__ import annotations

from pathlib import Path

import yaml

from jobservice.broker import sentinel_parts
from jobservice.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def test_the_sentinel_override_points_every_process_at_the_sentinels() -> None:
    base = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    override = yaml.safe_load((ROOT / "docker" / "compose.sentinel.yaml").read_text())
    jobservice = {
        name for name, svc in base["services"].items() if "JOBSERVICE" in str(svc.get("environment"))
    }
    assert jobservice == {"migrate", "api", "worker", "beat"}
    sentinels = {f"sentinel-{n}" for n in (1, 2, 3)}
    assert sentinels <= set(override["services"]) and "redis-replica" in override["services"]
    for name in jobservice:
        env = override["services"][name]["environment"]
        settings = Settings(broker_url=env["JOBSERVICE_BROKER_URL"])
        hosts, db, _password = sentinel_parts(settings.broker_url)
        assert {host for host, _port in hosts} == sentinels and db == 0, name
        master = env["JOBSERVICE_BROKER_SENTINEL_MASTER"]
        for sentinel in sentinels:
            script = override["services"][sentinel]["command"][0]
            assert f"sentinel monitor {master} redis 6379 2" in script
            assert "--sentinel" in script
    replica = " ".join(override["services"]["redis-replica"]["command"])
    assert "--replicaof redis 6379" in replica

"""Settings every process reads: the state folder, the database and logging (jobservice.db,
jobservice.logs)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, field_validator


class CoreSettings(BaseModel):
    """Every process: state, database, logs.

    Read by every entry point (the API, the workers, the beat, the CLI): where embedded state lives,
    which database holds the jobs, and how processes log.
    """

    var_dir: Path = Field(
        default=Path("var"),
        description="Root for embedded state: the SQLite database, the local object store, the upload "
        "spool, workers' scratch space and logs.",
    )
    database_url: str = Field(
        default="",
        description="SQLAlchemy URL, e.g. `postgresql+psycopg://user:pw@db/jobservice`; empty means SQLite "
        "at var_dir/jobservice.db.",
    )
    log_level: str = Field(default="INFO", description="Level of every process's log (and gunicorn's).")
    log_format: Literal["text", "json"] = Field(
        default="text",
        description="`json`: every process (API, worker, beat, CLI) writes one JSON object per log line; "
        "lines written while a job runs carry `job_id` and `attempt` (text lines: `[job <id> attempt <n>]`).",
    )

    @field_validator("database_url")
    @classmethod
    def _strip(cls, value: str) -> str:
        return value.strip()

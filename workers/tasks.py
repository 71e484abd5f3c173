"""The Celery task: thin, like a view. It receives a job id and hands it to the pipeline."""

from __future__ import annotations

from collections.abc import Callable

from celery import Celery

from jobservice.broker import RUN_JOB_TASK
from workers.run.pipeline import run_job
from workers.runtime import WorkerRuntime


def register_tasks(app: Celery, runtime: Callable[[], WorkerRuntime], *, hard_time_limit: float) -> None:
    """Register ``jobservice.run_job`` on ``app``; ``runtime`` returns this process's WorkerRuntime."""

    @app.task(
        name=RUN_JOB_TASK,
        acks_late=True,
        reject_on_worker_lost=True,
        ignore_result=True,
        time_limit=hard_time_limit,
    )
    def run_job_task(job_id: str) -> str:
        # Failures are recorded in the jobs table by the pipeline; nothing is retried by Celery.
        return run_job(runtime(), job_id)

"""The Celery task: thin, like a view. It receives a job's message (its id, and what the dispatcher
decided for it: ``jobservice.broker.JobMessage``) and hands it to the pipeline."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from celery import Celery, Task

from jobservice.broker import MESSAGE_VERSION, RUN_JOB_TASK, JobMessage, message_version
from workers.run.pipeline import run_job
from workers.runtime import WorkerRuntime

log = logging.getLogger(__name__)


def register_tasks(app: Celery, runtime: Callable[[], WorkerRuntime], *, hard_time_limit: float) -> None:
    """Register ``jobservice.run_job`` on ``app``; ``runtime`` returns this process's WorkerRuntime."""

    @app.task(
        bind=True,
        name=RUN_JOB_TASK,
        acks_late=True,
        reject_on_worker_lost=True,
        ignore_result=True,
        time_limit=hard_time_limit,
    )
    def run_job_task(self: Task, job_id: str) -> str:
        version = message_version(self.request)
        if version > MESSAGE_VERSION:
            # A newer release's message: leave it (acknowledged, the job untouched). The reaper hands
            # the job back once its message is gone, and the dispatcher places it again.
            log.warning(
                "job %s: message format %s is newer than this worker reads (%s); left for a newer worker",
                job_id,
                version,
                MESSAGE_VERSION,
            )
            return "left"
        try:
            parsed = uuid.UUID(str(job_id))
        except ValueError:
            log.error("dropping a message with a malformed job id %r", job_id)
            return "malformed"
        # Failures are recorded in the jobs table by the pipeline; nothing is retried by Celery.
        return run_job(runtime(), JobMessage.received(parsed, self.request))

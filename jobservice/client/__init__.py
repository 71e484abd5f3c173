"""The Python client of the jobservice API (needs only requests and pydantic: no Flask, no torch).

    from jobservice.client import Client

    with Client("http://127.0.0.1:8000") as api:  # api_key defaults to JOBSERVICE_API_KEY
        job = api.submit_text2video(prompt="green hills", width=128, height=96)
        job = api.wait(job.id, on_update=lambda j: print(j.status, j.progress))
        api.download(job.id, "hills.mp4")
        # while it runs: job.preview (state, seconds), api.download_preview(job.id, "so-far.mp4")

http.py     transport: bearer key, ApiError, retries with backoff (Retry-After honoured)
sse.py      the text/event-stream parser
follow.py   waiting: the live stream, reconnecting with Last-Event-ID; polling when there is none
jobs.py     /jobs calls; uploads.py /uploads (direct uploads: declare, PUT parts, complete, delete);
            batches.py /batches calls; groups.py /job-groups calls; fleet.py /fleet and /usage;
            api.py the Client;
models.py   the typed answers
"""

from jobservice.client import models
from jobservice.client.api import Client
from jobservice.client.http import ApiError, Backoff, WaitTimeout
from jobservice.client.models import *  # noqa: F403  (the typed answers: models.__all__)
from jobservice.client.uploads import UploadId
from jobservice.uploads.views import UploadPart, UploadView

# The client, its errors and upload types, and every typed answer (one list of those: models').
__all__ = ["ApiError", "Backoff", "Client", "UploadId", "UploadPart", "UploadView", "WaitTimeout"]
__all__ += models.__all__

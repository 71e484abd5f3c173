"""Workers: the Celery entry (celery_worker, bootstrap, tasks), one run of a job (run/), media
(the streamed encoder), the output gate (validation/) and the model adapters (adapters/).

May import the ``jobservice`` domain; torch is imported only inside adapters, after the launcher
pinned the worker's cards.
"""

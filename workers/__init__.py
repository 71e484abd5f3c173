"""Workers: the Celery entry (celery_worker, bootstrap, tasks), one run of a job (run/), media
(the streamed encoder), the output gate (validation/) and the model adapters (adapters/). A worker
process is one card group of the fleet: ``card_group`` keeps its row and residency, ``card_clock``
its ledger, ``resident`` the models it holds. ("Group" alone is a job group, ``jobservice.groups``.)

May import the ``jobservice`` domain; torch is imported only inside adapters, after the launcher
pinned the worker's cards.
"""

"""Nightly regressions: a spec's cases run as jobs, compared with a baseline, reported.

The package is named for what it is (a nightly regression run), not for the word "batch", which in
this service means any job that is not interactive. The public names keep "batch": the routes
(``/batches``), the CLI (``jobservice batch``), the tables and the spec files (``batches/``).

spec.py            the YAML spec (parsing and checking; no service access)
figures.py         which figures of a RunReport are tracked, and how they are read
measure.py         how its jobs are measured: undisturbed by the worker's own finishing, unless told not
stats.py           noise-aware comparison of repeated samples (medians, robust spread)
plan.py            a spec checked against the catalog, with its inputs content-checked
states.py          BatchStatus and the compare-and-swap moves: the only code that sets a run's status
service.py         creating (as a job group with a spec), growing, resuming and canceling runs
slots.py           the runs a spec asks for (case x repeat) and the job rows that queue them
pins.py            accepting a run as the new normal (the pinned baseline)
finalize.py        when every job ended: results, baseline, comparison, environment
compare.py         the per-case verdicts of a candidate run against a baseline
environment.py     what a run ran on (versions, host), for the report
presenters.py      the JSON views of a run (API, CLI), built from rows
views.py           their shape: plain pydantic models (the Python client reads answers into them)
render.py          the report as JSON, CSV and Markdown
webhook_events.py  the events a run sends to webhooks
schedule.py        the control process (``jobservice beat``): nightly schedules and the finishing
                   tick; beat_app.py is its Celery entry point

Domain: imports jobs, db, catalog, storage, media, reports; never the surfaces (their HTTP routes
are ``jobservice.http.api.native.batches``, pages ``jobservice.http.web.batches``, commands
``jobservice.cli.batches``).
"""

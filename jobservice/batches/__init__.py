"""Nightly regression batches: a spec's cases run as jobs, compared with a baseline, reported.

spec.py      the YAML batch spec (parsing and checking; no service access)
metrics.py   which figures of a RunReport are tracked, and how they are read
stats.py     noise-aware comparison of repeated samples (medians, robust spread)
plan.py      a spec checked against the catalog, with its inputs content-checked
states.py    BatchStatus and the compare-and-swap moves: the only code that sets a batch's status
service.py   creating, resuming, canceling and pinning batches
finalize.py  when every job ended: results, baseline, comparison, environment
compare.py   the per-case verdicts of a candidate batch against a baseline
schemas.py   the JSON views of a batch (API, CLI), built from rows
views.py     their shape: plain pydantic models (the Python client reads answers into them)
render.py    the report as JSON, CSV and Markdown
schedule.py  the control process (``jobservice beat``): nightly schedules and the finishing tick;
             beat_app.py is its Celery entry point

Domain: imports jobs, db, catalog, storage, media, reports; never the surfaces (their HTTP routes
are ``jobservice.http.api.native.batches``, pages ``jobservice.http.web.batches``, commands
``jobservice.cli.batches``).
"""

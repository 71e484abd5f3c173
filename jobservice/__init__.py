"""jobservice: a queue-backed batch video job service (the API side and the shared domain).

Domain packages: ``db`` (engine, tables, migrations), ``jobs`` (state machine, submit,
reaper), ``catalog`` (a leaf of data types), ``families`` (one module per model family),
``storage``, ``batches``, ``media`` (probe, uploads), ``reports`` (RunReport), ``fleet``
(placement, worker presence); leaf modules ``settings``, ``errors``, ``logs``; ``wiring`` builds
the collaborators every entry point shares and ``broker`` the Celery wiring (one queue per
model). Surfaces: ``http`` (api/, web/) and ``cli``; ``client`` is the Python client of the HTTP
API (requests and pydantic only: the CLI's submit and status use it).

Rules (checked by import-linter in ./scripts/test.sh): nothing here imports ``workers`` or torch;
domain packages never import the surfaces; no import cycles.
"""

__version__ = "0.2.0"

"""The fleet: the card groups that run jobs, which job each runs next, and what it costs.

- The decision, pure (no database, no broker; an import rule holds it): ``policy`` (residency and
  fair share), ``simulate`` (the same policy in virtual time) and ``forecast`` (ETAs from it).
- The decision in the service: ``dispatch`` (hands each free card group its job), ``shares`` (each
  tenant's fair-share level), ``eta`` (the forecast from the database), ``costs``, ``wake``.
- The card groups: ``card_groups`` (their rows and ledger), ``presence`` (the workers' rows),
  ``placement`` (device groups and pinning), ``stopping``; ``usage`` (card-seconds per job);
  ``status`` and ``views`` (``GET /fleet``, ``GET /usage``).

The trace format, replay and the static baseline are the benchmark's: ``scripts/bench_lib/``.
Domain: imports catalog and db; never the surfaces.
"""

"""Metrics for Prometheus: job, queue and fleet figures derived from the database
(``collector``, ``counters``, ``live``) and this process's own HTTP figures (``process``).

Domain: imports db, fleet and wiring; never the surfaces (GET /metrics lives in
``jobservice.http.api.native.metrics``).
"""

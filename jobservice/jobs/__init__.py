"""Jobs: the state machine (transitions), leases and queue-message bookkeeping (leases), reading
jobs (queries), accepting a job (submit), the reaper, idempotency keys and the read models
(views: their shape, plain pydantic; schemas: built from rows).

Domain: imports db, catalog, broker, media, storage, wiring and errors; never the HTTP, web or
CLI surfaces.
"""

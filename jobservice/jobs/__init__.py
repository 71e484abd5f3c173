"""Jobs: the state machine (transitions), accepting a job (submit), the queue, the reaper,
idempotency keys and the read models (schemas).

Domain: imports db, catalog, backends, storage, media, reports; never the HTTP, web or CLI surfaces.
"""

"""One run of one job: the pipeline, what an adapter talks to (context), heartbeat, the RunReport
it builds (the worker's resident models are ``workers.resident``).

Imports the ``jobservice`` domain, media, validation and adapters.
"""

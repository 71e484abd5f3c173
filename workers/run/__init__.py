"""One run of one job: the pipeline, what an adapter talks to (context), heartbeat, the RunReport
it builds and the resident models.

Imports the ``jobservice`` domain, media, validation and adapters.
"""
